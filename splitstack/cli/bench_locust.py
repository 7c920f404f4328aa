"""`bench locust run|master|worker|ingest`: Locust headless or distributed, then the bench's
report and gates. The process plumbing lives in launch.py; this module only wires options."""

from __future__ import annotations

from pathlib import Path

import typer
from pydantic import ValidationError
from rich.markup import escape

from bench.locust.ingest import ingest
from bench.locust.launch import RunPaths, locust_env, run_distributed, run_headless, run_worker
from bench.locust.procs import LocustRunError, free_port, raise_on_sigterm
from bench.locust.session import RecordsProgress, chat_scenario_and_target, finish_run, watch_server
from bench.locust.settings import DEFAULT_MASTER_PORT, LocustSettings, default
from bench.progress import Plan, every_s, run_progress
from bench.report.writer import new_run_dir, write_run
from bench.scenario import ScenarioError, load_chat_scenario
from bench.target import Target
from contract.extras import MissingExtra
from splitstack.cli.bench_output import console as err
from splitstack.cli.bench_output import fail, out, print_summary
from splitstack.cli.options import ApiKeyEnv, ProgressEvery, TargetModel, TargetUrl, Tokenizer, epilog

locust_app = typer.Typer(help="Load from many machines with Locust; results feed the same reports and gates.",
                         no_args_is_help=True)

# options shared by the commands (typer needs them spelled per command; defaults come from settings.py)
_SCENARIO = typer.Argument(..., help="A chat scenario (name or path).")
_STACK = typer.Option(None, "--stack", "-s", help="Target stack (its spec and state give URL, model and key; "
                      "default local, unless --url).")


def _scenario_and_target(scenario: str, stack, url, model, api_key_env, tokenizer):
    try:
        return chat_scenario_and_target(scenario, stack, url, model, api_key_env, tokenizer)
    except (ValueError, MissingExtra) as exc:
        raise fail(str(exc)) from None


def _run_dir(out_dir: Path | None, name: str, load: bool = True) -> Path:
    """A new run folder (``--out`` when given, refused if it already holds a run; for a command
    that runs load, also if it holds Locust's records of another)."""
    if load and out_dir is not None and RunPaths(out_dir).records.exists():
        raise fail(f"--out {out_dir}: already holds Locust records of another run; pass a new folder (or leave "
                   "--out out: each run gets its own under .state/bench)")
    try:
        return new_run_dir(out_dir, name)
    except ValueError as exc:
        raise fail(str(exc)) from None


def _settings(**kw) -> LocustSettings:
    try:
        return LocustSettings(**{k: v for k, v in kw.items() if v is not None})
    except ValidationError as exc:
        raise typer.BadParameter(str(exc)) from None


def _finish(paths, scn, target, settings: LocustSettings, rate_rps, server, source: str) -> None:
    """Print the ingested run; exit 0 valid / 2 invalid."""
    summary, written = finish_run(paths, scn, target, settings, rate_rps, server, source)
    print_summary(summary)
    out.print(f"report: {written['report']}  (Locust's own: {paths.out_dir}/locust_final_stats.json and "
              f"locust_*.csv; logs: {paths.logs})")
    raise typer.Exit(0 if summary["validity"]["valid"] else 2)


def _guarded(fn, paths) -> int:
    """Run a launch function; Locust failures and Ctrl-C become clear messages (every process is stopped)."""
    raise_on_sigterm()
    try:
        return fn()
    except LocustRunError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        err.print(f"interrupted: every Locust process was stopped; records so far: {paths.records} "
                  "(`bench locust ingest` builds a report from them)")
        raise typer.Exit(130) from None


@locust_app.command("run", epilog=epilog(
    "bench locust run chat-smoke --stack local --users 32 --duration-s 60",
    "bench locust run chat-smoke --url http://127.0.0.1:8000 --model tiny --processes 2 --rate 40",
    exits="0 a valid run; 2 an invalid run, bad input or an untrusted target; 130 interrupted (Ctrl-C)"))
