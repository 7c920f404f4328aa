"""The migration drill, shortened: both topologies at once on real processes (Redis, the router,
the twin with the mineru25-h200 profile: a shared server for the split cohort and a private
engine for the monolithic one, a MinerU worker per cohort).

0 -> 10 % by `runbook migrate`, then the fault phase at 50 %: a 500 storm on the split cohort's
server, `runbook migrate-guard` aborts to 0 % with a page; the fault is cleared and every
document ends exactly once, in the cohort the router chose, with its output naming that
topology. (The promotion path 10 -> 50 -> 100 with its gates is in test_migrate_actions.py: a
passing window needs hundreds of documents per cohort, more than a CI run of the twin has.)"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import httpx
import pytest
from pdf_fixtures import make_pdf

from contract.migration import ENV_COHORT_STREAMS, MONOLITHIC, SPLIT
from runbooks.audit import AuditLog
from runbooks.cohorts import CohortControl
from runbooks.context import ActionContext
from runbooks.registry import invoke
from testsupport.procs import free_port
from testsupport.worker import API_KEY, Harness

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]
GATE = """name: drill-cohorts
scenario: pipeline-smoke
gates:
  - kind: cohorts
    criteria: {max_error_fraction: 0.05, max_p95_increase_fraction: 0.10, max_crashes: 0}
"""


class HarnessTarget:
    kind = "local"

    def __init__(self, h: Harness) -> None:
        self.spec = h.spec

    def target(self) -> str:
        return "drill harness"

    def verify_target(self) -> list[str]:
        return []


def test_drill_abort_on_a_500_storm_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    pytest.importorskip("mineru", reason="the worker extra (mineru) is not installed")
    cohort_env = {ENV_COHORT_STREAMS: "1"}
    h = Harness(tmp_path / "split", sim_profile="mineru25-h200", env_extra=cohort_env)
    mono = Harness(tmp_path / "mono", sim_profile="mineru25-h200", env_extra=cohort_env, redis_port=h.redis_port,
                   overrides={"deployment_mode": "monolithic", "worker_pool.in_process.backend": "private-server"})
    mono.outputs = h.outputs
    try:
        h.start_redis()
        h.start_sim()
        _, urls = mono.start_private_engines(1, "--engine-load-scale", "0.02")
        q = h.spec.queue
        router = h._start("router", [sys.executable, "-m", "worker.router", "--redis-url", h.redis_url,
                                     "--stream", q.stream, "--group", q.group], free_port())
        workers = [h.start_worker(0, wait_ready=False), mono.start_worker(1, wait_ready=False, server_url=urls[0])]
        for w in workers:
            h.wait_ready(w)
        gate = tmp_path / "drill.yaml"
        gate.write_text(GATE)
        pages: list[str] = []
        control = CohortControl(h.redis(), q.stream, q.group, decommission=lambda: [],
                                page=lambda s: pages.append(s) or "paged (drill receiver)")
        audit = AuditLog(tmp_path / "audit.jsonl", time.time)
        timeline: list[str] = []
        t0 = time.time()

        def run(name: str, **params):
            ctx = ActionContext(spec=h.spec, platform=HarnessTarget(h), audit=audit, apply=True,
                                migration=control)
            r = invoke(ctx, name, {"gate": str(gate), "window_s": 300, "stuck_after_s": 20, **params})
            timeline.append(f"t+{time.time() - t0:5.1f} s {name} {params}: {r.outcome}: {r.summary}")
            return r

        docs = [make_pdf(tmp_path / "docs" / f"d{i}.pdf", 1, seed=i) for i in range(24)]
        assert run("migrate", to=10).outcome == "applied"
        ids = h.submit(docs[:8])
        h.wait_terminal(ids, timeout_s=180)
        control.set_share(50)  # the fault phase starts at 50 %
        timeline.append(f"t+{time.time() - t0:5.1f} s share set to 50 % (drill)")
        httpx.put(f"http://127.0.0.1:{h.server_port}/sim/faults", json={"error_rate": 1.0, "error_status": 500},
                  headers={"Authorization": f"Bearer {API_KEY}"}, timeout=5).raise_for_status()
        t_fault = time.time()
        ids += h.submit(docs[8:])
        r = run("migrate-guard", watch_s=240, every_s=2)
        assert r.outcome == "rolled_back" and control.share() == 0, (r.render(), timeline)
        t_abort = time.time() - t_fault
        assert pages and "-> 0 %" in pages[0]
        httpx.put(f"http://127.0.0.1:{h.server_port}/sim/faults", json={"error_rate": 0.0},
                  headers={"Authorization": f"Bearer {API_KEY}"}, timeout=5).raise_for_status()
        rows = h.wait_terminal(ids, timeout_s=240)
        # every document exactly once: one record, one terminal state, at most one output, in its cohort
        assert len(rows) == len(ids) == len(set(ids)) == 24
        cohorts = {job_id: row.get("topology") for job_id, row in rows.items()}
        assert set(cohorts.values()) <= {SPLIT, MONOLITHIC} and SPLIT in cohorts.values()
        for job_id, row in rows.items():
            if row["state"] == "done":
                meta = json.loads((h.outputs / job_id / "metadata.json").read_text())
                assert meta["topology"] == cohorts[job_id], (job_id, meta["topology"], cohorts[job_id])
        assert router.alive()
        timeline.append(f"abort {t_abort:.1f} s after the fault; states "
                        f"{sorted((v['state'], cohorts[k]) for k, v in rows.items())}")
        print("\n".join(timeline))
    finally:
        mono.close()
        h.close()

