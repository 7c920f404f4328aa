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
* The writes that end a delivery (ack, dead-letter, release) survive a Redis blip: they are
  retried for ``FINISH_RETRY_S`` while Redis restarts, and each is a script that acts only
  while the entry is still pending for the group, so a retry after a lost reply never adds a
  second dead letter or a second copy of the job.
* Reclaiming names the consumer that held the job and how long it had been silent: the
  evidence behind a ``poison`` verdict.
* A dead worker's jobs come back in seconds, not at the visibility timeout: every worker
  announces itself every ``ANNOUNCE_INTERVAL_S`` (``<stream>:workers:seen``), and a consumer that
  has not for ``DEAD_SILENT_S``, or whose process is gone (same host, its pid in its name), holds
  nothing any more: :meth:`JobQueue.reclaim_from_dead` takes its entries over. The visibility
  timeout stays the backstop for consumers no worker announced (an older worker version).
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import psutil
import redis.asyncio as aioredis
from redis.exceptions import BusyLoadingError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.typing import EncodableT, FieldT
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_delay
from tenacity.wait import wait_exponential_jitter

from worker.jobs import Job

T = TypeVar("T")
STATES = ("queued", "running", "fanned_out", "done", "dead_lettered")
# Reply shapes of our client: RESP2 with decode_responses=True (worker/main.py). redis-py
# annotates replies for every protocol and decoding at once, hence the casts to these.
_StreamEntry = tuple[str, dict[str, str] | None]  # fields None: the entry was deleted
_ReadGroupReply = list[tuple[str, list[tuple[str, dict[str, str]]]]] | None  # None: block timed out
FINISH_RETRY_S = 60.0  # a Redis restart (supervisord, a pod) is back well within this
DEAD_CONSUMER_S = 300.0  # a consumer not announced for this long, holding nothing, is removed
ANNOUNCE_INTERVAL_S = 2.0  # every worker says it is alive this often (its own loop: worker/runner.py)
ANNOUNCE_TTL_S = 3 * ANNOUNCE_INTERVAL_S  # a worker not heard from for this long is not counted live
# A consumer silent this long is dead and its jobs are taken over (a worker's announcements have
# their own loop, so only a dead process, or one cut off from Redis, is silent this long).
DEAD_SILENT_S = 10.0
# Errors of a Redis that is restarting or unreachable: the write is retried.
_BLIP = (RedisConnectionError, RedisTimeoutError, BusyLoadingError, ConnectionError, TimeoutError)

# KEYS: stream, job key (or ""), [dlq]; ARGV: group, message id, then script-specific values.
# Each acts only while the entry is still pending for the group (XPENDING on its id): a retry
# after a lost reply is a no-op instead of a duplicate.
_STILL_PENDING = "local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)\n" \
                 "if #p == 0 then return 0 end\n"
_ACK_LUA = _STILL_PENDING + """
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
if KEYS[2] ~= '' then redis.call('HSET', KEYS[2], unpack(ARGV, 3)) end
return 1
"""
_DEAD_LETTER_LUA = _STILL_PENDING + """
local n = tonumber(ARGV[3])
redis.call('XADD', KEYS[3], '*', unpack(ARGV, 4, 3 + 2 * n))
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
if KEYS[2] ~= '' then redis.call('HSET', KEYS[2], unpack(ARGV, 4 + 2 * n)) end
return 1
"""
_RELEASE_LUA = _STILL_PENDING + """
local n = tonumber(ARGV[3])
redis.call('XADD', KEYS[1], '*', unpack(ARGV, 4, 3 + 2 * n))
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
if KEYS[2] ~= '' then redis.call('HSET', KEYS[2], unpack(ARGV, 4 + 2 * n)) end
return 1
"""
# KEYS: stream, seen hash; ARGV: group, consumer. Removes a consumer that holds no entry, in one
# step, so it cannot take one between the check and the removal.
_PRUNE_LUA = """
local p = redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2])
if #p > 0 then return 0 end
redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
redis.call('HDEL', KEYS[2], ARGV[2])
return 1
"""


