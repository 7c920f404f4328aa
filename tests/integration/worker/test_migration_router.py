"""The migration router against a real Redis: the share changes mid-stream, routers die and are
taken over, and every job lands exactly once, in the cohort its bucket says at the share that
was live when it was forwarded."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from contract.migration import MONOLITHIC, SPLIT, cohort_of, cohort_stream, shadow_bucket, shadow_id, shadow_of
from worker.jobs import Job
from worker.queue import JobQueue
from worker.router import Router, get_share, set_shadow_share, set_share

pytestmark = pytest.mark.integration

SCHEDULE = [0, 10, 10, 50, 50, 100, 0, 50, 10, 100]  # the share before each router step


async def _cohort_ids(r: aioredis.Redis, stream: str) -> list[str]:
    return [Job.from_fields(f).job_id for _id, f in await r.xrange(stream)]


def test_share_changes_mid_stream_every_job_lands_once_in_its_cohort(make_harness) -> None:
    h = make_harness()
    h.start_redis()
    q = h.spec.queue

    async def scenario() -> None:
        r = aioredis.Redis.from_url(h.redis_url, decode_responses=True)
        producer = JobQueue(r, q.stream, q.group, q.dead_letter_stream, "producer")
        a, b = Router(r, q.stream, q.group, "router-a"), Router(r, q.stream, q.group, "router-b")
        await a.ensure_groups()
        await a.ensure_groups()  # idempotent
        jobs = [Job(job_id=f"doc-{i:04d}", source=f"/in/{i}.pdf") for i in range(300)]
        for job in jobs:
            await producer.enqueue(job)
        # A router that read entries and died before forwarding them: they stay pending.
        dead = await r.xreadgroup(q.group, "router-dead", {q.stream: ">"}, count=13)
        dead_ids = {Job.from_fields(f).job_id for _s, entries in dead for _id, f in entries}
        assert len(dead_ids) == 13

        expected: dict[str, str] = {}
        seen = {SPLIT: 0, MONOLITHIC: 0}
        for i, share in enumerate(SCHEDULE):
            assert await set_share(r, q.stream, share) == (SCHEDULE[i - 1] if i else 0)
            assert await get_share(r, q.stream) == share
            router = a if i % 2 == 0 else b
            # reclaim_idle_s=0: the dead router's entries are taken over at the first step
            await router.step(count=30, block_ms=10, reclaim_idle_s=0.0)
            for cohort in (SPLIT, MONOLITHIC):
                ids = await _cohort_ids(r, cohort_stream(q.stream, cohort))
                for job_id in ids[seen[cohort]:]:
                    assert job_id not in expected, f"{job_id} forwarded twice"
                    assert cohort == cohort_of(job_id, share), (job_id, cohort, share)
                    expected[job_id] = cohort
                seen[cohort] = len(ids)
        # drain what is left at the last share
        while await a.step(count=100, block_ms=10, reclaim_idle_s=0.0):
            pass
        split = await _cohort_ids(r, cohort_stream(q.stream, SPLIT))
        mono = await _cohort_ids(r, cohort_stream(q.stream, MONOLITHIC))
        for job_id in split[seen[SPLIT]:]:
            assert cohort_of(job_id, SCHEDULE[-1]) == SPLIT
        assert sorted(split + mono) == sorted(j.job_id for j in jobs)  # each exactly once
        assert len(set(split)) == len(split) and not set(split) & set(mono)
        assert dead_ids <= set(split) | set(mono)
        assert {s for s in (SPLIT, MONOLITHIC) if a.forwarded[s] + b.forwarded[s]} == {SPLIT, MONOLITHIC}
        pending = await r.xpending(q.stream, q.group)
        assert pending["pending"] == 0
        # The job record names its cohort, keyed by the jobs stream producers write to.
        assert (await r.hgetall(producer.job_key(split[0])))["topology"] == SPLIT
        assert (await r.hgetall(producer.job_key(mono[0])))["topology"] == MONOLITHIC

        # A cohort's worker reads its stream and acks; its records stay on the jobs stream's keys.
        worker = JobQueue(r, cohort_stream(q.stream, SPLIT), q.group, q.dead_letter_stream, "w0",
                          records_stream=q.stream)
        d, = await worker.read(1, 100)
        assert d.job is not None and d.job.job_id == split[0]
        await worker.ack(d.message_id, d.job.job_id, "done")
        assert (await r.hgetall(producer.job_key(split[0])))["state"] == "done"
        assert worker.job_key("x") == producer.job_key("x")
        await r.aclose()

    asyncio.run(scenario())


def test_retry_of_a_forward_after_a_lost_reply_adds_nothing(make_harness) -> None:
    """The forward acts only while the entry is pending: running it twice forwards once."""
    h = make_harness()
    h.start_redis()
    q = h.spec.queue

    async def scenario() -> None:
        r = aioredis.Redis.from_url(h.redis_url, decode_responses=True)
        router = Router(r, q.stream, q.group, "router")
        await router.ensure_groups()
        await set_share(r, q.stream, 100)
        await r.xadd(q.stream, Job(job_id="once", source="/in/once.pdf").to_fields())
        (_s, [(message_id, fields)]), = await r.xreadgroup(q.group, "router", {q.stream: ">"}, count=1)
        assert await router._forward(message_id, fields) == SPLIT
        assert await router._forward(message_id, fields) is None
        assert await r.xlen(cohort_stream(q.stream, SPLIT)) == 1
        assert await r.xlen(cohort_stream(q.stream, MONOLITHIC)) == 0
        await r.aclose()

    asyncio.run(scenario())


def test_shadow_copies_go_once_to_the_other_cohort_and_only_while_both_take_documents(make_harness) -> None:
    h = make_harness()
    h.start_redis()
    q = h.spec.queue

    async def scenario() -> None:
        r = aioredis.Redis.from_url(h.redis_url, decode_responses=True)
        producer = JobQueue(r, q.stream, q.group, q.dead_letter_stream, "producer")
        router = Router(r, q.stream, q.group, "router")
        await router.ensure_groups()
        assert await set_shadow_share(r, q.stream, 20) == 0
        jobs = [Job(job_id=f"doc-{i:04d}", source=f"/in/{i}.pdf") for i in range(200)]
        for share, batch in ((50, jobs[:100]), (100, jobs[100:150]), (0, jobs[150:])):
            await set_share(r, q.stream, share)
            for job in batch:
                await producer.enqueue(job)
            while await router.step(count=100, block_ms=10):
                pass
        split = await _cohort_ids(r, cohort_stream(q.stream, SPLIT))
        mono = await _cohort_ids(r, cohort_stream(q.stream, MONOLITHIC))
        copies = [i for i in split + mono if shadow_of(i)]
        documents = [i for i in split + mono if not shadow_of(i)]
        assert sorted(documents) == sorted(j.job_id for j in jobs)  # every document once, copies apart
        sampled = {j.job_id for j in jobs[:100] if shadow_bucket(j.job_id) < 20}
        assert sorted(shadow_of(c) for c in copies) == sorted(sampled)  # at 50 % only, each once
        assert 8 <= len(sampled) <= 35 and router.forwarded["shadow"] == len(sampled)
        for doc in sampled:
            primary = cohort_of(doc, 50)
            other = MONOLITHIC if primary == SPLIT else SPLIT
            assert shadow_id(doc) in (split if other == SPLIT else mono)
            record = await r.hgetall(producer.job_key(doc))
            assert (record["topology"], record["shadow"]) == (primary, other)
            shadow = await r.hgetall(producer.job_key(shadow_id(doc)))
            assert (shadow["topology"], shadow["shadow_of"], shadow["state"]) == (other, doc, "queued")
        # the copies are not documents: the submission index holds the documents only
        assert sorted(await r.zrange(producer.index_key, 0, -1)) == sorted(j.job_id for j in jobs)
        await r.aclose()

    asyncio.run(scenario())
