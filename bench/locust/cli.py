"""`bench locust run|ingest`: Locust headless or distributed, then the bench's report and gates."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

locust_app = typer.Typer(help="Load from many machines with Locust; results feed the same reports and gates.",
                         no_args_is_help=True)
out = Console()
LOCUSTFILE = Path(__file__).with_name("locustfile.py")


def _env(scenario: str, target, api_key_env: Optional[str], records: Path, users: int,
         rate_rps: Optional[float]) -> dict[str, str]:
    env = dict(os.environ)
    key_env = api_key_env
    if target.api_key and not key_env:  # a stack's generated key travels as an env var, never argv
        key_env = "BENCH_LOCUST_API_KEY"
        env[key_env] = target.api_key
    env.update(BENCH_SCENARIO=scenario, BENCH_RECORDS_DIR=str(records), BENCH_USERS=str(users),
               BENCH_TARGET_JSON=json.dumps({"base_url": target.base_url, "model": target.model,
                                             "api_key_env": key_env, "max_model_len": target.max_model_len}))
    if rate_rps:
        env["BENCH_RATE_RPS"] = str(rate_rps)
    return env


@locust_app.command("run")
def run(
    scenario: str = typer.Argument(..., help="A chat scenario (name or path)."),
    users: int = typer.Option(8, help="Locust users (concurrency)."),
    spawn_rate: float = typer.Option(8.0, help="Users started per second."),
    run_time_s: int = typer.Option(60, "--run-time", help="Seconds of load."),
    rate_rps: Optional[float] = typer.Option(None, "--rate", help="Total constant throughput (else closed loop)."),
    warmup_s: float = typer.Option(5.0, help="Excluded from metrics at the start."),
    cooldown_s: float = typer.Option(2.0, help="Excluded from metrics at the end."),
    processes: int = typer.Option(1, help="Locust --processes (forked workers on this machine)."),
    master: bool = typer.Option(False, help="Run as master (headless); workers join with --worker."),
    expect_workers: int = typer.Option(1, help="With --master: wait for this many workers."),
    worker: bool = typer.Option(False, help="Run as a worker of --master-host."),
    master_host: str = typer.Option("127.0.0.1"),
    stack: Optional[str] = typer.Option("local"),
    url: Optional[str] = typer.Option(None),
    model: Optional[str] = typer.Option(None),
    api_key_env: Optional[str] = typer.Option(None),
    out_dir: Path = typer.Option(Path(".state/bench/locust"), "--out"),
) -> None:
    """Run Locust with the bench's locustfile; then ingest its records (not on --worker)."""
    from bench.cli import _target, print_summary
    from bench.report.writer import write_run
    from bench.scenario import ChatScenario, load_scenario

    from bench.locust.ingest import ingest

    scn = load_scenario(scenario)
    if not isinstance(scn, ChatScenario):
        raise typer.BadParameter("the locustfile drives chat scenarios; run pipeline scenarios with `bench run`")
    target = _target(stack, url, model, api_key_env, None)
    records = out_dir / "locust-records"
    records.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--host", target.base_url,
            "--only-summary", "--csv", str(out_dir / "locust")]
    if worker:
        argv += ["--worker", "--master-host", master_host]
    else:
        argv += ["--headless", "-u", str(users), "-r", str(spawn_rate), "-t", f"{run_time_s}s"]
        if master:
            argv += ["--master", "--expect-workers", str(expect_workers)]
        elif processes > 1:
            argv += ["--processes", str(processes)]
    proc = subprocess.run(argv, env=_env(scenario, target, api_key_env, records, users, rate_rps),
                          capture_output=True, text=True)
    log = proc.stdout + proc.stderr
    (out_dir / "locust.log").write_text(log)
    if worker:
        raise typer.Exit(proc.returncode)
    if proc.returncode not in (0, 1):  # Locust exits 1 when any request failed: still ingest
        out.print(log[-3000:])
        raise typer.Exit(2)
    recs, summary = ingest(records, scn, target, users, warmup_s, cooldown_s, log)
    paths = write_run(out_dir, recs, summary)
    print_summary(summary)
    out.print(f"report: {paths['report']}  (Locust CSVs: {out_dir}/locust_*.csv)")
    raise typer.Exit(0 if summary["validity"]["valid"] else 2)


@locust_app.command("ingest")
def ingest_cmd(
    records_dir: Path = typer.Argument(..., help="Folder with records-*.jsonl from every Locust process."),
    scenario: str = typer.Option(..., help="The chat scenario the users ran."),
    users: int = typer.Option(..., help="Users of the run."),
    warmup_s: float = typer.Option(5.0),
    cooldown_s: float = typer.Option(2.0),
    url: str = typer.Option("", help="Server URL (for the report)."),
    model: str = typer.Option("", help="Served model name (for the report)."),
    log: Optional[Path] = typer.Option(None, help="Locust's output, to check its CPU warnings."),
    out_dir: Path = typer.Option(..., "--out"),
) -> None:
    """Build records.jsonl, summary.json and report.html from collected Locust record files."""
    from bench.cli import print_summary
    from bench.locust.ingest import ingest
    from bench.report.writer import write_run
    from bench.scenario import load_scenario
    from bench.target import Target

    recs, summary = ingest(records_dir, load_scenario(scenario), Target(url, model), users, warmup_s, cooldown_s,
                           log.read_text() if log else "")
    paths = write_run(out_dir, recs, summary)
    print_summary(summary)
    out.print(f"report: {paths['report']}")