def run(
    scenario: str = _SCENARIO,
    processes: int = typer.Option(0, min=0, help="Locust processes: 0, one headless process; N, a master and N "
                                  "worker processes on this machine (Locust's distributed mode over loopback)."),
    users: int = typer.Option(default("users"), help="Locust users (concurrency), over all workers.", min=1),
    spawn_rate: float = typer.Option(default("spawn_rate"), help="Users started per second.", min=0),
    run_time_s: int = typer.Option(default("run_time_s"), "--duration-s", help="Seconds of load.", min=1),
    rate_rps: float | None = typer.Option(None, "--rate", help="Total constant throughput (else closed loop).", min=0),
    warmup_s: float = typer.Option(default("warmup_s"), help="Excluded from metrics at the start.", min=0),
    cooldown_s: float = typer.Option(default("cooldown_s"), help="Excluded from metrics at the end.", min=0),
    expect_workers_max_wait_s: int = typer.Option(default("expect_workers_max_wait_s"),
                                                  min=1,
                                                  help="With --processes: fail if they are not all connected by then."),
    drain_timeout_s: float = typer.Option(default("drain_timeout_s"), min=0,
                                        help="End of run: time for in-flight requests."),
    stack: str | None = _STACK, url: TargetUrl = None, model: TargetModel = None, api_key_env: ApiKeyEnv = None,
    tokenizer: Tokenizer = None,
    out_dir: Path | None = typer.Option(None, "--out", help="Run folder (default: a new one under .state/bench)."),
    progress_every: ProgressEvery = None,
) -> None:
    """Run Locust with the bench's locustfile on this machine; then ingest its records into a run
    folder: records.jsonl, summary.json, report.html, requests.csv and timeseries.csv."""
    try:
        every = every_s(progress_every)
    except ValueError as exc:
        raise fail(str(exc)) from None
    out_dir = _run_dir(out_dir, f"locust-{Path(scenario).stem}")
    scn, target = _scenario_and_target(scenario, stack, url, model, api_key_env, tokenizer)
    s = _settings(users=users, spawn_rate=spawn_rate, run_time_s=run_time_s, warmup_s=warmup_s, cooldown_s=cooldown_s,
                  expect_workers_max_wait_s=expect_workers_max_wait_s, drain_timeout_s=drain_timeout_s)
    paths = RunPaths(out_dir)
    env = locust_env(scenario, target, api_key_env, s, tokenizer=tokenizer, records=paths.records)
    plan = Plan("locust", int(rate_rps * s.run_time_s) if rate_rps else None, float(s.run_time_s))
    with run_progress(plan, err, every, poll=RecordsProgress(paths.records)):  # records so far, read as they come
        if processes == 0:
            server = watch_server(target, lambda: _guarded(
                lambda: run_headless(paths, env, target.base_url, s, rate_rps), paths))
        else:
            port = free_port()
            server = watch_server(target, lambda: _guarded(
                lambda: run_distributed(paths, env, env, target.base_url, s, rate_rps, expect_workers=processes,
                                        local_workers=processes, bind_host="127.0.0.1", port=port), paths))
    _finish(paths, scn, target, s, rate_rps, *server)


@locust_app.command("master", epilog=epilog(
    "bench locust master chat-smoke --expect-workers 4 --url http://vllm:8000 --model my-model",
    exits="0 a valid run; 2 an invalid run, bad input or workers that never connected; 130 interrupted"))
def master(
    scenario: str = _SCENARIO,
    expect_workers: int = typer.Option(..., min=1, help="Workers (on any machines) to wait for before starting."),
    bind_host: str = typer.Option("*", help="Interface for workers to connect to ('*' = all)."),
    bind_port: int = typer.Option(DEFAULT_MASTER_PORT, min=1, max=65535,
                                  help="TCP port workers connect to (--master-port)."),
    users: int = typer.Option(default("users"), help="Locust users (concurrency), over all workers.", min=1),
    spawn_rate: float = typer.Option(default("spawn_rate"), help="Users started per second.", min=0),
    run_time_s: int = typer.Option(default("run_time_s"), "--duration-s", help="Seconds of load.", min=1),
    rate_rps: float | None = typer.Option(None, "--rate", help="Total constant throughput (else closed loop).", min=0),
    warmup_s: float = typer.Option(default("warmup_s"), min=0),
    cooldown_s: float = typer.Option(default("cooldown_s"), min=0),
    expect_workers_max_wait_s: int = typer.Option(default("expect_workers_max_wait_s"),
                                                  help="Fail if fewer workers have connected by then.", min=1),
    drain_timeout_s: float = typer.Option(default("drain_timeout_s"), min=0,
                                        help="End of run: time for in-flight requests."),
    stack: str | None = _STACK, url: TargetUrl = None, model: TargetModel = None, api_key_env: ApiKeyEnv = None,
    tokenizer: Tokenizer = None,
    out_dir: Path | None = typer.Option(None, "--out", help="Run folder (default: a new one under .state/bench)."),
) -> None:
    """Headless master for workers on other machines (`bench locust worker --master-host THIS_HOST`);
    their records are shipped here and ingested into one report."""
    out_dir = _run_dir(out_dir, f"locust-master-{Path(scenario).stem}")
    scn, target = _scenario_and_target(scenario, stack, url, model, api_key_env, tokenizer)
    s = _settings(users=users, spawn_rate=spawn_rate, run_time_s=run_time_s, warmup_s=warmup_s, cooldown_s=cooldown_s,
                  expect_workers_max_wait_s=expect_workers_max_wait_s, drain_timeout_s=drain_timeout_s)
    paths = RunPaths(out_dir)
    env = locust_env(scenario, target, api_key_env, s, tokenizer=tokenizer, records=paths.records)
    out.print(f"locust master on {bind_host}:{bind_port}: waiting up to {s.expect_workers_max_wait_s} s for "
              f"{expect_workers} workers: bench locust worker {scenario} --master-host <this host> "
              f"--master-port {bind_port} --url {target.base_url} --model {target.model}")
    server = watch_server(target, lambda: _guarded(
        lambda: run_distributed(paths, env, None, target.base_url, s, rate_rps, expect_workers=expect_workers,
                                local_workers=0, bind_host=bind_host, port=bind_port), paths))
    _finish(paths, scn, target, s, rate_rps, *server)


