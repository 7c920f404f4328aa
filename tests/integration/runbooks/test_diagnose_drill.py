"""The on-call drill: every fault on one real local stack (simulator engine, two workers, Redis,
Prometheus) under a steady stream of documents; after each injection `runbook diagnose` is
asked until it names the fault, and the verdict, its next step and its evidence must agree.

Prints the table fault / verdict / action / seconds from the injection to the right verdict
(`pytest -s`). The bounds diagnose is built for (docs/runbooks.md): 15 s for a hang (the
workers' deadline and diagnose's own 8 s completion wait), 5 s for the other faults. They are
printed, not asserted: a loaded CI box must not turn a right verdict into a failure.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from pdf_fixtures import make_pdf

from runbooks.registry import invoke
from stack.preflight import resolve_api_key
from stack.secrets import queue_url
from worker.jobs_view import connect, list_jobs, submit

pytestmark = pytest.mark.integration

SIM = {
    "inference_servers.0.engine": "sim",
    "inference_servers.0.max_model_len": 8192,  # page images of the generated PDFs
    "inference_servers.0.max_num_batched_tokens": 8192,
    "worker_pool.replicas": 2,
    "queue.visibility_timeout_s": 30,
}
SERVER = "server-vlm"
THRESHOLDS = {"thresholds": {"rate_window": "30s", "stall_window": "30s"}, "gpu": False}
VERDICT_WAIT_S = 60.0  # the test's own patience, far above the bounds above


class Feeder:
    """A document every 2 s while the drill runs (the steady stream)."""

    def __init__(self, stack, folder: Path) -> None:
        self.stack, self.folder = stack, folder
        self.r = connect(stack.spec, queue_url(stack.spec, stack.paths))
        self.ids: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        n = 0
        while not self.stop.wait(2.0):
            try:
                self.ids += submit(self.r, self.stack.spec, [make_pdf(self.folder / f"f{n}.pdf", 1, seed=n)])
            except Exception:  # noqa: BLE001 - Redis down in its own step: the next one is sent later
                pass
            n += 1


def _sim_faults(stack, **faults) -> None:
    url = f"http://{stack.spec.local.host}:{stack.spec.worker_server.port}/sim/faults"
    key = resolve_api_key(stack.spec, stack.paths)
    httpx.put(url, json=faults, headers={"Authorization": f"Bearer {key}"}, timeout=5).raise_for_status()


def _readyz(stack, i: int) -> httpx.Response:
    return httpx.get(f"http://{stack.spec.local.host}:{stack.spec.worker_pool.metrics_port + i}/readyz",
                     timeout=5)


def _until(ctx, case: str, since: float, check: Callable | None = None):
    """Diagnose until it says ``case``; the report and the seconds since ``since``."""
    deadline = time.monotonic() + VERDICT_WAIT_S
    seen = []
    while time.monotonic() < deadline:
        report = invoke(ctx, "diagnose", THRESHOLDS)
        seen.append(report.case)
        if report.case == case and (check is None or check(report)):
            return report, time.monotonic() - since
        time.sleep(0.3)
    raise AssertionError(f"diagnose never said {case!r} in {VERDICT_WAIT_S:g} s; it said {seen[-5:]} "
                         f"(last:\n{report.render()})")


def _agree(report, action_prefix: str | None, evidence: str) -> str:
    """Verdict, action and evidence agree: the action is the case's, and the evidence shows it."""
    action = report.next_steps[0].split("  #")[0] if report.next_steps else "-"
    if action_prefix is None:
        assert report.next_steps == [], report.render()
    else:
        assert action.startswith(action_prefix), report.render()
    assert not any("restart-workers" in n for n in report.next_steps), report.render()
    assert any(evidence in e for e in report.evidence), report.render()
    return action


