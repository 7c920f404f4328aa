"""The ``bench`` command (also mounted as ``splitstack bench``)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(help="Load tests, go/no-go gates, comparisons and reports for splitstack.",
                  no_args_is_help=True, add_completion=False)
console = Console(stderr=True)
out = Console(width=None if sys.stdout.isatty() else 160)  # logs and CI: no wrapping at 80


def _target(stack: str | None, url: str | None, model: str | None, api_key_env: str | None,
            max_model_len: int | None, queue=None, pipeline: bool = False):
    from bench.target import QueueOptions, from_stack, from_url

    queue = queue or QueueOptions()
    # A pipeline run on a deployed stack (or on an explicit queue) takes its names from the stack's
    # spec; --url then only serves readiness probes and /metrics.
    deployed = pipeline and (queue.explicit_queue or (stack not in (None, "local")))
    if url and not deployed:
        if not model:
            raise typer.BadParameter("--url needs --model (the served model name)")
        return from_url(url, model, api_key_env, max_model_len)
    return from_stack(stack or "local", queue=queue, url=url, model=model, api_key_env=api_key_env,
                      pipeline=pipeline)


# Pipeline runs on a queue the local stack launcher did not start (a deployed stack): see
# docs/bench-pipeline.md. Shared by `run` and `gate`.
QUEUE_URL = typer.Option(None, "--queue-url", help="Redis URL of the stack's queue (pipeline; a password here "
                         "shows in `ps`: prefer --queue-url-env). Default for a deployed stack: $<queue.url_env>.")
QUEUE_URL_ENV = typer.Option(None, "--queue-url-env", help="Env var holding the queue's Redis URL.")
STREAM = typer.Option(None, "--stream", help="Job stream (default: the stack spec's queue.stream).")
GROUP = typer.Option(None, "--group", help="Workers' consumer group (default: queue.group).")
DLQ = typer.Option(None, "--dead-letter-stream", help="Dead-letter stream (default: queue.dead_letter_stream).")
OUTPUT_DIR = typer.Option(None, "--output-dir", help="The workers' output store as mounted here: outputs "
                          "verified; without it completion comes from the job records in Redis.")
PROM_URL = typer.Option(None, "--prometheus-url", help="Prometheus scraping the server: the server-metric "
                        "diff when its /metrics is not reachable from here.")
DOCS_AT = typer.Option(None, "--documents-at", help="Where the workers read the bench's PDFs: a path every "
                       "worker mounts or an allow-listed http(s) URL prefix (same file names).")


def _queue(queue_url, queue_url_env, stream, group, dead_letter_stream, output_dir, prometheus_url, documents_at):
    from bench.target import QueueOptions, mask_url

    if queue_url and mask_url(queue_url) != queue_url:
        console.print("[yellow]warning:[/] --queue-url carries a password, visible in shell history and `ps`; "
                      "prefer --queue-url-env VAR", soft_wrap=True)
    return QueueOptions(queue_url, queue_url_env, stream, group, dead_letter_stream, output_dir,
                        prometheus_url, documents_at)


def _out_dir(out_dir: Path | None, name: str) -> Path:
    return out_dir or Path(".state/bench") / f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{name}"


def _fail(msg: str, code: int = 2) -> None:
    console.print(f"[red]error:[/red] {msg}", soft_wrap=True)
    raise typer.Exit(code)


def print_summary(s: dict) -> None:
    t = Table(title=f"{s['run']['scenario']}: {s['run']['load_label']}, window {s['window_s']:.1f} s")
    for c in ("metric", "n", "mean", "p50", "p90", "p95", "p99", "max"):
        t.add_column(c, justify="right" if c != "metric" else "left")
    for name, d in s["latency"].items():
        if d.get("n"):
            t.add_row(name, str(d["n"]), *(f"{d[k]:.3f}" for k in ("mean", "p50", "p90", "p95", "p99", "max")))
    out.print(t)
    out.print("requests: " + ", ".join(f"{k}={v}" for k, v in s["requests"].items()))
    out.print("throughput: " + ", ".join(f"{k}={v:.2f}" for k, v in s["throughput"].items()))
    if s.get("errors_by_reason"):
        out.print(f"errors: {s['errors_by_reason']}")
    if s.get("pipeline"):
        from bench.pipeline import summary_lines as pipeline_lines

        for line in pipeline_lines(s["pipeline"]):
            out.print(line, soft_wrap=True)
    for a in s.get("agreement", []):
        out.print(f"server agreement {a['metric']}: client {a['client_ms']:.2f} ms vs server {a['server_ms']:.2f} ms "
                  f"(tolerance {a['tolerance_ms']:.2f} ms): {'agrees' if a['agrees'] else 'DIFFERS'}")
    if s.get("tokenizer_crosscheck"):
        from bench.tokcheck import summary_lines

        for line in summary_lines(s["tokenizer_crosscheck"]):
            out.print(line, markup=False, highlight=False)
    v = s["validity"]
    out.print(f"run validity: {'[green]valid[/green]' if v['valid'] else '[red]INVALID[/red]'}")
    for c in v["checks"]:
        if not c["passed"]:
            out.print(f"  [red]x[/red] {c['check']}: {c['measured']} (need {c['threshold']}): {c['why']}")


def print_gates(g: dict) -> None:
    t = Table(title="gates")
    for c in ("gate", "kind", "measured", "threshold", "result", "why"):
        t.add_column(c)
    colors = {"pass": "green", "fail": "red", "not_evaluable": "yellow"}
    for r in g["results"]:
        t.add_row(r["name"], r["kind"], str(r["measured"]), r["threshold"],
                  f"[{colors[r['status']]}]{r['status']}[/]", r["reason"])
    out.print(t)
    color = {"go": "green", "no-go": "red", "invalid": "yellow"}[g["verdict"]]
    out.print(f"verdict: [bold {color}]{g['verdict'].upper()}[/] (exit {g['exit_code']}): {g['reason']}")


def _run(scn, target, limits=None, quiet=False, tokenizer=None):
    from bench.progress import live_progress
    from bench.runner import run_scenario

    with live_progress(scn.load, console, enabled=not quiet and sys.stderr.isatty()) as cb:
        return run_scenario(scn, target, limits=limits, progress=cb, tokenizer=tokenizer)


@app.command()
def run(
    scenario: str = typer.Argument(..., help="Scenario name (bench/scenarios) or YAML path."),
    stack: str | None = typer.Option(None, help="Target a running splitstack stack (default local)."),
    url: str | None = typer.Option(None, help="Target any OpenAI-compatible server instead."),
    model: str | None = typer.Option(None, help="Served model name (with --url)."),
    api_key_env: str | None = typer.Option(None, help="Env var holding the API key (with --url)."),
    max_model_len: int | None = typer.Option(None, help="Context window for the guard (with --url)."),
    rate_rps: float | None = typer.Option(None, "--rate", help="Open loop at this rate, req/s."),
    concurrency: int | None = typer.Option(None, help="Closed loop with this many users."),
    duration_s: float | None = typer.Option(None, "--duration", help="Measured window, s."),
    count: int | None = typer.Option(None, help="Measured requests."),
    processes: int | None = typer.Option(None, help="Client processes."),
    seed: int | None = typer.Option(None, help="Seed."),
    out_dir: Path | None = typer.Option(None, "--out", help="Run folder (default .state/bench/TIME-NAME)."),
    tokenizer: str | None = typer.Option(
        None, help="Hugging Face tokenizer directory: cross-check the server's token counts client-side "
        "(a warning only; overrides the scenario's tokenizer)."),
    queue_url: str | None = QUEUE_URL, queue_url_env: str | None = QUEUE_URL_ENV,
    stream: str | None = STREAM, group: str | None = GROUP, dead_letter_stream: str | None = DLQ,
    output_dir: Path | None = OUTPUT_DIR, prometheus_url: str | None = PROM_URL,
    documents_at: str | None = DOCS_AT,
) -> None:
    """Run a scenario; write records.jsonl, summary.json and report.html. Exit 2 if the run is invalid."""
    from bench.report.writer import write_run
    from bench.scenario import load_scenario

    try:
        scn = load_scenario(scenario, {"rate_rps": rate_rps, "concurrency": concurrency, "duration_s": duration_s,
                                       "count": count, "processes": processes, "seed": seed})
        queue = _queue(queue_url, queue_url_env, stream, group, dead_letter_stream, output_dir, prometheus_url,
                       documents_at)
        target = _target(stack, url, model, api_key_env, max_model_len, queue, scn.kind == "pipeline")
        res = _run(scn, target, tokenizer=tokenizer)
    except (ValueError, RuntimeError) as exc:
        _fail(str(exc))
    paths = write_run(_out_dir(out_dir, scn.name), res.records, res.summary)
    print_summary(res.summary)
    out.print(f"report: {paths['report']}")
    raise typer.Exit(0 if res.summary["validity"]["valid"] else 2)


def gate_run(gate_file: str, stack: str | None = "local", url: str | None = None, model: str | None = None,
             api_key_env: str | None = None, baseline: Path | None = None, out_dir: Path | None = None,
             quiet: bool = False, target=None, queue=None) -> int:
    """Run a gate file's scenario against the target, evaluate its gates, print the verdict and
    write the report. Returns the exit code (0 go, 1 no-go, 2 invalid). ``make demo`` calls this."""
    import httpx

    from bench.gating.context import GateContext
    from bench.gating.spec import load_gate_file
    from bench.gating.verdict import evaluate, verdict
    from bench.records import read_jsonl
    from bench.report.writer import load_summary, write_run
    from bench.scenario import load_scenario

    try:
        gf = load_gate_file(gate_file)
        scn = load_scenario(gf.scenario, gf.load)
        target = target or _target(stack, url, model, api_key_env, None, queue, scn.kind == "pipeline")
        res = _run(scn, target, gf.validity, quiet)
    except (ValueError, RuntimeError) as exc:
        console.print(f"[red]error:[/red] {exc}", soft_wrap=True)
        return 2
    base_sum = base_rec = None
    if baseline is not None:
        base_sum = load_summary(baseline)
        base_rec = list(read_jsonl(baseline / "records.jsonl"))
    with httpx.Client(timeout=30.0) as http:
        ctx = GateContext(res.summary, res.records, target, http, base_sum, base_rec)
        results = evaluate(gf.gates, ctx)
    bad = [f"{c['check']}: {c['why']}" for c in res.summary["validity"]["checks"] if not c["passed"]]
    g = verdict(results, res.summary["validity"]["valid"], bad)
    g["gate_file"] = gf.name
    paths = write_run(_out_dir(out_dir, f"gate-{gf.name}"), res.records, res.summary, gates=g)
    print_summary(res.summary)
    print_gates(g)
    out.print(f"report: {paths['report']}")
    return g["exit_code"]


@app.command()
def gate(
    gate_file: str = typer.Option(..., "--gate", help="Gate file (bench/gates/NAME.yaml or a path)."),
    stack: str | None = typer.Option("local", help="Running stack to test."),
    url: str | None = typer.Option(None, help="Or any OpenAI-compatible server."),
    model: str | None = typer.Option(None),
    api_key_env: str | None = typer.Option(None),
    baseline: Path | None = typer.Option(None, help="Baseline run folder for *_vs_baseline / equivalence gates."),
    out_dir: Path | None = typer.Option(None, "--out"),
    queue_url: str | None = QUEUE_URL, queue_url_env: str | None = QUEUE_URL_ENV,
    stream: str | None = STREAM, group: str | None = GROUP, dead_letter_stream: str | None = DLQ,
    output_dir: Path | None = OUTPUT_DIR, prometheus_url: str | None = PROM_URL,
    documents_at: str | None = DOCS_AT,
) -> None:
    """Go/no-go: exit 0 go, 1 no-go, 2 invalid run (or a required gate could not be evaluated)."""
    queue = _queue(queue_url, queue_url_env, stream, group, dead_letter_stream, output_dir, prometheus_url,
                   documents_at)
    raise typer.Exit(gate_run(gate_file, stack, url, model, api_key_env, baseline, out_dir, queue=queue))


@app.command()
def check(
    run_dir: Path = typer.Argument(..., help="Run folder (records.jsonl + summary.json)."),
    gate_file: str = typer.Option(..., "--gate"),
    baseline: Path | None = typer.Option(None),
) -> None:
    """Evaluate a gate file's offline gates on an existing run (e.g. one ingested from Locust)."""
    from bench.gating.context import GateContext
    from bench.gating.spec import load_gate_file
    from bench.gating.verdict import evaluate, verdict
    from bench.records import read_jsonl
    from bench.report.writer import load_summary, write_run

    try:
        gf = load_gate_file(gate_file)
        summary = load_summary(run_dir)
        records = list(read_jsonl(run_dir / "records.jsonl"))
        bs = load_summary(baseline) if baseline else None
        br = list(read_jsonl(baseline / "records.jsonl")) if baseline else None
    except (ValueError, FileNotFoundError) as exc:
        _fail(str(exc))
    results = evaluate(gf.gates, GateContext(summary, records, None, None, bs, br))
    bad = [f"{c['check']}: {c['why']}" for c in summary["validity"]["checks"] if not c["passed"]]
    g = verdict(results, summary["validity"]["valid"], bad)
    write_run(run_dir, records, {k: v for k, v in summary.items() if k != "gates"}, gates=g)
    print_gates(g)
    raise typer.Exit(g["exit_code"])


