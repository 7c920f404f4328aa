"""`runbook migrate` and `migrate-guard` on a Kubernetes stack that is migrating: the fake
Kubernetes API (testsupport/fakekube.py: the Deployments `pulumi up` creates, the queue's Secret,
the services/proxy API) and a real Redis with a password, reached as an operator reaches the
cluster's through a port-forward. The share moves live in Redis; the Redis password is read from
the Secret queue.password names; the abort page goes to the Alertmanager through the API
server's service proxy; `--to 100` drains the monolithic cohort and names the spec change and
`pulumi up` that decommission its pool instead of stopping anything."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis

from contract.migration import MONOLITHIC, SPLIT, cohort_stream
from contract.spec import Spec
from contract.spec_loader import load_stack, project_root
from runbooks.audit import AuditLog
from runbooks.context import ActionContext
from runbooks.platforms.kubernetes import KubernetesPlatform
from runbooks.registry import invoke
from testsupport.fakekube import FakeKube
from testsupport.worker import Harness
from worker.jobs import Job
from worker.queue import JobQueue
from worker.router import Router

pytestmark = pytest.mark.integration
ROOT = project_root(Path(__file__))
PASSWORD = "redis-test-password"
DRILL_GATE = """name: drill-cohorts
scenario: pipeline-smoke
gates:
  - kind: cohorts
    criteria: {max_error_fraction: 0.05, max_p95_increase_fraction: 0.10, max_crashes: 0}
