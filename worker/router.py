"""The migration router: the one jobs stream in, one cohort stream out per document.

Producers keep writing to ``queue.stream``. The router reads it with the workers' own consumer
group (``queue.group``), so a worker still reading the jobs stream directly shares the entries
with the router instead of getting a second copy. Each entry is forwarded by one Lua script
that, atomically: checks the entry is still pending for the group (a retry after a lost reply
does nothing), reads the share (``<stream>:migration:share``), XADDs the entry to the cohort
stream its bucket says, XACKs it on the jobs stream and writes the cohort into the job's record
(and, for a document in the shadow sample, XADDs its shadow copy to the other cohort's stream).
So a share change takes effect on the next entry, and no entry is forwarded twice or dropped:
a router that dies between its read and the script leaves the entry pending, and the next
router takes it over (XAUTOCLAIM) and forwards it.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, cast

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from contract.migration import (
    MONOLITHIC,
    SHADOW_ID_MAX,
    SPLIT,
    bucket,
    check_share,
    cohort_stream,
    shadow_bucket,
    shadow_id,
    shadow_key,
    shadow_of,
    share_key,
)
from worker.jobs import Job

# KEYS: jobs stream, share key, split stream, monolithic stream, job record ("" = none),
#       shadow share key, shadow job record ("" = no shadow copy possible)
# ARGV: group, message id, bucket, n fields, field/value pairs,
#       then (with a shadow record) shadow bucket, shadow job JSON, document id, submitted at
# A shadow copy goes to the OTHER cohort's stream, only while both cohorts take documents.
_FORWARD_LUA = """
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #p == 0 then return '' end
local share = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
local cohort, dest, other, odest = 'monolithic', KEYS[4], 'split', KEYS[3]
if tonumber(ARGV[3]) < share then cohort, dest, other, odest = 'split', KEYS[3], 'monolithic', KEYS[4] end
local n = tonumber(ARGV[4])
redis.call('XADD', dest, '*', unpack(ARGV, 5, 4 + 2 * n))
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
if KEYS[5] ~= '' then redis.call('HSET', KEYS[5], 'topology', cohort) end
if KEYS[7] ~= '' and share > 0 and share < 100 then
  local sshare = tonumber(redis.call('GET', KEYS[6]) or '0') or 0
  local at = 5 + 2 * n
  if tonumber(ARGV[at]) < sshare then
    redis.call('XADD', odest, '*', 'job', ARGV[at + 1])
    redis.call('HSET', KEYS[7], 'topology', other, 'shadow_of', ARGV[at + 2], 'state', 'queued',
               'submitted_at', ARGV[at + 3], 'updated_at', ARGV[at + 3])
    redis.call('HSET', KEYS[5], 'shadow', other)
    return cohort .. '+shadow'
  end