@app.command()
def compare(
    baseline: Path = typer.Argument(..., help="Baseline run folder."),
    candidate: Path = typer.Argument(..., help="Candidate run folder."),
    resamples: int = typer.Option(2000, help="Bootstrap resamples."),
    json_out: Path | None = typer.Option(None, "--json", help="Write the comparison as JSON."),
) -> None:
    """Bootstrap CIs of candidate vs baseline; exit 1 if anything is significantly worse."""
    from bench.compare import compare as do_compare
    from bench.records import read_jsonl
    from bench.report.writer import load_summary

    try:
        b = (list(read_jsonl(baseline / "records.jsonl")), load_summary(baseline))
        c = (list(read_jsonl(candidate / "records.jsonl")), load_summary(candidate))
        res = do_compare(b, c, resamples=resamples)
    except (ValueError, FileNotFoundError) as exc:
        _fail(str(exc))
    t = Table(title=f"{candidate} vs {baseline} ({res['confidence']:.0%} bootstrap CI)")
    for col in ("metric", "stat", "baseline", "candidate", "change", "CI", "call"):
        t.add_column(col)
    for r in res["rows"]:
        rel = r["metric"] != "error_rate"
        f = (lambda v: f"{v:+.1%}") if rel else (lambda v: f"{v:+.4f}")
        t.add_row(r["metric"], r["stat"], f"{r['baseline']:.3f}" if r.get("baseline") is not None else "—",
                  f"{r['candidate']:.3f}" if r.get("candidate") is not None else "—",
                  f(r["change"]) if "change" in r else "—",
                  f"{f(r['ci_low'])} .. {f(r['ci_high'])}" if "ci_low" in r else r.get("note", ""), r.get("call", ""))
    out.print(t)
    if not all(res["validity"].values()):
        out.print(f"[yellow]warning:[/] run validity {res['validity']}: an invalid run's numbers describe the client")
    if json_out:
        json_out.write_text(json.dumps(res, indent=2))
    raise typer.Exit(1 if any(r.get("call") == "worse" for r in res["rows"]) else 0)


