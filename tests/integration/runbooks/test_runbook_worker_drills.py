"""Drills with the MinerU workers: kill the server while documents are in flight and restore it
with the runbook; the breakers close by themselves once the server answers. No document may be
lost."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from pdf_fixtures import make_pdf

from runbooks.registry import invoke
from stack.secrets import queue_url
from worker.jobs_view import connect, list_jobs, submit

pytestmark = pytest.mark.integration

SERVER = "server-vlm"
# A recovery timeout far longer than the drill: the breakers still close within seconds of the
# server answering, because their trial follows the readiness probe, not that clock.
LONG_RECOVERY_TIMEOUT = {
    "inference_servers.0.engine": "sim",
    # Page images of the generated PDFs need more than the local spec's 2048-token context.
    "inference_servers.0.max_model_len": 8192,
    "inference_servers.0.max_num_batched_tokens": 8192,
    "worker_pool.replicas": 2,
    "worker_pool.circuit_breaker.failure_threshold": 2,
    "worker_pool.circuit_breaker.recovery_timeout_s": 3600,
    "worker_pool.max_retries": 1,
    "queue.visibility_timeout_s": 10,
}


def test_server_killed_mid_batch_breakers_follow_its_recovery_nothing_lost(make_stack, drill, tmp_path: Path):
    stack = make_stack(**LONG_RECOVERY_TIMEOUT)
    stack.up()
    ctx = drill.context(stack)
    r = connect(stack.spec, queue_url(stack.spec, stack.paths))  # the stack's Redis asks for a password
    ids = submit(r, stack.spec, [make_pdf(tmp_path / f"d{i}.pdf", 2, seed=i) for i in range(4)])

    def states() -> dict[str, str]:
        return {row["job_id"]: row.get("state", "?") for row in list_jobs(r, stack.spec, ids=ids)}

    drill.wait_for("a first document done", lambda: "done" in states().values(), timeout_s=60)
    os.kill(stack.supervisor.process_info()[SERVER]["pid"], signal.SIGKILL)
    drill.wait_for("a worker breaker open", lambda: (ctx.prometheus.scalar(
        'max(mineru_vllm_circuit_breaker_state{job="workers"})') or 0) >= 2, timeout_s=30)

    down = invoke(ctx, "diagnose", {"thresholds": {"rate_window": "30s"}})
    assert down.case in ("server-down", "server-down-oom"), down.render()
    # The breakers are open because the server is down: the worker runbook refuses to act.
    ctx.apply = True
    refused = invoke(ctx, "restart-workers", {})
    assert refused.outcome == "refused" and "run `runbook restart-server` first" in refused.summary
    restarted_at = time.monotonic()
    assert invoke(ctx, "restart-server", {}).outcome == "applied"

    def finished() -> dict[str, str] | None:
        now = states()
        return now if all(v in ("done", "dead_lettered") for v in now.values()) else None

    # No worker restart: the breakers let a trial through as soon as the server answers
    # /v1/models, not after their 1-hour recovery_timeout_s.
    final = drill.wait_for("every document done", finished, timeout_s=60)
    assert time.monotonic() - restarted_at < 30
    # diagnose reads Prometheus: judge it once a scrape has seen the documents finish (until then
    # its last sample still shows them delivered and not acked, and none finished).
    drill.wait_for("Prometheus sees every document finished", lambda: (ctx.prometheus.scalar(
        'sum(mineru_pdfs_processed_total{job="workers"})') or 0) >= len(ids), timeout_s=30)
    closed = invoke(ctx, "diagnose", {"thresholds": {"rate_window": "30s"}})
    assert closed.case not in ("breaker-stuck-open", "pipeline-stalled"), closed.render()
    assert invoke(ctx, "restart-workers", {}).outcome == "noop"
    dead = r.xrange(stack.spec.queue.dead_letter_stream)
    assert set(final.values()) == {"done"}, (final, dead)
    outputs = stack.paths.data / stack.spec.output_store.path
    assert all((outputs / job_id / "metadata.json").is_file() for job_id in ids)
    assert r.xlen(stack.spec.queue.dead_letter_stream) == 0

    slow = invoke(ctx, "slow-pdfs", {"top": 2})  # the large-PDF case reads what the workers wrote
    assert slow.outcome == "report" and len(slow.evidence) == 2, slow.render()
    assert slow.summary.startswith(f"{len(ids)} processed documents in output store")
    assert all(" pages, " in line and "s/page" in line for line in slow.evidence)
    times = [d["processing_s"] for d in slow.data["documents"]]
    assert times == sorted(times, reverse=True)


def test_security_patch_rolls_workers_one_at_a_time_with_zero_downtime(make_stack, drill):
    import threading

    import httpx

    stack = make_stack(**{"inference_servers.0.engine": "sim", "worker_pool.replicas": 2})
    stack.up()
    ctx = drill.context(stack)
    urls = [stack.read_state()["components"][f"worker-{i}"]["url"] + "/readyz" for i in range(2)]
    pids = {n: stack.supervisor.process_info()[n]["pid"] for n in ("worker-0", "worker-1")}

    plan = invoke(ctx, "patch-workers", {"image_tag": "0.1.1-cve-fix"})
    assert plan.outcome == "planned" and "rolling, one replica at a time" in plan.plan[0].detail

    ready_counts: list[int] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            ok = 0
            for url in urls:
                try:
                    ok += httpx.get(url, timeout=1).status_code == 200
                except httpx.HTTPError:
                    pass
            ready_counts.append(ok)
            time.sleep(0.1)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    ctx.apply = True
    try:
        report = invoke(ctx, "patch-workers", {"image_tag": "0.1.1-cve-fix"})
    finally:
        stop.set()
        watcher.join(5)
    assert report.outcome == "applied", report.render()
    assert report.done[-1] == "check workers: all replicas on 0.1.1-cve-fix"
    now = {n: stack.supervisor.process_info()[n]["pid"] for n in pids}
    assert all(now[n] != pids[n] for n in pids)  # every replica was replaced
    assert min(ready_counts) >= 1 and 1 in ready_counts, ready_counts  # one at a time, never zero
    assert invoke(ctx, "patch-workers", {"image_tag": "0.1.1-cve-fix"}).outcome == "noop"
