"""Locust command lines and the runs `bench locust` starts from them.

Three shapes, all supervised by procs.Fleet (every process stopped afterwards, whatever happens):
* headless: one Locust process (``bench locust run``);
* a master plus N local workers on a free loopback port (``bench locust run --processes N``);
* a master waiting for workers on other machines (``bench locust master``), each of which runs
  ``bench locust worker --master-host HOST``.
Records always end up in ``<out>/locust-records`` of the headless process or master.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench.locust.manifest import MANIFEST, clear
from bench.locust.procs import Fleet, LocustProc, LocustRunError, wait_for
from bench.locust.settings import LocustSettings
from bench.target import Target

LOCUSTFILE = Path(__file__).with_name("locustfile.py")
STARTUP_MARGIN_S = 60.0  # interpreter + locust import + /tokenize of the scenario's prompts, per process
_CONNECTED = re.compile(r"reported as ready\. (\d+) workers connected")  # the master's log, one per connect


@dataclass(frozen=True)
class RunPaths:
    out_dir: Path

    @property
    def records(self) -> Path:
        return self.out_dir / "locust-records"

    @property
    def logs(self) -> Path:
        return self.out_dir / "logs"

    @property
    def csv_prefix(self) -> Path:
        return self.out_dir / "locust"


def locust_env(scenario: str, target: Target, api_key_env: str | None, settings: LocustSettings,
               records: Path | None, base: dict[str, str] | None = None,
               tokenizer: str | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    key_env = api_key_env
    if target.api_key and not key_env:  # a stack's generated key travels as an env var, never argv
        key_env = "BENCH_LOCUST_API_KEY"
        env[key_env] = target.api_key
    env.update(BENCH_SCENARIO=scenario, **settings.to_env(),
               BENCH_TARGET_JSON=json.dumps({"base_url": target.base_url, "model": target.model,
                                             "api_key_env": key_env, "max_model_len": target.max_model_len,
                                             "tokenizer": tokenizer}))
    if records is not None:
        env["BENCH_RECORDS_DIR"] = str(records)
    return env


def base_argv(host_url: str | None) -> list[str]:
    argv = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--only-summary"]
    return argv + (["--host", host_url] if host_url else [])


def load_argv(s: LocustSettings, rate_rps: float | None, csv_prefix: Path) -> list[str]:
    """What the headless process or master runs; Locust forwards the --bench-* options to workers.
    Its CSVs are rewritten every second and can miss the last one; the JSON file holds the final stats."""
    return ["--headless", "-u", str(s.users), "-r", str(s.spawn_rate), "-t", f"{s.run_time_s}s",
            "--bench-users", str(s.users), "--bench-rate-rps", str(rate_rps or 0), "--csv", str(csv_prefix),
            "--json-file", f"{csv_prefix}_final_stats"]


def master_argv(bind_host: str, port: int, expect_workers: int, s: LocustSettings) -> list[str]:
    return ["--master", "--master-bind-host", bind_host, "--master-bind-port", str(port),
            "--expect-workers", str(expect_workers), "--expect-workers-max-wait", str(s.expect_workers_max_wait_s)]


def worker_argv(master_host: str, port: int) -> list[str]:
    return ["--worker", "--master-host", master_host, "--master-port", str(port)]


def deadline_s(s: LocustSettings, distributed: bool) -> float:
    """Longest a healthy run can take; past it the run is stopped and fails."""
    wait = s.expect_workers_max_wait_s + 10 if distributed else 0  # + the master's drain confirmations
    return STARTUP_MARGIN_S + wait + s.run_time_s + s.drain_timeout_s + s.shutdown_grace_s


def _fleet(paths: RunPaths, s: LocustSettings) -> Fleet:
    # the master's SIGTERM shutdown drains its workers first: give it the drain on top of the grace
    return Fleet(paths.logs, grace_s=s.drain_timeout_s + s.shutdown_grace_s)


def all_logs(paths: RunPaths) -> str:
    return "".join(p.read_text(errors="replace") for p in sorted(paths.logs.glob("*.log")))


def run_headless(paths: RunPaths, env: dict[str, str], host_url: str | None, s: LocustSettings,
                 rate_rps: float | None) -> int:
    clear(paths.records)
    with _fleet(paths, s) as fleet:
        p = fleet.start("locust", base_argv(host_url) + load_argv(s, rate_rps, paths.csv_prefix), env)
        rc = wait_for(p, deadline_s(s, distributed=False))
    _check_rc(p, rc)
    return rc


def run_distributed(paths: RunPaths, master_env: dict[str, str], worker_env: dict[str, str] | None,
                    host_url: str | None, s: LocustSettings, rate_rps: float | None, *, expect_workers: int,
                    local_workers: int, bind_host: str, port: int) -> int:
    """A master (and ``local_workers`` workers on this machine, connecting over loopback)."""
    clear(paths.records)
    with _fleet(paths, s) as fleet:
        master = fleet.start("master", base_argv(host_url) + load_argv(s, rate_rps, paths.csv_prefix)
                             + master_argv(bind_host, port, expect_workers, s), master_env)
        workers = [fleet.start(f"worker-{i}", base_argv(host_url) + worker_argv("127.0.0.1", port), worker_env or {})
                   for i in range(local_workers)]
        rc = wait_for(master, deadline_s(s, distributed=True), must_live=workers,
                      done_marker=paths.records / MANIFEST)
        end = time.monotonic() + s.shutdown_grace_s
        for w in workers:  # they got the master's quit: let them exit on their own first
            while w.returncode is None and time.monotonic() < end:
                time.sleep(0.1)
    _check_master(master, rc, expect_workers, s, bind_host, port)
    return rc


def run_worker(paths: RunPaths, env: dict[str, str], host_url: str | None, s: LocustSettings, *,
               master_host: str, port: int) -> int:
    """One worker joining a remote master; returns when the master ends the run."""
    ready = paths.logs / "worker.ready"
    ready.unlink(missing_ok=True)
    with _fleet(paths, s) as fleet:
        w = fleet.start("worker", base_argv(host_url) + worker_argv(master_host, port),
                        {**env, "BENCH_READY_FILE": str(ready)})
        end = time.monotonic() + s.connect_timeout_s
        while not ready.exists():
            if w.returncode is not None:
                raise LocustRunError(f"locust worker exited with code {w.returncode} before it was ready "
                                     f"(log: {w.log_path}):\n{w.log()}")
            if time.monotonic() > end:
                raise LocustRunError(
                    f"locust worker: no answer from the Locust master at {master_host}:{port} within "
                    f"{s.connect_timeout_s:.0f} s (--connect-timeout-s): start `bench locust master` there first, "
                    f"and check that this machine can reach TCP port {port} on {master_host} (log: {w.log_path})")
            time.sleep(0.1)
        rc = w.proc.wait()  # the master's quit (or its heartbeat going silent for 60 s) ends it
    return rc


def _check_rc(p: LocustProc, rc: int) -> None:
    if rc not in (0, 1):  # Locust exits 1 when any request failed: still a run to ingest
        raise LocustRunError(f"locust {p.name} exited with code {rc} (log: {p.log_path}):\n{p.log()}")


def _check_master(master: LocustProc, rc: int, expected: int, s: LocustSettings, bind_host: str, port: int) -> None:
    text = master.log(tail=1_000_000)
    if "Gave up waiting for workers to connect" in text:
        seen = _CONNECTED.findall(text)
        got = seen[-1] if seen else "0"
        raise LocustRunError(
            f"locust master: {got} of {expected} workers connected within {s.expect_workers_max_wait_s} s "
            f"(--expect-workers-max-wait-s); no load was sent. Workers must reach {bind_host}:{port}: start them "
            f"with `bench locust worker SCENARIO --master-host <this machine> --master-port {port}` "
            f"(log: {master.log_path})")
    _check_rc(master, rc)