@app.command()
def sweep(
    scenario: str = typer.Argument(...),
    max_value: float = typer.Option(..., "--max", help="SLO threshold for the metric (its unit)."),
    metric: str = typer.Option("ttft_ms"),
    percentile: float = typer.Option(95),
    start_rps: float = typer.Option(1.0, "--start"),
    factor: float = typer.Option(2.0),
    max_rps: float = typer.Option(1000.0),
    repeats: int = typer.Option(3),
    bisect_steps: int = typer.Option(3),
    duration_s: float | None = typer.Option(None, "--duration", help="Measured seconds per point."),
    stack: str | None = typer.Option("local"),
    url: str | None = typer.Option(None),
    model: str | None = typer.Option(None),
    api_key_env: str | None = typer.Option(None),
    out_dir: Path | None = typer.Option(None, "--out"),
) -> None:
    """Find the knee and the highest rate that meets the SLO (bracketing + interpolation, CIs)."""
    from bench.report.writer import write_run
    from bench.runner import run_scenario
    from bench.scenario import load_scenario
    from bench.search import SearchSpec, search

    target = _target(stack, url, model, api_key_env, None)
    spec = SearchSpec(metric=metric, percentile=percentile, max_value=max_value, start_rps=start_rps,
                      factor=factor, max_rps=max_rps, repeats=repeats, bisect_steps=bisect_steps)
    last = {}

    def run_at(rate: float, rep: int) -> dict:
        scn = load_scenario(scenario, {"rate_rps": rate, "seed": rep, "duration_s": duration_s})
        res = run_scenario(scn, target)
        last["res"] = res
        return res.summary

    result = search(run_at, spec, log=lambda m: console.print(m))
    res = last["res"]
    paths = write_run(_out_dir(out_dir, "sweep"), res.records, res.summary, sweep=result)
    out.print(result["conclusion"])
    out.print(f"report: {paths['report']}")


@app.command()
def report(run_dir: Path = typer.Argument(...)) -> None:
    """Re-render report.html of a run folder from its files."""
    from bench.records import read_jsonl
    from bench.report.html import render
    from bench.report.writer import load_summary

    s = load_summary(run_dir)
    (run_dir / "report.html").write_text(render(s, list(read_jsonl(run_dir / "records.jsonl"))))
    out.print(f"report: {run_dir / 'report.html'}")


@app.command()
def scenarios() -> None:
    """List bundled scenarios and gate files."""
    from bench.gating.spec import GATE_DIR
    from bench.scenario import SCENARIO_DIR

    for p in sorted(SCENARIO_DIR.glob("*.yaml")):
        out.print(f"scenario  {p.stem}")
    for p in sorted(GATE_DIR.glob("*.yaml")):
        out.print(f"gate      {p.stem}")


def _mount_locust() -> None:
    try:
        from splitstack.cli.bench_locust import locust_app
    except ImportError:
        return
    app.add_typer(locust_app, name="locust")


_mount_locust()
