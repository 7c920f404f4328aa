"""Big documents in parallel: fan out into page-range jobs, fan in by page order.

A document with more than ``split_pages_over`` pages is not parsed by the worker that took it:
that worker enqueues part jobs of at most ``page_window`` pages (as many as a whole number of
rounds over the workers alive now, see :func:`plan_parts`) and acks the parent, in a single
Redis transaction guarded by WATCH on the parent's parts record (a redelivered parent never
enqueues its parts twice). Parts are ordinary jobs (same retries, breaker, DLQ, reclaim), whose
outputs are stored under ``<parent>.p<index>``. Whichever worker completes the last part (the
done-set reaching ``total``) merges the parts in page order into the parent's output. The merge
is idempotent, so two workers racing on it write the same thing once.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any, cast

from redis.exceptions import WatchError

from worker.jobs import Job, PageRange, PartOf
from worker.queue import Delivery, JobQueue, _flat
from worker.store import CONTENT_LIST, IMAGES, MARKDOWN, OutputStore


def plan_parts(page_count: int, part_pages: int, workers: int = 1) -> list[PageRange]:
    """Parts of at most ``part_pages`` pages (the memory bound), as even as possible, and as many
    as a whole number of rounds over the live ``workers``: 100 pages in parts of 16 are 7 parts,
    and on 2 or 4 workers the 7th would run alone as a tail round; 8 parts of 13 pages do not."""
    count = math.ceil(page_count / part_pages)
    if workers > 1:
        count = min(page_count, math.ceil(count / workers) * workers)
    size = math.ceil(page_count / count)
    return [PageRange(first=s + 1, last=min(page_count, s + size)) for s in range(0, page_count, size)]


def part_id(parent_id: str, index: int) -> str:
    return f"{parent_id}.p{index:04d}"


async def fan_out(queue: JobQueue, delivery: Delivery, page_count: int, part_pages: int,
                  traceparent: str | None, workers: int = 1) -> int:
    """Enqueue the parts and ack the parent atomically; returns the number of parts."""
    job = delivery.job
    assert job is not None
    parts = plan_parts(page_count, part_pages, workers)
    key = queue.parts_key(job.job_id)
    async with queue.r.pipeline(transaction=True) as p:
        try:
            await p.watch(key)
            if await p.exists(key):  # fanned out by an earlier delivery: just ack this one
                await p.reset()
                await queue.ack(delivery.message_id, None, "fanned_out")
                return int(await queue.r.hget(key, "total") or len(parts))
            p.multi()
            now = time.time()
            p.hset(key, mapping=_flat({"total": len(parts), "pages": page_count, "started_at": now,
                                       "job": job.model_dump_json(exclude_none=True)}))
            for i, pages in enumerate(parts):
                child = Job(job_id=part_id(job.job_id, i), source=job.source, pages=pages,
                            language=job.language, correlation_id=job.correlation_id,
                            traceparent=job.traceparent or traceparent, submitted_at=job.submitted_at,
                            part_of=PartOf(parent_id=job.job_id, index=i, total=len(parts)))
                p.xadd(queue.stream, child.to_fields())
            p.xack(queue.stream, queue.group, delivery.message_id)
            p.hset(queue.job_key(job.job_id), mapping=_flat({
                "state": "fanned_out", "pages": page_count, "parts_total": len(parts),
                "parts_done": 0, "updated_at": now}))
            await p.execute()
        except WatchError:  # another delivery fanned it out at the same moment
            await queue.ack(delivery.message_id, None, "fanned_out")
    return len(parts)


async def record_part_done(queue: JobQueue, part: PartOf) -> bool:
    """Mark a part done; True when all parts of its parent are done (time to merge). Retried
    through a Redis blip (adding to a set is idempotent)."""
    async def mark() -> int:
        async with queue.r.pipeline(transaction=True) as p:
            p.sadd(queue.parts_key(part.parent_id) + ":done", part.index)
            p.scard(queue.parts_key(part.parent_id) + ":done")
            _added, count = await p.execute()
        return int(count)

    done = await queue.through_blip(mark)
    await queue.set_state(part.parent_id, parts_done=done)
    return int(done) >= part.total


async def parent_record(queue: JobQueue, parent_id: str) -> dict[str, str]:
    # The queue's client decodes replies (decode_responses=True), so keys and values are str.
    return cast(dict[str, str], await queue.r.hgetall(queue.parts_key(parent_id)))


def merge_parts(store: OutputStore, parent: Job, total: int, staging: Path) -> tuple[str, list, dict]:
    """Markdown, content list and summed metadata of the parts, in page order."""
    markdown: list[str] = []
    content: list[Any] = []
    requests = pages = 0
    for i in range(total):
        pid = part_id(parent.job_id, i)
        markdown.append(store.read_file(pid, MARKDOWN).decode())
        content.extend(json.loads(store.read_file(pid, CONTENT_LIST)))
        meta = store.read_metadata(pid)
        requests += meta.get("requests_sent", 0)
        pages += meta.get("pages", 0)
        store.copy_images(pid, staging / IMAGES)
    return "\n\n".join(m.rstrip("\n") for m in markdown) + "\n", content, {
        "requests_sent": requests, "pages": pages, "parts": total}


async def merge_parent(queue: JobQueue, store: OutputStore, part: PartOf, backend: str,
                       version: str, model: str, consumer: str) -> tuple[bool, float, int]:
    """Merge a parent whose parts are all stored; returns (committed by us, seconds since the
    parent's intake, its pages). Idempotent: a second merge finds the output and commits nothing."""
    import asyncio

    record = await parent_record(queue, part.parent_id)
    parent = Job.model_validate_json(record["job"])
    staging = store.staging(parent.job_id)
    try:
        markdown, content, agg = await asyncio.to_thread(merge_parts, store, parent, part.total, staging)
        elapsed = time.time() - float(record.get("started_at", time.time()))
        metadata = {"job_id": parent.job_id, "correlation_id": parent.correlation_id,
                    "source": parent.source, "language": parent.language, "backend": backend,
                    "mineru_version": version, "model": model, "processing_s": round(elapsed, 3),
                    "merged_by": consumer, "completed_at": time.time(), **agg}
        committed = await asyncio.to_thread(store.commit, parent.job_id, staging, markdown, content, metadata)
    except BaseException:
        store.discard(staging)
        raise
    await queue.set_state(parent.job_id, state="done", pages=agg["pages"], processing_s=round(elapsed, 3),
                          requests_sent=agg["requests_sent"], output=store.location(parent.job_id))
    return committed, elapsed, int(agg["pages"])