"""


async def traffic(url: str, spec: Spec, n: int, split_outcome: str = "done") -> None:
    """n documents through the router; each cohort acks its own (the split one dead-letters them
    in a 500 storm), as the workers record them."""
    q = spec.queue
    r = aioredis.Redis.from_url(url, decode_responses=True)
    producer = JobQueue(r, q.stream, q.group, q.dead_letter_stream, "producer")
    router = Router(r, q.stream, q.group, "router")
    await router.ensure_groups()
    now = time.time()
    for i in range(n):
        await producer.enqueue(Job(source=f"/in/{i}.pdf", submitted_at=now - 10 - (i % 7) * 0.01))
    while await router.step(count=500, block_ms=10, reclaim_idle_s=60):
        pass
    for topology in (SPLIT, MONOLITHIC):
        w = JobQueue(r, cohort_stream(q.stream, topology), q.group, q.dead_letter_stream, f"w-{topology}",
                     records_stream=q.stream)
        await w.ensure_group()
        while batch := await w.read(500, 10):
            for d in batch:
                assert d.job is not None
                if topology == SPLIT and split_outcome == "dead_lettered":
                    await w.dead_letter(d, "server_rejected", "HTTP 500 from the inference server")
                else:
                    await w.ack(d.message_id, d.job.job_id, "done")
    await r.aclose()


async def strand(url: str, spec: Spec, n: int) -> list[str]:
    """n documents the router forwards at 100 % that no split worker reads any more; one of them
    delivered to a worker that is gone (pending). Their job ids."""
    q = spec.queue
    r = aioredis.Redis.from_url(url, decode_responses=True)
    producer = JobQueue(r, q.stream, q.group, q.dead_letter_stream, "producer")
    router = Router(r, q.stream, q.group, "router")
    ids = []
    for i in range(n):
        job = Job(source=f"/in/late-{i}.pdf", submitted_at=time.time())
        await producer.enqueue(job)
        ids.append(job.job_id)
    while await router.step(count=500, block_ms=10, reclaim_idle_s=60):
        pass
    gone = JobQueue(r, cohort_stream(q.stream, SPLIT), q.group, q.dead_letter_stream, "old-pod",
                    records_stream=q.stream)
    assert len(await gone.read(1, 10)) == 1
    await r.aclose()
    return ids


async def read_jobs(url: str, spec: Spec) -> list[str]:
    """What a worker reading the jobs stream gets now: job ids, sorted."""
    q = spec.queue
    r = aioredis.Redis.from_url(url, decode_responses=True)
    w = JobQueue(r, q.stream, q.group, q.dead_letter_stream, "new-pod", records_stream=q.stream)
    got = []
    while batch := await w.read(500, 10):
        for d in batch:
            assert d.job is not None
            got.append(d.job.job_id)
            await w.ack(d.message_id, d.job.job_id, "done")
    await r.aclose()
    return sorted(got)


def test_migrate_on_a_cluster_moves_the_share_in_its_redis(tmp_path: Path) -> None:
    h = Harness(tmp_path / "h")
    try:
        h.start_redis()
        h.redis().config_set("requirepass", PASSWORD)
        authed = f"redis://:{PASSWORD}@127.0.0.1:{h.redis_port}/0"
        spec = load_stack("prod", ROOT, overrides={"gpu_node_pool.node_count": 4,
                                                   "migration.monolithic_workers": 2})
        kube = FakeKube(spec)
        # What `pulumi up` created for the migration (infra/components/migration.py), and the
        # queue's Secret (its password, base64 as the API returns it).
        kube._deploy("router", {"app.kubernetes.io/name": "router"}, "router", "worker:0.1.0", [], [], 1)
        kube._deploy("worker-monolithic", {"app.kubernetes.io/instance": "worker-gpu"}, "worker", "gpu:0.1.0",
                     [], [], 2)
        assert spec.queue.password is not None
        kube.secrets[spec.queue.password.name] = {spec.queue.password.key: base64.b64encode(PASSWORD.encode()).decode()}
        gate = tmp_path / "drill-cohorts.yaml"
        gate.write_text(DRILL_GATE)
        audit = AuditLog(tmp_path / "audit.jsonl", time.time)
        forwarded = f"redis://127.0.0.1:{h.redis_port}"  # the port-forward: no password in the URL

        def run(name: str, **params):
            ctx = ActionContext(spec=spec, platform=KubernetesPlatform(spec, kube, kube, context="fake"),
                                audit=audit, apply=True, actor="oncall@test", use_real_nvml=False,
                                sleep=lambda s: None)
            return invoke(ctx, name, {"gate": str(gate), "window_s": 120, "stuck_after_s": 60,
                                      "redis_url": forwarded, **params})

        share = f"{spec.queue.stream}:migration:share"
        r = run("migrate", to=10)
        assert r.outcome == "applied", r.render()
        client = redis.Redis.from_url(authed, decode_responses=True)
        assert client.get(share) == "10"

        # A 500 storm on the split cohort: the guard sets the share to 0 and pages the cluster's
        # Alertmanager (POST /api/v2/alerts through the services/proxy API).
        asyncio.run(traffic(authed, spec, 400, split_outcome="dead_lettered"))
        r = run("migrate-guard")
        assert r.outcome == "rolled_back" and client.get(share) == "0", r.render()
        (call,) = [c for c in kube.calls if c[0] == "proxy_post"]
        service, path, body = call[1]
        assert (service, path) == ("monitoring/alertmanager-operated:9093", "api/v2/alerts")
        assert body[0]["labels"]["alertname"] == "MigrationCohortBreach" and "10 % -> 0 %" in \
            body[0]["annotations"]["summary"]
        assert any("paged through monitoring/alertmanager-operated" in d for d in r.done)

        # Healthy at 50 %, then to 100: the monolithic cohort drains; its pool is the program's.
        client.flushdb()
        client.set(share, "50")
        asyncio.run(traffic(authed, spec, 900))
        r = run("migrate", to=100)
        assert r.outcome == "applied", r.render()
        assert client.get(share) == "100"
        assert [s.verb for s in r.plan] == ["check", "set", "wait"]
        assert r.next_steps[0] == (
            "decommission the monolithic pool: set `splitstack:migration: {monolithic_workers: 0}` in "
            "Pulumi.prod.yaml, check it with `splitstack infra plan --stack prod`, then `pulumi up --stack prod`")
        # Nothing was patched, scaled or deleted on the cluster: the share is all that moved.
        assert [c for c in kube.changes() if c[0] != "proxy_post"] == []
        records = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
        assert [x["action"] for x in records] == ["migrate", "migrate-abort", "migrate-guard", "migrate"]

        # The spec change and `pulumi up`: no router, no monolithic pool, the split workers back on
        # the jobs stream. What the router forwarded last (and an entry whose pod was replaced
        # mid-document) is still in the split cohort's stream: `--to 100` again returns it.
        ids = asyncio.run(strand(authed, spec, 5))
        ended = load_stack("prod", ROOT, overrides={"gpu_node_pool.node_count": 4})
        kube = FakeKube(ended)
        kube.secrets[spec.queue.password.name] = {spec.queue.password.key: base64.b64encode(PASSWORD.encode()).decode()}

        def run_ended(apply: bool):
            ctx = ActionContext(spec=ended, platform=KubernetesPlatform(ended, kube, kube, context="fake"),
                                audit=audit, apply=apply, actor="oncall@test", use_real_nvml=False)
            return invoke(ctx, "migrate", {"to": 100, "redis_url": forwarded})

        r = run_ended(apply=False)
        assert r.outcome == "planned" and [s.line() for s in r.plan] == [
            "move cohort streams: 5 split and 0 monolithic entries back to the jobs stream (the workers read it "
            "now); drop the share"]
        r = run_ended(apply=True)
        assert r.outcome == "applied", r.render()
        assert client.get(share) is None
        split_stream = cohort_stream(spec.queue.stream, SPLIT)
        (group,) = client.xinfo_groups(split_stream)  # nothing left unacked or unread there
        assert group["pending"] == 0 and client.xrange(split_stream, f"({group['last-delivered-id']}", "+") == []
        assert asyncio.run(read_jobs(authed, spec)) == sorted(ids)  # each once, on the jobs stream
        r = run_ended(apply=True)
        assert r.outcome == "refused" and "stack 'prod' is not migrating" in r.summary
    finally:
        h.close()