@dataclass(frozen=True)
class Delivery:
    message_id: str
    job: Job | None  # None when the entry could not be parsed (dead-lettered as 'bad_job')
    raw: dict[str, str]
    deliveries: int
    # Reclaimed from a consumer that stopped heart-beating it: who, and for how long it had been
    # silent (the evidence of a 'poison' verdict).
    abandoned_by: str | None = None
    silent_s: float | None = None


class JobQueue:
    def __init__(self, client: aioredis.Redis, stream: str, group: str, dead_letter_stream: str,
                 consumer: str, records_stream: str | None = None) -> None:
        self.r = client  # decode_responses=True
        self.stream = stream
        # Job records and fan-out parts stay keyed by the jobs stream producers write to, also
        # when this worker reads a migration cohort's stream (contract/migration.py).
        self.records = records_stream or stream
        self.group = group
        self.dlq = dead_letter_stream
        self.consumer = consumer

    # -- keys ---------------------------------------------------------------------------------
    def job_key(self, job_id: str) -> str:
        return f"{self.records}:job:{job_id}"

    @property
    def index_key(self) -> str:
        return f"{self.records}:index"

    def parts_key(self, parent_id: str) -> str:
        return f"{self.records}:parts:{parent_id}"

    @property
    def workers_key(self) -> str:
        return f"{self.stream}:workers"

    @property
    def seen_key(self) -> str:
        """consumer -> last announcement (epoch s), kept after the live set forgets it."""
        return f"{self.stream}:workers:seen"

    # -- live workers (for sizing fan-out) ---------------------------------------------------------
    # XINFO CONSUMERS cannot say who is alive: on Redis 7.0 a consumer blocked on an empty stream
    # does not refresh its idle time, and dead consumers stay listed. Workers announce themselves.
    async def announce(self, alive: bool, ttl_s: float) -> None:
        now = time.time()
        async with self.r.pipeline(transaction=True) as p:
            # seen: the process is alive (a draining worker too: its jobs are still its own);
            # the live set: it takes new work (fan-out sizes parts by it)
            p.hset(self.seen_key, self.consumer, now)
            if alive:
                p.zadd(self.workers_key, {self.consumer: now})
            else:
                p.zrem(self.workers_key, self.consumer)
            p.zremrangebyscore(self.workers_key, "-inf", now - ttl_s)  # forget the dead
            await p.execute()

    async def live_workers(self, ttl_s: float) -> int:
        return int(await self.r.zcount(self.workers_key, time.time() - ttl_s, "+inf"))

    async def is_live(self, consumer: str, ttl_s: float) -> bool:
        score = await self.r.zscore(self.workers_key, consumer)
        return score is not None and float(score) >= time.time() - ttl_s

    async def prune_dead_consumers(self, dead_after_s: float = DEAD_CONSUMER_S) -> list[str]:
        """Remove consumers of the group that hold no entry and have not announced themselves
        for ``dead_after_s`` (dead workers' names otherwise pile up in XINFO CONSUMERS)."""
        now = time.time()
        seen = cast(dict[str, str], await self.r.hgetall(self.seen_key))
        removed = []
        for c in cast(list[dict[str, Any]], await self.r.xinfo_consumers(self.stream, self.group)):
            name = str(c.get("name"))
            if name == self.consumer or int(c.get("pending", 0)) > 0:
                continue
            last = float(seen[name]) if name in seen else None
            quiet_s = (now - last) if last is not None else int(c.get("idle", 0)) / 1000
            if quiet_s < dead_after_s:
                continue
            if await self.r.eval(_PRUNE_LUA, 2, self.stream, self.seen_key, self.group, name):
                removed.append(name)
        return removed

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
        """Take over jobs abandoned by dead workers (idle longer than the visibility timeout),
        naming the consumer each was taken from. XCLAIM with the same minimum idle time is
        atomic: an entry heart-beaten since the XPENDING read is left where it is."""
        idle_ms = int(min_idle_s * 1000)
        stale = cast(list[dict[str, Any]], await self.r.xpending_range(
            self.stream, self.group, "-", "+", count, idle=idle_ms))
        out = []
        for entry in stale:
            message_id = str(entry["message_id"])
            claimed = cast(list[_StreamEntry], await self.r.xclaim(
                self.stream, self.group, self.consumer, idle_ms, [message_id]))
            if not claimed:
                continue  # heart-beaten or taken by another worker meanwhile
            _id, fields = claimed[0]
            if fields is None:  # the entry was deleted from the stream: nothing to run
                await self.r.xack(self.stream, self.group, message_id)
                continue
            out.append(_delivery(message_id, fields, int(entry["times_delivered"]) + 1,
                                 str(entry["consumer"]), int(entry["time_since_delivered"]) / 1000))
        return out

    async def dead_consumers(self, silent_after_s: float | None = DEAD_SILENT_S) -> dict[str, str]:
        """Consumers of the group that hold entries and are dead: {name: why}. Dead: announced
        before but silent for ``silent_after_s`` (None: silence is no evidence, e.g. right after
        Redis was unreachable, when every worker was silent), or (same host) their process is
        gone."""
        summary = cast(dict[str, Any], await self.r.xpending(self.stream, self.group))
        holders = [str(c["name"]) for c in summary.get("consumers") or [] if int(c.get("pending", 0)) > 0]
        holders = [c for c in holders if c != self.consumer]
        if not holders:
            return {}
        seen = cast(dict[str, str], await self.r.hgetall(self.seen_key))
        now = time.time()
        dead = {}
        for name in holders:
            if process_gone(name):
                dead[name] = "its process is gone"
            elif silent_after_s is not None and name in seen and now - float(seen[name]) > silent_after_s:
                dead[name] = f"not heard from for {now - float(seen[name]):.0f} s"
        return dead

    async def reclaim_from_dead(self, count: int, silent_after_s: float | None = DEAD_SILENT_S,
                                ) -> list[Delivery]:
        """Take over up to ``count`` entries of dead consumers (:meth:`dead_consumers`) at once,
        without waiting for the visibility timeout. XCLAIM with a minimum idle time of a second
        keeps two workers from taking the same entry (the first claim resets its idle time)."""
        out: list[Delivery] = []
        for name in await self.dead_consumers(silent_after_s):
            entries = cast(list[dict[str, Any]], await self.r.xpending_range(
                self.stream, self.group, "-", "+", count - len(out), consumername=name))
            for entry in entries:
                message_id = str(entry["message_id"])
                claimed = cast(list[_StreamEntry], await self.r.xclaim(
                    self.stream, self.group, self.consumer, 1000, [message_id]))
                if not claimed:
                    continue
                _id, fields = claimed[0]
                if fields is None:
                    await self.r.xack(self.stream, self.group, message_id)
                    continue
                out.append(_delivery(message_id, fields, int(entry["times_delivered"]) + 1, name,
                                     int(entry["time_since_delivered"]) / 1000))
            if len(out) >= count:
                break
        return out

    async def heartbeat(self, message_ids: list[str]) -> None:
        if message_ids:
            await self.r.xclaim(self.stream, self.group, self.consumer, 0, list(message_ids), justid=True)

    async def through_blip(self, call: Callable[[], Awaitable[T]]) -> T:
        """``call()``, retried while Redis restarts or is unreachable (up to FINISH_RETRY_S);
        only for idempotent writes."""
        async for attempt in AsyncRetrying(retry=retry_if_exception_type(_BLIP), reraise=True,
                                           stop=stop_after_delay(FINISH_RETRY_S),
                                           wait=wait_exponential_jitter(multiplier=0.1, max=2.0)):
            with attempt:
                return await call()
        raise AssertionError("unreachable: tenacity reraises")  # pragma: no cover

    async def _finish(self, script: str, keys: list[str], args: list[Any]) -> bool:
        """Run one of the scripts that end a delivery, through a Redis blip; True when it acted
        (False: the entry was no longer pending, e.g. an earlier try whose reply was lost had)."""
        return bool(await self.through_blip(lambda: self.r.eval(script, len(keys), *keys, *args)))

    async def ack(self, message_id: str, job_id: str | None, state: str, **fields: Any) -> None:
        record = _pairs(_flat({"state": state, "updated_at": time.time(), **fields})) if job_id else []
        await self._finish(_ACK_LUA, [self.stream, self.job_key(job_id) if job_id else ""],
                           [self.group, message_id, *record])

    async def dead_letter(self, delivery: Delivery, kind: str, reason: str) -> bool:
        """Move a job to the dead-letter stream with its reason, then ack it, atomically.
        False when the entry was no longer pending (another delivery finished it)."""
        job_id = delivery.job.job_id if delivery.job else None
        entry = {"reason": reason, "kind": kind, "job_id": job_id or "", "consumer": self.consumer,
                 "deliveries": str(delivery.deliveries), "message_id": delivery.message_id,
                 "failed_at": str(time.time()), **delivery.raw}
        record = _pairs(_flat({"state": "dead_lettered", "reason": reason, "kind": kind,
                               "updated_at": time.time()})) if job_id else []
        return await self._finish(
            _DEAD_LETTER_LUA, [self.stream, self.job_key(job_id) if job_id else "", self.dlq],
            [self.group, delivery.message_id, len(entry), *_pairs(entry), *record])

    async def release(self, delivery: Delivery) -> None:
        """Give an unfinished job back at shutdown: re-add it for any worker and ack this copy,
        in one step (Redis streams have no NACK). Outputs are idempotent by job id."""
        job_id = delivery.job.job_id if delivery.job else None
        record = _pairs({"state": "queued", "updated_at": str(time.time())}) if job_id else []
        await self._finish(
            _RELEASE_LUA, [self.stream, self.job_key(job_id) if job_id else ""],
            [self.group, delivery.message_id, len(delivery.raw), *_pairs(delivery.raw), *record])

    async def set_state(self, job_id: str, **fields: Any) -> None:
        mapping = _flat({"updated_at": time.time(), **fields})
        await self.through_blip(lambda: self.r.hset(self.job_key(job_id), mapping=mapping))

    async def lag(self) -> int | None:
        """Entries not yet delivered to the group (XINFO GROUPS 'lag', Redis >= 7)."""
        return (await self.group_counts())[0]

    async def group_counts(self) -> tuple[int | None, int | None]:
        """(lag, pending) of the group: not yet delivered, and delivered but not acked."""
        for g in await self.r.xinfo_groups(self.stream):
            if g.get("name") == self.group:
                lag, pending = g.get("lag"), g.get("pending")
                return (int(lag) if lag is not None else None,
                        int(pending) if pending is not None else None)
        return None, None