end
return cohort
"""


def entry_bucket(fields: dict[str, str]) -> tuple[int, str | None]:
    """(bucket, job id) of a stream entry; an entry that is no job is bucketed by its raw text
    (its cohort's worker dead-letters it as a bad job)."""
    job = entry_job(fields)
    job_id = job.job_id if job is not None else None
    return bucket(job_id if job_id is not None else repr(sorted(fields.items()))), job_id


def entry_job(fields: dict[str, str]) -> Job | None:
    try:
        return Job.from_fields(fields)
    except ValueError:
        return None


def shadow_args(job: Job | None) -> list[str | int | float]:
    """The shadow copy's ARGV tail: none for an entry that is no job, a fan-out part, a shadow
    itself, or a document whose shadow id would be too long."""
    if job is None or job.part_of is not None or shadow_of(job.job_id) is not None:
        return []
    sid = shadow_id(job.job_id)
    if len(sid) > SHADOW_ID_MAX:
        return []
    copy = job.model_copy(update={"job_id": sid})
    return [shadow_bucket(job.job_id), str(copy.to_fields()["job"]), job.job_id, job.submitted_at]


async def get_share(r: aioredis.Redis, stream: str) -> int:
    raw = await r.get(share_key(stream))
    return int(raw) if raw is not None else 0


async def set_shadow_share(r: aioredis.Redis, stream: str, percent: int) -> int:
    """Set the shadow sample's share (percent of documents copied to the other cohort);
    returns the previous one."""
    old = await r.set(shadow_key(stream), str(check_share(percent)), get=True)
    return int(old) if old is not None else 0


async def set_share(r: aioredis.Redis, stream: str, percent: int) -> int:
    """Set the split cohort's share (percent); returns the previous one. Live: the next entry
    the router forwards reads it."""
    old = await r.set(share_key(stream), str(check_share(percent)), get=True)
    return int(old) if old is not None else 0


class Router:
    def __init__(self, client: aioredis.Redis, stream: str, group: str, consumer: str) -> None:
        self.r = client  # decode_responses=True
        self.stream = stream
        self.group = group
        self.consumer = consumer
        self.forwarded = {SPLIT: 0, MONOLITHIC: 0, "shadow": 0}

    async def ensure_groups(self) -> None:
        """The jobs stream's group and both cohort streams' groups (created from the start of
        the stream, so entries forwarded before a cohort's first worker starts are read)."""
        for stream in (self.stream, cohort_stream(self.stream, SPLIT), cohort_stream(self.stream, MONOLITHIC)):
            try:
                await self.r.xgroup_create(stream, self.group, id="0", mkstream=True)
            except ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    async def _forward(self, message_id: str, fields: dict[str, str]) -> str | None:
        job = entry_job(fields)
        b, job_id = entry_bucket(fields)
        job_key = f"{self.stream}:job:{job_id}" if job_id else ""
        shadow = shadow_args(job)
        shadow_record = f"{self.stream}:job:{shadow_id(job_id)}" if shadow and job_id else ""
        pairs = [x for kv in fields.items() for x in kv]
        reply = await self.r.eval(
            _FORWARD_LUA, 7, self.stream, share_key(self.stream), cohort_stream(self.stream, SPLIT),
            cohort_stream(self.stream, MONOLITHIC), job_key, shadow_key(self.stream), shadow_record,
            self.group, message_id, b, len(fields), *pairs, *shadow)
        if not reply:
            return None  # no longer pending: forwarded already
        cohort, _, copied = str(reply).partition("+")
        self.forwarded[cohort] += 1
        if copied:
            self.forwarded["shadow"] += 1
        return cohort

    async def step(self, count: int = 100, block_ms: int = 1000, reclaim_idle_s: float = 30.0) -> int:
        """Forward what is there (entries abandoned by a dead router first); how many."""
        done = 0
        _next, claimed, *_ = cast(list[Any], await self.r.xautoclaim(
            self.stream, self.group, self.consumer, int(reclaim_idle_s * 1000), "0-0", count=count))
        for message_id, fields in claimed:
            if fields is not None and await self._forward(message_id, fields):
                done += 1
            elif fields is None:
                await self.r.xack(self.stream, self.group, message_id)
        reply = cast(list[Any] | None, await self.r.xreadgroup(
            self.group, self.consumer, {self.stream: ">"}, count=count, block=block_ms))
        for _stream, entries in reply or []:
            for message_id, fields in entries:
                if await self._forward(message_id, fields):
                    done += 1
        return done

    async def run(self, stop: asyncio.Event, block_ms: int = 500) -> None:
        await self.ensure_groups()
        while not stop.is_set():
            await self.step(block_ms=block_ms)
            self.last_loop = time.monotonic()

    last_loop: float | None = None  # monotonic time of the last completed loop (the health check)


def serve_health(router: Router, host: str, port: int, stale_s: float = 10.0) -> None:
    """GET /healthz: 200 while the router loops (its last loop within ``stale_s``), else 503."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server API
            last = router.last_loop
            ok = self.path == "/healthz" and last is not None and time.monotonic() - last < stale_s
            body = json.dumps({"ok": ok, "forwarded": router.forwarded}).encode()
            self.send_response(200 if ok else 503)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            return

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    """``python -m worker.router --redis-url URL --stream S --group G``: run until SIGTERM/SIGINT.
    The Redis password comes from --password-env (SPLITSTACK_REDIS_PASSWORD) when the URL carries none."""
    import argparse
    import os
    import signal
    import socket

    from contract.worker_env import ENV_REDIS_PASSWORD, with_password

    ap = argparse.ArgumentParser(prog="python -m worker.router", description=__doc__.splitlines()[0])
    ap.add_argument("--redis-url", required=True)
    ap.add_argument("--stream", required=True, help="queue.stream: the jobs stream producers write to")
    ap.add_argument("--group", required=True, help="queue.group: the workers' consumer group")
    ap.add_argument("--health-port", type=int, default=0, help="serve GET /healthz here (0: none)")
    ap.add_argument("--host", default="127.0.0.1", help="address of the health endpoint")
    ap.add_argument("--password-env", default=ENV_REDIS_PASSWORD,
                    help="variable holding the Redis password when the URL carries none")
    args = ap.parse_args(argv)

    async def run() -> None:
        r = aioredis.Redis.from_url(with_password(args.redis_url, os.environ.get(args.password_env)),
                                    decode_responses=True, socket_connect_timeout=5)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        router = Router(r, args.stream, args.group, f"router-{socket.gethostname()}-{os.getpid()}")
        if args.health_port:
            serve_health(router, args.host, args.health_port)
        try:
            await router.run(stop)
        finally:
            await r.aclose()

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
