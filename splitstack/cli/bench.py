"""The ``bench`` command (also mounted as ``splitstack bench``): parses options, calls the bench
package, prints what it returns.

Exit codes: 0 success (a valid run; a GO verdict), 1 NO-GO or a significant regression
(`compare`), 2 invalid run, bad input or an unreachable target.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from bench.compare import MIN_EFFECT, invalid_runs, regressions
from bench.compare import compare as do_compare
from bench.gating.run import check_run, load_run, run_gate
from bench.gating.spec import GATE_DIR
from bench.progress import every_s, plan_for, run_progress
from bench.records import read_jsonl
from bench.report.compare_html import render_comparison
from bench.report.writer import load_summary, new_run_dir, records_path, write_report, write_run
from bench.runner import run_scenario
from bench.scenario import SCENARIO_DIR, load_scenario
from bench.search import SearchSpec, search
from bench.summary import CompareRow, GateVerdict, Summary
from bench.target import QueueOptions, mask_url, resolve
from contract.enums import DeploymentMode
from splitstack.cli.bench_locust import locust_app
from splitstack.cli.bench_output import console, fail, out, print_gates, print_summary
from splitstack.cli.options import (
    ApiKeyEnv,
    OptionalStack,
    ProgressEvery,
    TargetModel,
    TargetUrl,
    Tokenizer,
    add_version,
    epilog,
)

app = typer.Typer(no_args_is_help=True, add_completion=False)
add_version(app, "bench", "Load tests, go/no-go gates, comparisons and reports for splitstack.")
app.add_typer(locust_app, name="locust")


# Pipeline runs on a queue the local stack launcher did not start (a deployed stack): see
# docs/bench-pipeline.md. Shared by `run` and `gate`.
QUEUE_URL = typer.Option(None, "--queue-url", help="Redis URL of the stack's queue (pipeline; a password here "
                         "shows in `ps`: prefer --queue-url-env). Default for a deployed stack: $<queue.url_env>.")
QUEUE_URL_ENV = typer.Option(None, "--queue-url-env", help="Env var holding the queue's Redis URL.")
STREAM = typer.Option(None, "--stream", help="Job stream (default: the stack spec's queue.stream).")
GROUP = typer.Option(None, "--group", help="Workers' consumer group (default: queue.group).")
DLQ = typer.Option(None, "--dead-letter-stream", help="Dead-letter stream (default: queue.dead_letter_stream).")
OUTPUT_DIR = typer.Option(None, "--outputs-at", help="Where the workers' output store is mounted here: "
                          "outputs verified; without it completion comes from the job records in Redis.")
PROM_URL = typer.Option(None, "--prometheus-url", help="Prometheus scraping the server: the server-metric "
                        "diff when its /metrics is not reachable from here.")
TOPOLOGY = typer.Option(None, "--topology", help="What runs behind the target, recorded in the summary and "
                        "shown by `bench compare` (default: the stack spec's deployment_mode), e.g. monolithic "
                        "for workers that each call their own private engine.")
DOCS_AT = typer.Option(None, "--documents-at", help="Where the workers read the bench's PDFs: a path every "
                       "worker mounts or an allow-listed http(s) URL prefix (same file names).")


def _queue(queue_url, queue_url_env, stream, group, dead_letter_stream, output_dir, prometheus_url,
           documents_at) -> QueueOptions:
    if queue_url and mask_url(queue_url) != queue_url:
        console.print("[yellow]warning:[/] --queue-url carries a password, visible in shell history and `ps`; "
                      "prefer --queue-url-env VAR", soft_wrap=True)
    return QueueOptions(queue_url, queue_url_env, stream, group, dead_letter_stream, output_dir,
                        prometheus_url, documents_at)


def _run(scn, target, tokenizer=None, progress_every: float | None = None, label: str | None = None):
    every = every_s(progress_every)
    return run_scenario(scn, target, tokenizer=tokenizer, shown=lambda: run_progress(
        plan_for(scn.load, label), console, every, counts=scn.load.processes == 1))


RUN_EXITS = ("0 a valid run; 2 an invalid run (run folder written), bad input or a target that cannot be "
             "trusted (nothing sent, no run folder)")
GATE_EXITS = "0 go; 1 no-go; 2 an invalid run, a required gate not evaluated, bad input or an untrusted target"


@app.command(epilog=epilog("bench run chat-smoke --stack local --duration-s 30",
                           "bench run chat-smoke --url http://vllm.example:8000 --model my-model "
                           "--api-key-env VLLM_API_KEY --rate 5 --count 200",
                           "bench run pipeline-smoke --stack local --concurrency 4", exits=RUN_EXITS))
def run(
    scenario: str = typer.Argument(..., help="Scenario name (bench/scenarios) or YAML path."),
    stack: OptionalStack = None,
    url: TargetUrl = None,
    model: TargetModel = None,
    api_key_env: ApiKeyEnv = None,
    max_model_len: int | None = typer.Option(None, help="Context window for the guard (with --url).", min=1),
    rate_rps: float | None = typer.Option(None, "--rate", help="Open loop at this rate, req/s.", min=0),
    concurrency: int | None = typer.Option(None, help="Closed loop with this many users.", min=1),
    duration_s: float | None = typer.Option(None, "--duration-s", help="Measured window, seconds.", min=0),
    count: int | None = typer.Option(None, help="Measured requests.", min=1),
    processes: int | None = typer.Option(None, help="Client processes.", min=1),
    seed: int | None = typer.Option(None, help="Seed.", min=0),
    fail_fast_s: float | None = typer.Option(
        None, "--fail-fast-s", min=0, help="Stop as invalid when every request that finished in this many seconds "
        "failed (default: the scenario's load.fail_fast_s, 30; 0: never stop early)."),
    normalize: bool | None = typer.Option(
        None, "--normalize/--no-normalize", help="Open loop: rescale the measured arrivals to exactly the rate "
        "(default: on with --count, off with --duration-s)."),
    out_dir: Path | None = typer.Option(None, "--out", help="Run folder (default .state/bench/TIME-NAME)."),
    tokenizer: Tokenizer = None,
    queue_url: str | None = QUEUE_URL, queue_url_env: str | None = QUEUE_URL_ENV,
    stream: str | None = STREAM, group: str | None = GROUP, dead_letter_stream: str | None = DLQ,
    output_dir: Path | None = OUTPUT_DIR, prometheus_url: str | None = PROM_URL,
    documents_at: str | None = DOCS_AT, topology: DeploymentMode | None = TOPOLOGY,
    progress_every: ProgressEvery = None,
) -> None:
    """Run a scenario; write its run folder: records.jsonl, summary.json, report.html, requests.csv and
    timeseries.csv (columns: docs/bench-report.md).

    Exit codes: 0 a valid run; 2 an invalid run (the validity checks of its summary failed: the
    client could not keep up, more errors than the scenario's validity.error_rate_max allows (5 %
    by default), or nothing succeeded; the run folder is still written), bad input, or a target
    that cannot be trusted (a stopped stack or one whose ports another stack holds, a server that
    is down or refuses the API key: refused before anything is sent, no run folder).

    """
    try:
        run_dir = new_run_dir(out_dir, Path(scenario).stem)
        scn = load_scenario(scenario, {"rate_rps": rate_rps, "concurrency": concurrency, "duration_s": duration_s,
                                       "count": count, "processes": processes, "seed": seed,
                                       "normalize": normalize, "fail_fast_s": fail_fast_s})
        queue = _queue(queue_url, queue_url_env, stream, group, dead_letter_stream, output_dir, prometheus_url,
                       documents_at)
        target = resolve(stack, url, model, api_key_env, max_model_len, queue, scn.kind == "pipeline",
                         topology.value if topology else None)
        res = _run(scn, target, tokenizer=tokenizer, progress_every=progress_every)
    except (ValueError, RuntimeError) as exc:
        raise fail(str(exc)) from None
    paths = write_run(run_dir, res.records, res.summary)
    print_summary(res.summary)
    out.print(f"report: {paths['report']}")
    raise typer.Exit(0 if res.summary["validity"]["valid"] else 2)


@app.command(epilog=epilog("bench gate --gate chat-local --stack local",
                           "bench gate --gate chat-local --stack local --baseline .state/bench/BASELINE_RUN",
                           exits=GATE_EXITS))
def gate(
    gate_file: str = typer.Option(..., "--gate", help="Gate file (bench/gates/NAME.yaml or a path)."),
    stack: OptionalStack = None,
    url: TargetUrl = None,
    model: TargetModel = None,
    api_key_env: ApiKeyEnv = None,
    tokenizer: Tokenizer = None,
    baseline: Path | None = typer.Option(None, help="Baseline run folder for *_vs_baseline / equivalence gates."),
    out_dir: Path | None = typer.Option(None, "--out"),
    queue_url: str | None = QUEUE_URL, queue_url_env: str | None = QUEUE_URL_ENV,
    stream: str | None = STREAM, group: str | None = GROUP, dead_letter_stream: str | None = DLQ,
    output_dir: Path | None = OUTPUT_DIR, prometheus_url: str | None = PROM_URL,
    documents_at: str | None = DOCS_AT, topology: DeploymentMode | None = TOPOLOGY,
    progress_every: ProgressEvery = None,
) -> None:
    """Go/no-go: exit 0 go, 1 no-go, 2 invalid run (or a required gate could not be evaluated), bad
    input, or a target that cannot be trusted (as `bench run`). Writes the run folder as `bench run`
    does (records.jsonl, summary.json with the verdict, report.html, requests.csv, timeseries.csv).
    """
    queue = _queue(queue_url, queue_url_env, stream, group, dead_letter_stream, output_dir, prometheus_url,
                   documents_at)
    try:
        result = run_gate(gate_file, stack=stack, url=url, model=model, api_key_env=api_key_env, queue=queue,
                          baseline=baseline, out_dir=out_dir, console=console, tokenizer=tokenizer,
                          topology=topology.value if topology else None, progress_every=every_s(progress_every))
    except (ValueError, RuntimeError, FileNotFoundError) as exc:
        raise fail(str(exc)) from None
    print_gate_run(result.summary, result.gates, result.paths)
    raise typer.Exit(result.exit_code)


def print_gate_run(summary: Summary, gates: GateVerdict, paths: dict[str, Path]) -> None:
    print_summary(summary)
    print_gates(gates)
    out.print(f"report: {paths['report']}")


@app.command(epilog=epilog("bench check .state/bench/RUN --gate chat-local", exits=GATE_EXITS))
def check(
    run_dir: Path = typer.Argument(..., help="Run folder (records.jsonl + summary.json)."),
    gate_file: str = typer.Option(..., "--gate"),
    baseline: Path | None = typer.Option(None),
) -> None:
    """Evaluate a gate file's offline gates on an existing run (e.g. one ingested from Locust); rewrites
    its records.jsonl, summary.json (with the verdict), report.html, requests.csv and timeseries.csv."""
    try:
        result = check_run(run_dir, gate_file, baseline)
    except (ValueError, FileNotFoundError) as exc:
        raise fail(str(exc)) from None
    print_gates(result.gates)
    raise typer.Exit(result.exit_code)


def _warn_differences(diffs: dict[str, list[str]]) -> None:
    if diffs["load"]:
        out.print("[bold yellow]WARNING: the runs had different load shapes[/] ("
                  + "; ".join(diffs["load"]) + "): latency depends on the load and throughput follows the rate "
                  "offered, so throughput is not compared; re-run both with the same scenario and load flags",
                  soft_wrap=True, highlight=False)
    if diffs["setup"]:
        out.print("[bold yellow]WARNING: the runs sent different requests[/] (" + "; ".join(diffs["setup"]) + ")",
                  soft_wrap=True, highlight=False)
    if diffs["target"]:
        out.print("targets differ (" + "; ".join(diffs["target"]) + "): this compares two deployments",
                  soft_wrap=True, highlight=False)


def _change(r: CompareRow) -> tuple[str, str]:
    """The change and its interval as text: relative (%) or, for the error rate, in percentage points."""
    if r["metric"] == "error_rate":
        def f(v: float) -> str:
            return f"{v * 100:+.2f} pp"
    else:
        def f(v: float) -> str:
            return f"{v:+.1%}"
    if r.get("change") is None:
        return "—", r.get("note", "")
    return f(r["change"]), f"{f(r['ci_low'])} .. {f(r['ci_high'])}"


def _num(v: float | None) -> str:
    return "—" if v is None else f"{v:.4g}" if abs(v) < 1e-3 and v else f"{v:,.3f}"


@app.command(epilog=epilog("bench compare .state/bench/BASELINE .state/bench/CANDIDATE",
                           "bench compare BASELINE CANDIDATE --out comparison.json",
                           "bench compare BASELINE CANDIDATE --html comparison.html --min-effect 0.1",
                           exits="0 nothing worse by at least the minimum effect; 1 something is (significantly); "
                                 "2 bad input (not run folders) or an invalid run (without --allow-invalid)"))
def compare(
    baseline: Path = typer.Argument(..., help="Baseline run folder."),
    candidate: Path = typer.Argument(..., help="Candidate run folder."),
    resamples: int = typer.Option(2000, help="Bootstrap resamples (mean, throughput, error rate).", min=100),
    min_effect: float = typer.Option(
        MIN_EFFECT, "--min-effect", min=0, max=0.99,
        help="Relative change below which a difference is 'same' (0.05: 5 %; set it to your measured "
        "run-to-run noise). The error rate's is 1 percentage point."),
    allow_invalid: bool = typer.Option(False, "--allow-invalid", help="Compare even when a run is INVALID "
                                       "(its numbers describe the client or the failures, not the server)."),
    json_out: Path | None = typer.Option(None, "--out", help="Write the comparison as JSON to this file (and "
                                         "the HTML view beside it, same name with .html, unless --html)."),
    html_out: Path | None = typer.Option(None, "--html", help="Write the side-by-side HTML view to this file."),
) -> None:
    """Candidate vs baseline, each statistic with a 95 % interval of its change; writes the JSON
    (--out) and a side-by-side HTML view (--html, or beside --out). Percentile intervals come from
    order statistics (p95 needs 86 samples a run, p99 435); mean, throughput and error rate from a
    bootstrap. Exit 1 only when something is significantly worse by at least --min-effect."""
    try:
        b_sum, b_rec = load_run(baseline)
        c_sum, c_rec = load_run(candidate)
        invalid = invalid_runs(b_sum, c_sum)
        if invalid and not allow_invalid:
            raise ValueError("; ".join(invalid) + ": its numbers describe the client or the failures, not the "
                             "server; re-run it (see its report's validity table) or pass --allow-invalid")
        res = do_compare((b_rec, b_sum), (c_rec, c_sum), resamples=resamples, min_effect=min_effect)
    except (ValueError, FileNotFoundError) as exc:
        raise fail(str(exc)) from None
    _warn_differences(res["differences"])
    t = Table(title=f"{candidate} vs {baseline} ({res['confidence']:.0%} intervals; same: within "
              f"{res['min_effect']:.0%})")
    for col in ("metric", "stat", "n (base/cand)", "baseline", "candidate", "change", "interval", "call"):
        t.add_column(col, overflow="fold")
    for r in res["rows"]:
        change, interval = _change(r)
        t.add_row(r["metric"], r["stat"], f"{r['n_baseline']}/{r['n_candidate']}", _num(r.get("baseline")),
                  _num(r.get("candidate")), change, interval, r.get("call", ""))
    out.print(t)
    need = ", ".join(f"{stat} >= {n}" for stat, n in res["min_samples"].items() if stat != "mean")
    out.print(f"samples a percentile's interval needs in each run: {need}", highlight=False)
    if res.get("topologies_differ"):
        tops = res["topology"]
        out.print(f"topologies differ: baseline {tops['baseline']}, candidate {tops['candidate']} (the change is "
                  "the topology's)")
    for line in invalid:
        out.print(f"[yellow]warning:[/] {line} (compared because of --allow-invalid)", highlight=False)
    try:
        if json_out:
            json_out.write_text(json.dumps(res, indent=2, allow_nan=False) + "\n")
            out.print(f"comparison: {json_out}")
        html_path = html_out or (json_out.with_suffix(".html") if json_out else None)
        if html_path:
            html_path.write_text(render_comparison(res, (b_rec, b_sum), (c_rec, c_sum),
                                                   names=(str(baseline), str(candidate))))
            out.print(f"side-by-side view: {html_path}")
    except OSError as exc:
        raise fail(f"cannot write the comparison: {exc}; pass a writable --out / --html path") from None
    raise typer.Exit(1 if regressions(res) else 0)


@app.command(epilog=epilog("bench sweep chat-smoke --max 500 --metric ttft_ms --percentile 95 --stack local",
                           exits="0 the sweep finished; 2 bad input or an untrusted target"))
def sweep(
    scenario: str = typer.Argument(...),
    max_value: float = typer.Option(..., "--max", help="SLO threshold for the metric (its unit).", min=0),
    metric: str = typer.Option("ttft_ms"),
    percentile: float = typer.Option(95, min=0, max=100),
    start_rps: float = typer.Option(1.0, "--start", min=0),
    factor: float = typer.Option(2.0, min=1),
    max_rps: float = typer.Option(1000.0, min=0),
    repeats: int = typer.Option(3, min=1),
    bisect_steps: int = typer.Option(3, min=0),
    duration_s: float | None = typer.Option(None, "--duration-s", help="Measured seconds per point.", min=0),
    stack: OptionalStack = None,
    url: TargetUrl = None,
    model: TargetModel = None,
    api_key_env: ApiKeyEnv = None,
    out_dir: Path | None = typer.Option(None, "--out"),
    progress_every: ProgressEvery = None,
) -> None:
    """Find the knee and the highest rate that meets the SLO (bracketing + interpolation, CIs); writes
    the last run's records.jsonl, summary.json (with the sweep), report.html, requests.csv and
    timeseries.csv."""
    try:
        run_dir = new_run_dir(out_dir, "sweep")
        target = resolve(stack, url, model, api_key_env)
        every = every_s(progress_every)
    except ValueError as exc:
        raise fail(str(exc)) from None
    spec = SearchSpec(metric=metric, percentile=percentile, max_value=max_value, start_rps=start_rps,
                      factor=factor, max_rps=max_rps, repeats=repeats, bisect_steps=bisect_steps)
    last = {}

    def run_at(rate: float, rep: int) -> Summary:
        scn = load_scenario(scenario, {"rate_rps": rate, "seed": rep, "duration_s": duration_s})
        res = _run(scn, target, progress_every=every, label=f"sweep {rate:.3g} req/s #{rep}")
        last["res"] = res
        return res.summary

    try:
        result = search(run_at, spec, log=lambda m: console.print(m))
    except (ValueError, RuntimeError) as exc:  # a bad scenario or a refused target (checked before each point)
        raise fail(str(exc)) from None
    res = last["res"]
    result["scenario"] = scenario
    paths = write_run(run_dir, res.records, res.summary, sweep=result)
    out.print(result["conclusion"])
    out.print(f"report: {paths['report']}")


@app.command(epilog=epilog("bench report .state/bench/RUN", exits="0 written; 2 not a run folder"))
def report(run_dir: Path = typer.Argument(..., help="Run folder (records.jsonl + summary.json).")) -> None:
    """Re-render report.html, requests.csv and timeseries.csv of a run folder from its records.jsonl
    and summary.json. Exit 2 when the folder is not a run."""
    try:
        s = load_summary(run_dir)
        paths = write_report(run_dir, s, list(read_jsonl(records_path(run_dir))))
    except (ValueError, OSError) as exc:
        raise fail(str(exc)) from None
    except (KeyError, TypeError) as exc:  # a summary.json of another shape (edited by hand, another version)
        raise fail(f"{run_dir}: summary.json lacks what the report needs ({type(exc).__name__}: {exc}); "
                   "re-run the scenario with this version of the bench") from None
    out.print(f"report: {paths['report']}  (exports: {paths['requests_csv'].name}, {paths['timeseries_csv'].name})")


@app.command(epilog=epilog("bench scenarios", exits="0 listed"))
def scenarios() -> None:
    """List bundled scenarios and gate files."""
    for p in sorted(SCENARIO_DIR.glob("*.yaml")):
        out.print(f"scenario  {p.stem}")
    for p in sorted(GATE_DIR.glob("*.yaml")):
        out.print(f"gate      {p.stem}")


if __name__ == "__main__":  # `python -m splitstack.cli.bench`: what the `bench` script runs
    app(prog_name="bench")
