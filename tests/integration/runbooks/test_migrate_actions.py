"""`runbook migrate` and `runbook migrate-guard` against a real Redis: the router forwards the
jobs stream by share, each cohort's queue code acks or dead-letters its documents (the records
the actions judge are the ones the workers write), the share moves only on a passing window,
"too few documents" refuses, a 500 storm and a hang abort to 0 with a page and an audit record,
and --to 100 drains the monolithic cohort before stopping its pool."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from contract.migration import MONOLITHIC, SPLIT, cohort_stream
from runbooks.audit import AuditLog
from runbooks.cohorts import CohortControl
from runbooks.context import ActionContext
from runbooks.registry import invoke
from testsupport.worker import Harness
from worker.jobs import Job
from worker.queue import JobQueue
from worker.router import Router

pytestmark = pytest.mark.integration

# The drill's short windows: 5 % instead of 0.1 % (0 errors in ~75 documents can pass it).
DRILL_GATE = """name: drill-cohorts
scenario: pipeline-smoke
gates:
  - kind: cohorts
    criteria: {max_error_fraction: 0.05, max_p95_increase_fraction: 0.10, max_crashes: 0}
"""


class StackUnderTest:
    """The Harness' Redis: what the platform would name and verify for the actions."""

    kind = "local"

    def __init__(self, h: Harness) -> None:
        self.spec = h.spec

    def target(self) -> str:
        return f"harness stack {self.spec.stack}"

    def verify_target(self) -> list[str]:
        return []


async def _traffic(h: Harness, n: int, *, split_outcome: str = "done", age_s: float = 10.0) -> None:
    """Submit n documents to the jobs stream, route them, and let each cohort finish its own:
    the split cohort acks (done), dead-letters (a 500 storm), leaves them (a hang) or takes none
    (a hang whose workers stop taking documents)."""
    q = h.spec.queue
    r = aioredis.Redis.from_url(h.redis_url, decode_responses=True)
    producer = JobQueue(r, q.stream, q.group, q.dead_letter_stream, "producer")
    router = Router(r, q.stream, q.group, "router")
    await router.ensure_groups()
    now = time.time()
    for i in range(n):
        # submitted age_s ago, give or take: both cohorts' latency is about age_s
        await producer.enqueue(Job(source=f"/in/{i}.pdf", submitted_at=now - age_s - (i % 7) * 0.01))
    while await router.step(count=500, block_ms=10, reclaim_idle_s=60):
        pass
    for topology in (SPLIT, MONOLITHIC):
        w = JobQueue(r, cohort_stream(q.stream, topology), q.group, q.dead_letter_stream, f"w-{topology}",
                     records_stream=q.stream)
        await w.ensure_group()
        while (topology != SPLIT or split_outcome != "queued") and (batch := await w.read(500, 10)):
            for d in batch:
                assert d.job is not None
                outcome = split_outcome if topology == SPLIT else "done"
                if outcome == "done":
                    await w.ack(d.message_id, d.job.job_id, "done")
                elif outcome == "dead_lettered":
                    await w.dead_letter(d, "server_rejected", "HTTP 500 from the inference server")
                else:  # "hang": taken (as the worker records it) and never finished
                    await w.set_state(d.job.job_id, state="running", consumer=w.consumer)
    await r.aclose()


def test_migrate_steps_refusals_abort_and_decommission(tmp_path: Path) -> None:
    h = Harness(tmp_path / "h")
    try:
        h.start_redis()
        gate = tmp_path / "drill-cohorts.yaml"
        gate.write_text(DRILL_GATE)
        stopped: list[str] = []
        pages: list[str] = []
        control = CohortControl(h.redis(), h.spec.queue.stream, h.spec.queue.group,
                                decommission=lambda: stopped.append("mono-worker-0") or ["mono-worker-0"],
                                page=lambda s: pages.append(s) or "paged (test receiver)")
        audit = AuditLog(tmp_path / "audit.jsonl", time.time)

        def run(name: str, apply: bool = True, **params):
            ctx = ActionContext(spec=h.spec, platform=StackUnderTest(h), audit=audit, apply=apply,
                                migration=control, sleep=lambda s: None)
            return invoke(ctx, name, {"gate": str(gate), "window_s": 120, "stuck_after_s": 60, **params})

        r = run("migrate", apply=False, to=10)
        assert r.outcome == "planned" and control.share() == 0
        assert [s.line() for s in r.plan] == [
            "set split share: 0 % -> 10 % of documents (live: the router reads it on every document)"]
        assert "no split cohort yet" in " ".join(r.evidence)
        r = run("migrate", to=50)
        assert r.outcome == "refused" and "run `runbook migrate --to 10` first" in r.summary
        assert run("migrate", to=10).outcome == "applied" and control.share() == 10

        asyncio.run(_traffic(h, 400))  # ~40 split documents: too few for the p95 (200 each)
        r = run("migrate", to=50)
        assert r.outcome == "refused" and r.summary.startswith("too few documents to judge"), r.summary
        asyncio.run(_traffic(h, 2400))
        r = run("migrate", to=50)
        assert r.outcome == "applied", r.render()
        assert control.share() == 50 and r.plan[0].line().startswith("check gate")

        # A 500 storm in the split cohort at 50 %: the guard aborts at once and pages.
        assert run("migrate-guard").outcome == "report"  # healthy: nothing to do
        asyncio.run(_traffic(h, 200, split_outcome="dead_lettered"))
        r = run("migrate-guard", watch_s=30, every_s=5)
        assert r.outcome == "rolled_back" and control.share() == 0, r.render()
        assert "split error rate: fail" in r.summary and len(pages) == 1 and "50 % -> 0 %" in pages[0]
        records = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
        abort = [x for x in records if x["action"] == "migrate-abort"]
        assert abort and abort[0]["params"] == {"share_before": 50, "share_after": 0}
        assert [x["outcome"] for x in records if x["action"] == "migrate-guard"] == ["report", "rolled_back"]

        # A hang: documents never finish; past stuck_after_s they count as failed.
        h.redis().flushdb()
        control.set_share(10)
        asyncio.run(_traffic(h, 400, split_outcome="hang", age_s=90))
        r = run("migrate-guard")
        assert r.outcome == "rolled_back" and control.share() == 0, r.render()

        # A hang whose workers stop taking documents (their readiness probe fails): the split
        # documents stay queued in their cohort's stream; past stuck_after_s they count as failed.
        h.redis().flushdb()
        control.set_share(10)
        asyncio.run(_traffic(h, 400, split_outcome="queued", age_s=90))
        assert control.backlog(SPLIT) > 0
        r = run("migrate-guard")
        assert r.outcome == "rolled_back" and control.share() == 0 and "split error rate: fail" in r.summary, \
            r.render()

        # Healthy again, to 100: the monolithic cohort drains, then its pool stops.
        h.redis().flushdb()
        control.set_share(50)
        asyncio.run(_traffic(h, 900))
        r = run("migrate", to=100)
        assert r.outcome == "applied", r.render()
        assert control.share() == 100 and stopped == ["mono-worker-0"]
        assert [s.verb for s in r.plan] == ["check", "set", "wait", "stop"]
        assert run("migrate", to=100).outcome == "noop"
    finally:
        h.close()
