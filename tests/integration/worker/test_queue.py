"""JobQueue semantics against a real Redis: ack, reclaim after the visibility timeout, heartbeats,
dead-lettering and release, idempotent fan-out."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import redis.asyncio as aioredis

from worker import fanout
from worker.jobs import Job
from worker.queue import JobQueue

pytestmark = pytest.mark.integration


def _queues(h, *consumers):
    r = aioredis.Redis.from_url(h.redis_url, decode_responses=True)
    q = h.spec.queue
    return r, [JobQueue(r, q.stream, q.group, q.dead_letter_stream, c) for c in consumers]


def test_reclaim_heartbeat_deadletter_release(make_harness) -> None:
    h = make_harness()
    h.start_redis()

    async def scenario() -> None:
        r, (a, b) = _queues(h, "a", "b")
        await a.ensure_group()
        await a.ensure_group()  # idempotent
        job1, job2 = Job(source="/x/1.pdf"), Job(source="/x/2.pdf")
        await a.enqueue(job1)
        await a.enqueue(job2)
        d1, = await a.read(1, 100)
        d2, = await a.read(1, 100)
        assert (d1.job, d1.deliveries) == (job1, 1)
        await asyncio.sleep(0.6)
        await a.heartbeat([d2.message_id])  # a is alive for job2 only
        claimed = await b.reclaim(0.5, 10)
        assert [c.message_id for c in claimed] == [d1.message_id]
        assert claimed[0].deliveries == 2
        await b.dead_letter(claimed[0], "corrupt", "bad file")
        dead = await r.xrange(h.spec.queue.dead_letter_stream)
        assert dead[0][1]["reason"] == "bad file" and Job.from_fields(dead[0][1]) == job1
        assert (await r.hgetall(a.job_key(job1.job_id)))["state"] == "dead_lettered"
        await a.release(d2)
        again, = await b.read(1, 100)
        assert again.job == job2 and again.deliveries == 1
        await b.ack(again.message_id, job2.job_id, "done")
        pending = await r.xpending(h.spec.queue.stream, h.spec.queue.group)
        assert pending["pending"] == 0
        assert await a.lag() == 0
        await r.aclose()

    asyncio.run(scenario())


def test_fan_out_is_enqueued_once_even_if_the_parent_is_redelivered(make_harness) -> None:
    h = make_harness()
    h.start_redis()

    async def scenario() -> None:
        r, (a, b) = _queues(h, "a", "b")
        await a.ensure_group()
        parent = Job(source="/x/big.pdf")
        await a.enqueue(parent)
        d, = await a.read(1, 100)
        assert await fanout.fan_out(a, d, 50, 16, None) == 4
        assert await fanout.fan_out(a, d, 50, 16, None) == 4  # a second delivery: no new parts
        parts = [await b.read(1, 100) for _ in range(5)]
        got = [p[0].job for p in parts if p]
        assert [j.job_id for j in got] == [fanout.part_id(parent.job_id, i) for i in range(4)]
        assert [(j.pages.first, j.pages.last) for j in got] == [(1, 13), (14, 26), (27, 39), (40, 50)]
        assert all(j.traceparent for j in got) is False  # none given: each part starts a trace
        state = await r.hgetall(a.job_key(parent.job_id))
        assert state["state"] == "fanned_out" and state["parts_total"] == "4"
        done = [await fanout.record_part_done(a, j.part_of) for j in got]
        assert done == [False, False, False, True]
        assert await fanout.record_part_done(a, got[0].part_of) is True  # redelivered part: still complete
        assert json.loads((await fanout.parent_record(a, parent.job_id))["pages"]) == 50
        await r.aclose()

    asyncio.run(scenario())


def test_live_workers_announce_expire_and_leave(make_harness) -> None:
    """Fan-out sizes parts by the workers alive now: announced within the TTL, not stopped."""
    h = make_harness()
    h.start_redis()

    async def scenario() -> None:
        r, (a, b, c) = _queues(h, "a", "b", "c")
        await a.announce(True, ttl_s=60)
        await b.announce(True, ttl_s=60)
        assert await a.live_workers(ttl_s=60) == 2
        await r.zadd(c.workers_key, {"c": time.time() - 120})  # a worker that died 2 min ago
        assert await a.live_workers(ttl_s=60) == 2
        await b.announce(False, ttl_s=60)  # b stops: leaves the set, and c's stale entry is swept
        assert await a.live_workers(ttl_s=60) == 1
        assert await r.zrange(a.workers_key, 0, -1) == ["a"]
        await r.aclose()

    asyncio.run(scenario())


def test_running_workers_are_counted_and_a_stopped_one_leaves(make_harness) -> None:
    h = make_harness()
    h.start_redis()
    h.start_sim()
    w0, w1 = h.start_worker(), h.start_worker()
    key = f"{h.spec.queue.stream}:workers"
    names = sorted(h.redis().zrange(key, 0, -1))
    assert [n.split("-")[-2] for n in names] == ["w0", "w1"], names
    w1.stop()
    left = h.redis().zrange(key, 0, -1)
    assert len(left) == 1 and left[0].split("-")[-2] == "w0", left
    assert w0.alive()


def test_finishing_writes_act_once_and_reclaim_names_the_dead_consumer(make_harness) -> None:
    """A retry after a lost reply never dead-letters or releases twice; a reclaimed job says whom
    it was taken from; dead consumers holding nothing are pruned, live or busy ones are kept."""
    h = make_harness()
    h.start_redis()

    async def scenario() -> None:
        r, (a, b) = _queues(h, "a", "b")
        await a.ensure_group()
        jobs = [Job(source=f"/x/{i}.pdf") for i in range(3)]
        for job in jobs:
            await a.enqueue(job)
        d1, = await a.read(1, 100)
        d2, = await a.read(1, 100)
        assert await a.dead_letter(d1, "parse_failed", "page 2: boom") is True
        assert await a.dead_letter(d1, "parse_failed", "page 2: boom") is False  # the retry: no-op
        assert len(await r.xrange(h.spec.queue.dead_letter_stream)) == 1
        await a.release(d2)
        await a.release(d2)  # a retried release does not add a second copy
        assert await r.xlen(h.spec.queue.stream) == 4  # 3 submitted + 1 re-added
        await asyncio.sleep(0.6)
        d3, = await a.read(1, 100)
        await asyncio.sleep(0.6)
        taken, = await b.reclaim(0.5, 10)
        assert (taken.message_id, taken.abandoned_by, taken.deliveries) == (d3.message_id, "a", 2)
        assert taken.silent_s is not None and taken.silent_s >= 0.5
        await b.announce(True, 6.0)
        await r.hset(b.seen_key, "ghost", time.time() - 1000)
        await r.xgroup_createconsumer(h.spec.queue.stream, h.spec.queue.group, "ghost")
        await r.hset(b.seen_key, "a", time.time() - 1000)  # silent for long, holds nothing now
        removed = await b.prune_dead_consumers(dead_after_s=300)
        assert sorted(removed) == ["a", "ghost"]  # b holds d3 and announces itself: kept
        names = {c["name"] for c in await r.xinfo_consumers(h.spec.queue.stream, h.spec.queue.group)}
        assert "ghost" not in names and "b" in names
        await r.aclose()

    asyncio.run(scenario())


def test_dead_letters_list_show_redrive_from_the_command_line(make_harness, tmp_path) -> None:
    from pdf_fixtures import make_pdf
    from typer.testing import CliRunner

    from splitstack.cli.main import app

    h = make_harness()
    h.start_redis()
    env = {h.spec.queue.url_env: h.redis_url}
    overrides = ["--stack", "local"]
    # The harness's spec (free ports) is what the worker sees; the CLI reads the queue by URL.
    runner = CliRunner()

    async def dead_letter_two() -> None:
        r, (a,) = _queues(h, "a")
        await a.ensure_group()
        for job in (Job(job_id="doc-a", source="/x/a.pdf"), Job(job_id="doc-b", source="/x/b.pdf")):
            await a.enqueue(job)
            d, = await a.read(1, 100)
            await a.dead_letter(d, "parse_failed", f"/x/{job.job_id}.pdf: page 2: MinerU failed on it")
        await r.aclose()

    asyncio.run(dead_letter_two())
    listed = runner.invoke(app, ["dead-letters", "list", "--output", "json", *overrides], env=env)
    assert listed.exit_code == 0, listed.output
    rows = [json.loads(line) for line in listed.output.splitlines()]
    assert [x["job_id"] for x in rows] == ["doc-b", "doc-a"] and {x["kind"] for x in rows} == {"parse_failed"}
    shown = runner.invoke(app, ["dead-letters", "show", "doc-a", *overrides], env=env)
    assert json.loads(shown.output)["job"]["source"] == "/x/a.pdf"
    missing = runner.invoke(app, ["dead-letters", "show", "doc-zzz", *overrides], env=env)
    assert missing.exit_code == 2 and "no dead letter 'doc-zzz'" in missing.output
    nothing = runner.invoke(app, ["dead-letters", "redrive", *overrides], env=env)
    assert nothing.exit_code == 2 and "--kind KIND or --all" in nothing.output
    redriven = runner.invoke(app, ["dead-letters", "redrive", "--kind", "parse_failed", "--output", "json",
                                   *overrides], env=env)
    assert redriven.exit_code == 0, redriven.output
    assert sorted(json.loads(x)["job_id"] for x in redriven.output.splitlines()) == ["doc-a", "doc-b"]
    r = h.redis()
    assert r.xlen(h.spec.queue.dead_letter_stream) == 0
    assert r.hget(f"{h.spec.queue.stream}:job:doc-a", "state") == "queued"
    assert r.hget(f"{h.spec.queue.stream}:job:doc-a", "reason") is None
    # submit --json: one object per line, the path inside the input roots (the harness's, given as
    # the stack was started with: the temp folder is no default root).
    pdf = make_pdf(tmp_path / "in.pdf", 1)
    roots = json.dumps([str(r) for r in h.spec.worker_pool.input_roots] + [str(tmp_path)])
    sub = runner.invoke(app, ["submit", str(pdf), "--output", "json", *overrides,
                              "--spec-override", f"worker_pool.input_roots={roots}"], env=env)
    assert sub.exit_code == 0, sub.output
    assert json.loads(sub.output.strip())["file"] == str(pdf)
