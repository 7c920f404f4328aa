"""Job intake on a Redis stream with a consumer group (at-least-once delivery).

* A job is acked only after its outputs are durably stored (or it is dead-lettered).
* A job pending on a consumer that stopped heart-beating for ``visibility_timeout_s`` is taken
  over by another worker with XAUTOCLAIM (which counts a delivery). A job that keeps killing its
  workers is dead-lettered after ``max_delivery_attempts`` deliveries.
* Live workers heart-beat their in-flight jobs with ``XCLAIM ... JUSTID`` to themselves: that
  resets the idle time without counting a delivery, so a long document or a long outage of the
  inference server never makes a job look abandoned (and never pushes it toward the DLQ).
* Job state for `splitstack jobs` lives in one hash per job (``<stream>:job:<id>``) and a
  sorted set index by submission time.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, cast

import redis.asyncio as aioredis
from redis.exceptions import ResponseError
from redis.typing import EncodableT, FieldT

from worker.jobs import Job

STATES = ("queued", "running", "fanned_out", "done", "dead_lettered")
# Reply shapes of our client: RESP2 with decode_responses=True (worker/main.py). redis-py
# annotates replies for every protocol and decoding at once, hence the casts to these.
_StreamEntry = tuple[str, dict[str, str] | None]  # fields None: the entry was deleted
_ReadGroupReply = list[tuple[str, list[tuple[str, dict[str, str]]]]] | None  # None: block timed out
_AutoClaimReply = tuple[str, list[_StreamEntry], list[str]]


@dataclass(frozen=True)
class Delivery:
    message_id: str
    job: Job | None  # None when the entry could not be parsed (dead-lettered as 'bad_job')
    raw: dict[str, str]
    deliveries: int


class JobQueue:
    def __init__(self, client: aioredis.Redis, stream: str, group: str, dead_letter_stream: str,
                 consumer: str) -> None:
        self.r = client  # decode_responses=True
        self.stream = stream
        self.group = group
        self.dlq = dead_letter_stream
        self.consumer = consumer

    # -- keys ---------------------------------------------------------------------------------
    def job_key(self, job_id: str) -> str:
        return f"{self.stream}:job:{job_id}"

    @property
    def index_key(self) -> str:
        return f"{self.stream}:index"

    def parts_key(self, parent_id: str) -> str:
        return f"{self.stream}:parts:{parent_id}"

    @property
    def workers_key(self) -> str:
        return f"{self.stream}:workers"

    # -- live workers (for sizing fan-out) ---------------------------------------------------------
    # XINFO CONSUMERS cannot say who is alive: on Redis 7.0 a consumer blocked on an empty stream
    # does not refresh its idle time, and dead consumers stay listed. Workers announce themselves.
    async def announce(self, alive: bool, ttl_s: float) -> None:
        now = time.time()
        async with self.r.pipeline(transaction=True) as p:
            if alive:
                p.zadd(self.workers_key, {self.consumer: now})
            else:
                p.zrem(self.workers_key, self.consumer)
            p.zremrangebyscore(self.workers_key, "-inf", now - ttl_s)  # forget the dead
            await p.execute()

    async def live_workers(self, ttl_s: float) -> int:
        return int(await self.r.zcount(self.workers_key, time.time() - ttl_s, "+inf"))

    # -- setup / producer ---------------------------------------------------------------------------
    async def ensure_group(self) -> None:
        try:
            await self.r.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def enqueue(self, job: Job, **state: Any) -> str:
        """Add a job and its 'queued' record in one transaction."""
        async with self.r.pipeline(transaction=True) as p:
            p.xadd(self.stream, job.to_fields())
            p.hset(self.job_key(job.job_id), mapping=_flat({
                "state": "queued", "source": job.source, "submitted_at": job.submitted_at,
                "updated_at": time.time(), **state,
            }))
            p.zadd(self.index_key, {job.job_id: job.submitted_at})
            ids = await p.execute()
        return ids[0]

    # -- consumer -----------------------------------------------------------------------------------
    async def read(self, count: int, block_ms: int) -> list[Delivery]:
        reply = cast(_ReadGroupReply, await self.r.xreadgroup(self.group, self.consumer, {self.stream: ">"},
                                                              count=count, block=block_ms))
        out = []
        for _stream, entries in reply or []:
            for message_id, fields in entries:
                out.append(_delivery(message_id, fields, 1))
        return out

    async def reclaim(self, min_idle_s: float, count: int) -> list[Delivery]:
        """Take over jobs abandoned by dead workers (idle longer than the visibility timeout)."""
        _next, claimed, _deleted = cast(_AutoClaimReply, await self.r.xautoclaim(
            self.stream, self.group, self.consumer, int(min_idle_s * 1000), "0-0", count=count
        ))
        out = []
        for message_id, fields in claimed:
            if fields is None:
                continue
            pending = await self.r.xpending_range(self.stream, self.group, message_id, message_id, 1)
            times = cast(int, pending[0]["times_delivered"]) if pending else 1
            out.append(_delivery(message_id, fields, times))
        return out

    async def heartbeat(self, message_ids: list[str]) -> None:
        if message_ids:
            await self.r.xclaim(self.stream, self.group, self.consumer, 0, list(message_ids), justid=True)

    async def ack(self, message_id: str, job_id: str | None, state: str, **fields: Any) -> None:
        async with self.r.pipeline(transaction=True) as p:
            p.xack(self.stream, self.group, message_id)
            if job_id:
                p.hset(self.job_key(job_id), mapping=_flat({"state": state, "updated_at": time.time(), **fields}))
            await p.execute()

    async def dead_letter(self, delivery: Delivery, kind: str, reason: str) -> None:
        """Move a job to the dead-letter stream with its reason, then ack it, atomically."""
        job_id = delivery.job.job_id if delivery.job else None
        entry = {"reason": reason, "kind": kind, "job_id": job_id or "", "consumer": self.consumer,
                 "deliveries": str(delivery.deliveries), "message_id": delivery.message_id,
                 "failed_at": str(time.time()), **delivery.raw}
        async with self.r.pipeline(transaction=True) as p:
            p.xadd(self.dlq, stream_entry(entry))
            p.xack(self.stream, self.group, delivery.message_id)
            if job_id:
                p.hset(self.job_key(job_id), mapping=_flat({
                    "state": "dead_lettered", "reason": reason, "kind": kind, "updated_at": time.time()}))
            await p.execute()

    async def release(self, delivery: Delivery) -> None:
        """Give an unfinished job back at shutdown: re-add it for any worker and ack this copy,
        in one transaction (Redis streams have no NACK). Outputs are idempotent by job id."""
        async with self.r.pipeline(transaction=True) as p:
            p.xadd(self.stream, stream_entry(delivery.raw))
            p.xack(self.stream, self.group, delivery.message_id)
            if delivery.job:
                p.hset(self.job_key(delivery.job.job_id), mapping={"state": "queued", "updated_at": time.time()})
            await p.execute()

    async def set_state(self, job_id: str, **fields: Any) -> None:
        await self.r.hset(self.job_key(job_id), mapping=_flat({"updated_at": time.time(), **fields}))

    async def lag(self) -> int | None:
        """Entries not yet delivered to the group (XINFO GROUPS 'lag', Redis >= 7)."""
        for g in await self.r.xinfo_groups(self.stream):
            if g.get("name") == self.group:
                lag = g.get("lag")
                return int(lag) if lag is not None else None
        return None


def _delivery(message_id: str, fields: dict[str, str], deliveries: int) -> Delivery:
    try:
        job = Job.from_fields(fields)
    except ValueError:
        job = None
    return Delivery(message_id, job, dict(fields), deliveries)


def stream_entry(fields: dict[str, str]) -> dict[FieldT, EncodableT]:
    """``fields`` typed as redis-py's xadd takes them (an invariant dict type that a
    ``dict[str, str]`` does not match as is); the same pairs, copied."""
    return {k: v for k, v in fields.items()}


def _flat(mapping: dict[str, Any]) -> dict[FieldT, EncodableT]:
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in mapping.items() if v is not None}
