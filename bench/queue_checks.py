"""Before a pipeline run sends load: is the queue there, does it have a worker group, is any
worker consuming it, and (deployed stacks) can the workers read the bench's documents and can
the bench read their outputs. Every failure is a TargetError naming the input and the fix, raised
before the first measured document is submitted.

Whether a worker is consuming cannot be read from Redis 7.0: a blocked XREADGROUP on an empty
stream neither creates its consumer nor refreshes its ``idle`` (measured here: a live, polling
worker's idle grows without bound), so XINFO CONSUMERS only describes workers that once got a
job. Liveness is therefore proven by a canary document (deployed stacks) and, during the run,
by the pipeline's stall watchdog (bench/pipeline.py).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import redis

from bench.pipeline import METADATA
from bench.target import TargetError
from worker.jobs import Job
from worker.store import OutputStore

UNREADABLE_KINDS = ("not_found", "unreadable", "url_not_allowed", "download_failed", "path_not_allowed")


@dataclass
class QueueState:
    stream: str
    group: str
    length: int
    lag: int | None
    pending: int
    consumers: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"stream": self.stream, "group": self.group, "length": self.length, "lag": self.lag,
                "pending": self.pending, "consumers": self.consumers}

    def describe(self) -> str:
        seen = ", ".join(f"{c['name']} (pending {c['pending']}, last job {c['idle_s']:g} s ago)"
                         for c in self.consumers[:6]) or "none has received a job yet"
        return f"{self.stream}/{self.group}: lag {self.lag}, pending {self.pending}; consumers: {seen}"


def connect_hint(spec, label: str) -> str:
    if spec.target.value == "local":
        return "start the stack (`splitstack up`)"
    if spec.queue.kind == "in-cluster":
        return (f"is the port-forward running? `kubectl -n {spec.namespace} port-forward svc/redis "
                f"{spec.queue.port}` then --queue-url redis://127.0.0.1:{spec.queue.port}/0")
    return f"check the external queue's URL (${spec.queue.url_env}) and that this host can reach it"


def inspect_queue(r: redis.Redis, spec, label: str, stream: str, group: str) -> QueueState:
    """Check the queue a pipeline run is about to load; ``label`` is the masked URL."""
    try:
        return _inspect(r, spec, label, stream, group)
    except redis.ResponseError as exc:
        if "NOPERM" not in str(exc):
            raise
        raise TargetError(f"the Redis user of {label} may not run a command the bench needs ({exc}); grant it "
                          "the stream, hash, sorted-set and keyspace commands on the queue's keys (as the "
                          "workers' user has). Nothing was sent.") from None


def _inspect(r: redis.Redis, spec, label: str, stream: str, group: str) -> QueueState:
    try:
        r.ping()
    except redis.AuthenticationError as exc:
        raise TargetError(f"the queue at {label} refused the credentials ({exc}); put the right password "
                          "in the URL (redis://:PASSWORD@HOST:PORT/DB), via --queue-url-env. "
                          "Nothing was sent.") from None
    except redis.ResponseError as exc:
        if "NOAUTH" in str(exc):
            raise TargetError(f"the queue at {label} needs a password ({exc}); pass a URL with it "
                              "(redis://:PASSWORD@HOST:PORT/DB) through --queue-url-env. Nothing was sent.") from None
        raise
    except redis.RedisError as exc:
        raise TargetError(f"the queue at {label} does not answer ({type(exc).__name__}: {exc}); "
                          f"{connect_hint(spec, label)}. Nothing was sent.") from None
    kind = r.type(stream)
    kind = kind.decode() if isinstance(kind, bytes) else kind
    if kind == "none":
        try:
            streams: Any = sorted({_s(k) for k in r.scan_iter(count=1000, _type="STREAM")})[:20]
        except redis.ResponseError:  # SCAN not granted: the error still names the stream
            streams = "not listable"
        raise TargetError(f"stream {stream!r} does not exist at {label} (streams there: {streams or 'none'}): "
                          "no worker ever started against this queue (workers create it with their group); "
                          "check queue.stream in the stack's spec or --stream. Nothing was sent.")
    if kind != "stream":
        raise TargetError(f"key {stream!r} at {label} is a Redis {kind}, not a stream: queue.stream or --stream "
                          "names the wrong key. Nothing was sent.")
    groups = {_s(g["name"]): g for g in r.xinfo_groups(stream)}
    if group not in groups:
        raise TargetError(f"stream {stream!r} at {label} has no consumer group {group!r} (groups: "
                          f"{sorted(groups) or 'none'}): no worker of this stack has ever started (workers "
                          "create the group when they start); deploy or scale up the worker pool, or fix "
                          "queue.group / --group. Nothing was sent.")
    g = groups[group]
    consumers = [{"name": _s(c["name"]), "idle_s": round(c["idle"] / 1000, 1), "pending": int(c["pending"])}
                 for c in r.xinfo_consumers(stream, group)]
    return QueueState(stream, group, int(r.xlen(stream)), None if g.get("lag") is None else int(g["lag"]),
                      int(g["pending"]), consumers)


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


async def run_canary(queue, client, source: str, pickup_s: float, finish_s: float, facts: str,
                     poll_s: float = 0.1) -> dict[str, Any]:
    """Submit one document and follow it: picked up within ``pickup_s``, terminal within
    ``finish_s``. Returns its final job record (plus ``job_id`` and ``latency_s``)."""

    job = Job(source=source, correlation_id="bench-canary")
    t0 = time.monotonic()
    await queue.enqueue(job)
    key = queue.job_key(job.job_id)
    state: dict[str, str] = {}
    while True:
        state = await client.hgetall(key)
        elapsed = time.monotonic() - t0
        s = state.get("state")
        if s in ("done", "dead_lettered"):
            return {**state, "job_id": job.job_id, "latency_s": round(elapsed, 3)}
        if s == "queued" and elapsed > pickup_s:
            raise TargetError(f"no worker picked up the canary document within {pickup_s:g} s (job {job.job_id} "
                              f"still queued; {facts}): no worker is consuming this queue (pool down or scaled "
                              "to 0, or its workers use another stream/group), or they are stuck behind a "
                              "backlog; check the worker pods (`kubectl get pods`) or `splitstack status`, or "
                              "raise the scenario's stall_timeout_s. Nothing was measured.")
        if elapsed > finish_s:
            raise TargetError(f"the canary document (job {job.job_id}) is still {s!r} after {finish_s:g} s "
                              "(the scenario's job_timeout_s); check the worker logs and the inference server. "
                              "Nothing was measured.")
        await asyncio.sleep(poll_s)


def judge_canary(rec: dict[str, Any], source: str, local_folder: str, output_dir: str | None,
                 documents_at: str | None, store: OutputStore | None = None) -> None:
    """Turn a finished canary into a clear error when the run could not measure anything."""
    if rec.get("state") == "dead_lettered":
        kind, reason = rec.get("kind", "unknown"), rec.get("reason", "")
        if kind in UNREADABLE_KINDS:
            where = (f"--documents-at {documents_at} maps them to {source}" if documents_at else
                     f"the bench submitted {source}, a path on this host")
            raise TargetError(f"the workers cannot read the bench's documents ({kind}: {reason}); {where}. "
                              f"Copy the PDFs in {local_folder} to storage every worker mounts (or an http(s) "
                              "location on their SPLITSTACK_WORKER_URL_ALLOWLIST) and pass that prefix with "
                              "--documents-at. Nothing was measured.")
        raise TargetError(f"the canary document was dead-lettered ({kind}: {reason}); fix that before "
                          "measuring (`splitstack dead-letters list`). Nothing was measured.")
    if store is not None and not store.exists(rec["job_id"]):
        marker = store.location(rec["job_id"]).rstrip("/") + "/" + METADATA
        raise TargetError(f"output store {output_dir}: the workers finished the canary document (job "
                          f"{rec['job_id']}) but {marker} does not exist: that is not the workers' output "
                          "store (mount the store's volume there, or check output_store in the spec), or "
                          "leave --outputs-at out to measure from the job records. Nothing was measured.")