def _delivery(message_id: str, fields: dict[str, str], deliveries: int, abandoned_by: str | None = None,
              silent_s: float | None = None) -> Delivery:
    try:
        job = Job.from_fields(fields)
    except ValueError:
        job = None
    return Delivery(message_id, job, dict(fields), deliveries, abandoned_by, silent_s)


def _pairs(mapping: dict[Any, Any]) -> list[Any]:
    """{k: v} as [k, v, ...], the argument list of XADD and HSET in a script."""
    return [x for kv in mapping.items() for x in kv]


def stream_entry(fields: dict[str, str]) -> dict[FieldT, EncodableT]:
    """``fields`` typed as redis-py's xadd takes them (an invariant dict type that a
    ``dict[str, str]`` does not match as is); the same pairs, copied."""
    return {k: v for k, v in fields.items()}


def _flat(mapping: dict[str, Any]) -> dict[FieldT, EncodableT]:
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in mapping.items() if v is not None}


def process_gone(consumer: str) -> bool:
    """The consumer ran on this host (``<hostname>-w<index>-<pid>``, worker/config.py) and no
    process has its pid any more. False when it cannot tell (another host, another name form);
    a pid taken again by another process reads as alive (the silence rule then decides)."""
    host, sep, rest = consumer.rpartition("-w")
    index, sep2, pid = rest.partition("-")
    if not (sep and sep2 and host == socket.gethostname() and index.isdigit() and pid.isdigit()):
        return False
    try:
        return psutil.Process(int(pid)).status() == psutil.STATUS_ZOMBIE  # dead, not yet reaped
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False  # cannot tell (another user's process): alive