def test_diagnose_is_right_in_every_fault_of_the_drill(make_stack, drill, tmp_path: Path) -> None:
    stack = make_stack(**SIM)
    stack.up()
    ctx = drill.context(stack)
    rows: list[tuple[str, str, str, float]] = []

    def step(fault: str, inject: Callable[[], None], case: str, action: str | None, evidence: str,
             check: Callable | None = None) -> float:
        t0 = time.monotonic()
        inject()
        report, took = _until(ctx, case, t0, check)
        rows.append((fault, report.case, _agree(report, action, evidence), took))
        print(f"{fault} | {report.case} | {rows[-1][2]} | {took:.1f} s", flush=True)
        return t0

    def healthy() -> None:
        _until(ctx, "healthy", time.monotonic())

    feeder = Feeder(stack, tmp_path / "docs")
    feeder.thread.start()
    try:
        healthy()
        hung_at = step("server hangs every request", lambda: _sim_faults(stack, hang_rate=1.0), "server-hung",
                       "runbook restart-server --force", "got no answer in 8 s")
        # ... and every worker's breaker opens, its /readyz naming the hang (busy or idle)
        drill.wait_for("every worker not ready, naming the hang", lambda: all(
            (r := _readyz(stack, i)).status_code == 503 and "hung" in r.text
            for i in range(stack.spec.worker_pool.replicas)), timeout_s=VERDICT_WAIT_S, interval_s=0.2)
        rows.append(("  every worker's /readyz 503", "breaker open", "-", time.monotonic() - hung_at))
        print(f"every worker not ready (hang) | {time.monotonic() - hung_at:.1f} s", flush=True)
        _sim_faults(stack, hang_rate=0.0)
        healthy()
        step("server hangs some requests", lambda: _sim_faults(stack, hang_rate=0.5), "server-hung",
             "runbook restart-server --force", "got no answer in 8 s")
        _sim_faults(stack, hang_rate=0.0)
        healthy()
        step("503 storm", lambda: _sim_faults(stack, error_rate=1.0, error_status=503), "server-errors",
             "runbook restart-server --force", "answered HTTP 503")
        _sim_faults(stack, error_rate=0.0)
        healthy()
        step("500 storm", lambda: _sim_faults(stack, error_rate=1.0, error_status=500), "server-errors",
             "runbook restart-server --force", "answered HTTP 500")
        _sim_faults(stack, error_rate=0.0, error_status=503)
        healthy()
        worker = stack.supervisor.process_info()["worker-0"]["pid"]
        step("worker SIGKILL", lambda: os.kill(worker, signal.SIGKILL), "workers-starting", None,
             "worker-0: ")
        healthy()
        step("Redis stopped", lambda: stack.supervisor.stop_process("queue"), "queue-down",
             "runbook restart --component queue", "queue: stopped")
        ctx.apply = True
        assert invoke(ctx, "restart", {"component": "queue", "reason": "drill"}).outcome == "applied"
        ctx.apply = False
        healthy()
        server = stack.supervisor.process_info()[SERVER]["pid"]
        step("server SIGKILL", lambda: os.kill(server, signal.SIGKILL), "server-down",
             "runbook restart-server", f"{SERVER}: ")
        ctx.apply = True
        fixed = invoke(ctx, "restart-server", {"reason": "drill"})
        assert fixed.outcome == "applied" and fixed.case == "server-down", fixed.render()
        assert not any("gpu_memory_utilization" in n for n in fixed.next_steps), fixed.render()
        healthy()

        # A rollback takes its time (every worker restarts and loads MinerU): the clock starts
        # when it returns, as the on-call engineer runs the `runbook diagnose` it suggests.
        for to, fault, evidence in (("monolithic", "rollback to monolithic", "deployment_mode monolithic"),
                                    ("split", "return to split", f"{SERVER}: running, healthy")):
            out = invoke(ctx, "rollback", {"to": to})
            assert out.outcome == "applied", out.render()
            step(fault, lambda: None, "healthy", None, evidence)
            if to == "monolithic":
                time.sleep(5)
                step("monolithic steady state", lambda: None, "healthy", None, "deployment_mode monolithic")
        ctx.apply = False
    finally:
        feeder.stop.set()
        feeder.thread.join(timeout=10)
    r = feeder.r

    def finished():
        now = {row["job_id"]: row.get("state") for row in list_jobs(r, stack.spec, ids=feeder.ids)}
        return now if all(v in ("done", "dead_lettered") for v in now.values()) else None

    final = drill.wait_for("every document of the stream finished", finished, timeout_s=180)
    assert set(final.values()) == {"done"}, final  # none lost, none dead-lettered by a fault
    assert r.xlen(stack.spec.queue.dead_letter_stream) == 0
    # What the stack's programs wrote is their owner's only (supervisord's umask 077): the queue's
    # append-only file, the outputs, Prometheus' and Alertmanager's data.
    loose = [f"{p} {oct(p.stat().st_mode & 0o777)}" for p in stack.paths.data.rglob("*")
             if p.is_file() and p.stat().st_mode & 0o077]
    assert loose == [], loose
    # `down` while documents are still coming (the feeder's last ones): the clock starts when it
    # returns, as the person on call runs diagnose.
    more = submit(r, stack.spec, [make_pdf(tmp_path / "docs" / f"late{i}.pdf", 1, seed=100 + i) for i in range(3)])
    assert len(more) == 3  # one job id per document
    stack.down()
    step("`down` mid-run", lambda: None, "stack-down", f"splitstack up --stack {stack.spec.stack}",
         "is not running")
    print(f"\ndrill ({len(feeder.ids)} documents, none lost or dead-lettered)")
    print(f"{'fault':28} | {'verdict':17} | {'action':34} | seconds to the right verdict")
    for fault, case, action, took in rows:
        print(f"{fault:28} | {case:17} | {action:34} | {took:.1f}")
