"""`bench locust` against the simulator: headless, distributed (a master and 2 workers over
loopback), and the failures an SRE meets (no master, missing workers, Ctrl-C). Every test checks
that no Locust process outlives it: each run gets a unique environment marker that every process
it starts inherits, so even an orphan that left the process tree is found."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import httpx
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bench.metric_table import derive
from bench.records import RequestRecord, read_jsonl

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
ROOT = Path(__file__).resolve().parents[3]
MARK = "BENCH_LOCUST_TEST_MARK"

# find_spec, not importorskip: importing locust monkey-patches this process with gevent
if importlib.util.find_spec("locust") is None:
    pytest.skip("the bench extra (locust) is not installed", allow_module_level=True)


def _procs_with(mark: str) -> list[psutil.Process]:
    """Live processes whose environment carries this test's marker."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get(MARK) == mark and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return found


class Bench:
    """`python -m splitstack.cli.bench ...` as a child process with a marker; kills what is left if a test fails."""

    def __init__(self, target):
        self.target = target
        self.mark = uuid.uuid4().hex
        self.env = {**os.environ, "SIM_KEY": target.api_key, MARK: self.mark}
        self.seen: set[int] = set()  # every descendant pid observed while running

    def target_args(self) -> list[str]:
        return ["--url", self.target.base_url, "--model", "tiny", "--api-key-env", "SIM_KEY"]

    def start(self, *args: str, sigint_ignored: bool = False) -> subprocess.Popen:
        """`bench ARGS`; ``sigint_ignored``: as a shell without job control starts a background job
        (SIGINT inherited as ignored: what CI's `make test` in the background gave)."""
        ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored else None
        return subprocess.Popen([sys.executable, "-m", "splitstack.cli.bench", *args], cwd=ROOT, env=self.env,
                                text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=ignore)

    def watch(self, proc: subprocess.Popen, timeout_s: float) -> tuple[int, str, str]:
        """Wait for proc, recording its descendants (psutil children) while it runs."""
        end = time.monotonic() + timeout_s
        while proc.poll() is None and time.monotonic() < end:
            try:
                self.seen |= {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
            except psutil.NoSuchProcess:
                pass
            time.sleep(0.2)
        out, err = proc.communicate(timeout=max(1.0, end - time.monotonic()))
        return proc.returncode, out, err

    def run(self, *args: str, timeout_s: float = 150) -> tuple[int, str, str]:
        return self.watch(self.start(*args), timeout_s)

    def leftovers(self) -> list[psutil.Process]:
        """Descendants seen during the run, or processes with this run's marker, still alive."""
        alive = []
        for pid in self.seen:
            try:
                p = psutil.Process(pid)
            except psutil.NoSuchProcess:
                continue
            if _status(p) not in (None, psutil.STATUS_ZOMBIE):  # an orphan's zombie waits for pid 1
                alive.append(p)
        return alive + [p for p in _procs_with(self.mark) if p.pid not in self.seen]

    def cleanup(self) -> None:
        for p in self.leftovers():
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass


def _status(p: psutil.Process) -> str | None:
    try:
        return p.status()
    except psutil.NoSuchProcess:
        return None


@pytest.fixture
def bench(instant_target):
    b = Bench(instant_target)
    try:
        yield b
    finally:
        b.cleanup()


def _sim_requests(target) -> dict[str, float]:
    """vllm:request_success_total by finished_reason: what the server itself counted."""
    text = httpx.get(f"{target.base_url}/metrics", timeout=10).text
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "vllm:request_success_total":
                out[s.labels["finished_reason"]] = s.value
    return out


def _gate(tmp_path: Path, run_dir: Path, valid: bool) -> None:
    gate = tmp_path / "g.yaml"
    gate.write_text("name: g\nscenario: chat-smoke\ngates:\n  - {kind: error_rate, max_fraction: 0.5}\n")
    r = subprocess.run([sys.executable, "-m", "splitstack.cli.bench", "check", str(run_dir), "--gate", str(gate)],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == (0 if valid else 2), r.stdout + r.stderr
    assert "error_rate" in r.stdout


def _locust_stats(run_dir: Path) -> dict[str, dict]:
    """Locust's final statistics (its CSVs are periodic and can miss the last second)."""
    return {e["name"]: e for e in json.loads((run_dir / "locust_final_stats.json").read_text())}


def _failed_checks(s: dict) -> set[str]:
    return {c["check"] for c in s["validity"]["checks"] if not c["passed"]}


def test_locust_headless_run_is_ingested(bench, tmp_path):
    out = tmp_path / "loc"
    rc, so, se = bench.run("locust", "run", "chat-smoke", *bench.target_args(), "--users", "2", "--duration-s", "6",
                           "--warmup-s", "1", "--cooldown-s", "1", "--out", str(out))
    assert rc in (0, 2), so + se  # 2 only if Locust itself was CPU-bound
    s = json.loads((out / "summary.json").read_text())
    assert s["run"]["client"]["tool"] == "locust" and s["run"]["client"]["locust"]["mode"] == "local"
    assert s["requests"]["sent"] > 10 and s["requests"]["errors"] == 0
    assert s["tokens"]["output"]["mean"] == 64 and s["tokens"]["prompt_mismatch_vs_server"] == 0
    assert {c["check"] for c in s["validity"]["checks"]} >= {"locust CPU warnings", "locust records complete"}
    assert "locust records complete" not in _failed_checks(s)
    n = sum(1 for _ in read_jsonl(out / "records.jsonl"))
    assert n == sum(_sim_requests(bench.target).values())  # the drain: no request the server saw goes unrecorded
    stats = _locust_stats(out)
    assert stats["TTFT"]["num_requests"] == n and stats["chat"]["num_failures"] == 0
    assert (out / "locust_stats.csv").is_file()
    assert (out / "report.html").is_file()
    _gate(tmp_path, out, s["validity"]["valid"])
    assert bench.leftovers() == []


def test_locust_distributed_two_workers_on_loopback(bench, tmp_path):
    out = tmp_path / "dist"
    rc, so, se = bench.run("locust", "run", "chat-smoke", "--processes", "2", *bench.target_args(), "--users", "4",
                           "--duration-s", "8", "--warmup-s", "1", "--cooldown-s", "1", "--out", str(out))
    assert rc in (0, 2), so + se
    s = json.loads((out / "summary.json").read_text())
    # 2 only when a Locust process reported CPU saturation (2 cores shared with the simulator)
    assert _failed_checks(s) <= {"locust CPU warnings"}, s["validity"]
    assert rc == (0 if s["validity"]["valid"] else 2)

    # the master saw both workers, and each confirmed its drain with the count it sent
    master_log = (out / "logs" / "master.log").read_text()
    assert "2 workers connected" in master_log
    man = s["run"]["client"]["locust"]
    assert man["mode"] == "distributed" and man["expected_workers"] == 2 and len(man["connected_at_start"]) == 2
    workers = man["workers"]
    assert sorted(w["index"] for w in workers) == [0, 1]
    assert all(w["drained"] and w["abandoned"] == 0 and w["records_sent"] == w["records_received"] > 0
               for w in workers), workers

    # one run: every worker's records, the same number the server counted, none aborted
    recs = [r for r in read_jsonl(out / "records.jsonl") if isinstance(r, RequestRecord)]
    served = _sim_requests(bench.target)
    assert served.get("abort", 0) == 0 and served.get("error", 0) == 0
    assert len(recs) == sum(served.values()) == sum(w["records_received"] for w in workers)
    per_process = Counter(r.process for r in recs)
    assert per_process == {w["index"]: w["records_sent"] for w in workers}
    ttft_from = {r.process for r in recs if r.ok and derive(r).ttft_ms is not None}
    assert ttft_from == {0, 1}
    assert len({r.request_id for r in recs}) == len(recs)
    # the server's own view, scraped around the run as `bench run` does
    assert s["server"]["histograms"]["vllm:e2e_request_latency_seconds"]["count"] == len(recs)
    assert s["server_source"] == f"{bench.target.base_url}/metrics"

    # the custom events fired on the workers reached the master's statistics
    stats = _locust_stats(out)
    assert stats["TTFT"]["num_requests"] == len(recs) == stats["chat"]["num_requests"]
    assert stats["TPOT"]["num_requests"] == len(recs)

    assert s["requests"]["errors"] == 0 and s["requests"]["sent"] > 10
    assert (out / "report.html").is_file()
    _gate(tmp_path, out, s["validity"]["valid"])
    assert bench.seen, "the run's Locust processes were never observed"
    assert bench.leftovers() == []


def test_master_with_workers_started_separately(bench, tmp_path):
    """The many-machines commands (`bench locust master` + `bench locust worker`), here on loopback."""
    from testsupport.procs import free_port

    port = free_port()
    out = tmp_path / "m"
    master = bench.start("locust", "master", "chat-smoke", "--expect-workers", "2", "--bind-host", "127.0.0.1",
                         "--bind-port", str(port), "--users", "2", "--duration-s", "6", "--warmup-s", "1",
                         "--cooldown-s", "1", "--rate", "40", *bench.target_args(), "--out", str(out))
    workers = [bench.start("locust", "worker", "chat-smoke", "--master-host", "127.0.0.1", "--master-port", str(port),
                           *bench.target_args(), "--out", str(tmp_path / f"w{i}")) for i in range(2)]
    try:
        rc, so, se = bench.watch(master, 120)
        ends = [bench.watch(w, 60) for w in workers]
    finally:
        for p in (master, *workers):
            if p.poll() is None:
                p.kill()
    assert rc in (0, 2), so + se
    assert all(w[0] == 0 and "its records went to the master" in w[1] for w in ends), ends
    s = json.loads((out / "summary.json").read_text())
    assert _failed_checks(s) <= {"locust CPU warnings"}, s["validity"]
    recs = [r for r in read_jsonl(out / "records.jsonl") if isinstance(r, RequestRecord)]
    assert len(recs) == sum(_sim_requests(bench.target).values())
    assert {r.process for r in recs if r.ok and derive(r).ttft_ms is not None} == {0, 1}
    # --rate reached the workers (Locust forwards --bench-rate-rps): paced at 40/s in total, where a
    # closed loop against the instant simulator sends hundreds per second
    assert s["run"]["load_label"] == "constant 40 req/s"
    assert 40 * 6 * 0.75 <= len(recs) <= 40 * 6 * 1.25, len(recs)
    assert "achieved / target rate" in {c["check"] for c in s["validity"]["checks"]}
    assert (out / "report.html").is_file()
    assert bench.leftovers() == []


def test_worker_without_master_fails_clearly(bench, tmp_path):
    from testsupport.procs import free_port

    port = free_port()  # nothing listens there
    t0 = time.monotonic()
    rc, so, se = bench.run("locust", "worker", "chat-smoke", "--master-host", "127.0.0.1", "--master-port", str(port),
                           "--connect-timeout-s", "3", *bench.target_args(), "--out", str(tmp_path / "w"),
                           timeout_s=60)
    assert rc == 2, so + se
    assert f"no answer from the Locust master at 127.0.0.1:{port} within 3 s" in se
    assert "start `bench locust master` there first" in se
    assert time.monotonic() - t0 < 30
    assert bench.leftovers() == []


def test_master_missing_a_worker_fails_clearly(bench, tmp_path):
    from testsupport.procs import free_port

    port = free_port()
    master = bench.start("locust", "master", "chat-smoke", "--expect-workers", "2", "--bind-host", "127.0.0.1",
                         "--bind-port", str(port), "--expect-workers-max-wait-s", "6", "--duration-s", "5",
                         *bench.target_args(), "--out", str(tmp_path / "m"))
    worker = bench.start("locust", "worker", "chat-smoke", "--master-host", "127.0.0.1", "--master-port", str(port),
                         *bench.target_args(), "--out", str(tmp_path / "w"))
    try:
        rc, so, se = bench.watch(master, 90)
        wrc, wso, wse = bench.watch(worker, 60)  # the master's quit ends the worker that did connect
    finally:
        for p in (master, worker):
            if p.poll() is None:
                p.kill()
    assert rc == 2, so + se
    assert "locust master: 1 of 2 workers connected within 6 s" in se and "no load was sent" in se
    assert wrc in (0, 1), wso + wse
    assert not (tmp_path / "m" / "summary.json").exists()
    assert bench.leftovers() == []


def _wait_until_loaded(bench: Bench, proc: subprocess.Popen, out: Path) -> None:
    """Until the master reports all users spawned (and one more second of load). Start-up is three
    interpreters importing Locust and two workers preparing the scenario's prompts: 150 s leaves room
    for a loaded 2-core machine (90 s did not, once in 10 runs at load average 10)."""
    end = time.monotonic() + 150
    master_log = out / "logs" / "master.log"
    while "All users spawned" not in (master_log.read_text() if master_log.exists() else ""):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < end, "the distributed run never started"
        bench.seen |= {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
        time.sleep(0.2)
    time.sleep(1.0)
    bench.seen |= {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
    assert len(bench.seen) >= 3  # master and 2 workers


def test_ctrl_c_stops_master_and_workers(bench, tmp_path):
    out = tmp_path / "int"
    # Started with SIGINT ignored, the harder case: Ctrl-C must still stop everything (a terminal's
    # foreground job, where SIGINT is not ignored, is the easy one).
    proc = bench.start("locust", "run", "chat-smoke", "--processes", "2", *bench.target_args(), "--users", "2",
                       "--duration-s", "120", "--out", str(out), sigint_ignored=True)
    try:
        _wait_until_loaded(bench, proc, out)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        rc, so, se = bench.watch(proc, 60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == 130, so + se
    assert "interrupted: every Locust process was stopped" in se
    assert time.monotonic() - t0 < 45
    # a Ctrl-C still drains: the master's shutdown asks its workers for their last records
    man = json.loads((out / "locust-records" / "collection.json").read_text())
    assert len(man["workers"]) == 2 and all(w["drained"] for w in man["workers"]), man
    assert bench.leftovers() == []


def test_a_worker_dying_mid_run_fails_the_run(bench, tmp_path):
    out = tmp_path / "die"
    # Started with SIGINT ignored, the harder case: Ctrl-C must still stop everything (a terminal's
    # foreground job, where SIGINT is not ignored, is the easy one).
    proc = bench.start("locust", "run", "chat-smoke", "--processes", "2", *bench.target_args(), "--users", "2",
                       "--duration-s", "120", "--out", str(out), sigint_ignored=True)
    try:
        _wait_until_loaded(bench, proc, out)
        worker = next(c for c in psutil.Process(proc.pid).children() if "--worker" in c.cmdline())
        t0 = time.monotonic()
        worker.kill()
        rc, so, se = bench.watch(proc, 90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == 2, so + se
    assert "exited with code -9 while the run was going on" in se and "worker-" in se
    assert time.monotonic() - t0 < 30  # the master no longer waits for a dead worker's drain
    assert not (out / "summary.json").exists()
    assert bench.leftovers() == []