@locust_app.command("worker", epilog=epilog(
    "bench locust worker chat-smoke --master-host 10.0.0.5 --url http://vllm:8000 --model my-model",
    exits="0 finished; 2 the master did not answer or bad input; 130 interrupted"))
def worker(
    scenario: str = _SCENARIO,
    master_host: str = typer.Option(..., help="Host of `bench locust master`."),
    master_port: int = typer.Option(DEFAULT_MASTER_PORT, help="Its --bind-port.", min=1, max=65535),
    connect_timeout_s: float = typer.Option(default("connect_timeout_s"), min=0,
                                          help="Fail if the master does not answer."),
    drain_timeout_s: float = typer.Option(default("drain_timeout_s"), min=0,
                                        help="End of run: time for in-flight requests."),
    stack: str | None = _STACK, url: TargetUrl = None, model: TargetModel = None, api_key_env: ApiKeyEnv = None,
    tokenizer: Tokenizer = None,
    out_dir: Path | None = typer.Option(None, "--out", help="Worker log folder (default: a new one under "
                                        ".state/bench)."),
) -> None:
    """A worker of a remote `bench locust master`: sends the scenario's requests and ships every
    per-request record to the master. Load settings (users, rate, run time) come from the master."""
    out_dir = _run_dir(out_dir, f"locust-worker-{Path(scenario).stem}", load=False)
    _, target = _scenario_and_target(scenario, stack, url, model, api_key_env, tokenizer)
    s = _settings(connect_timeout_s=connect_timeout_s, drain_timeout_s=drain_timeout_s)
    paths = RunPaths(out_dir)
    env = locust_env(scenario, target, api_key_env, s, tokenizer=tokenizer, records=None)
    rc = _guarded(lambda: run_worker(paths, env, target.base_url, s, master_host=master_host, port=master_port),
                  paths)
    out.print(f"locust worker finished (exit {rc}); its records went to the master (log: {paths.logs})")
    raise typer.Exit(0 if rc in (0, 1) else 2)


@locust_app.command("ingest", epilog=epilog(
    "bench locust ingest RUN/locust-records --scenario chat-smoke --users 32 --out RUN-report",
    exits="0 written; 2 bad input"))
def ingest_cmd(
    records_dir: Path = typer.Argument(..., help="The master's (or headless process's) locust-records folder."),
    scenario: str = typer.Option(..., help="The chat scenario the users ran."),
    users: int = typer.Option(..., help="Users of the run.", min=1),
    warmup_s: float = typer.Option(default("warmup_s"), min=0),
    cooldown_s: float = typer.Option(default("cooldown_s"), min=0),
    url: str = typer.Option("", help="Server URL (for the report)."),
    model: str = typer.Option("", help="Served model name (for the report)."),
    rate_rps: float | None = typer.Option(None, "--rate", help="The run's --rate, if it had one.", min=0),
    log: Path | None = typer.Option(None, help="Locust's output, to check its CPU warnings."),
    out_dir: Path | None = typer.Option(None, "--out", help="Run folder (default: a new one under .state/bench)."),
) -> None:
    """Build records.jsonl, summary.json, report.html, requests.csv and timeseries.csv from a Locust
    records folder."""
    try:
        scn = load_chat_scenario(scenario)
    except ScenarioError as exc:
        raise fail(str(exc)) from None
    out_dir = _run_dir(out_dir, "locust-ingest", load=False)
    recs, summary = ingest(records_dir, scn, Target(url, model), users, warmup_s, cooldown_s,
                           log.read_text() if log else "", rate_rps=rate_rps)
    paths = write_run(out_dir, recs, summary)
    print_summary(summary)
    out.print(f"report: {paths['report']}")
