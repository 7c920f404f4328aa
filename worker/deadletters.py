"""Operator tools for the dead-letter stream: list, inspect, re-drive. Synchronous redis, no
worker machinery (like worker/jobs_view.py), for `splitstack dead-letters`.

A dead letter carries the original job byte for byte (worker/queue.py). Re-driving puts that
job back on the work stream under the same job id, marks its record ``queued`` again and removes
the dead letter, in one script that acts only while the dead letter still exists, so two
operators re-driving at once enqueue it once. A re-driven part of a split document also clears
its parent's failure, so the merge can still happen.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, cast

import redis

from contract.spec import Spec
from worker.jobs import Job

# KEYS: dlq, stream, job key, parts key (or ""), parent key (or ""); ARGV: entry id, job JSON, now
_REDRIVE_LUA = """
if #redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1]) == 0 then return 0 end
redis.call('XADD', KEYS[2], '*', 'job', ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[3], 'reason', 'kind')
redis.call('HSET', KEYS[3], 'state', 'queued', 'updated_at', ARGV[3], 'redriven_at', ARGV[3])
if KEYS[4] ~= '' then
  redis.call('HDEL', KEYS[4], 'failed')
  redis.call('HDEL', KEYS[5], 'reason', 'kind')
  redis.call('HSET', KEYS[5], 'state', 'fanned_out', 'updated_at', ARGV[3])
end
return 1
"""


class DeadLetterError(ValueError):
    """A dead letter that cannot be found or re-driven; the message says which and why."""


@dataclass(frozen=True)
class DeadLetter:
    entry_id: str
    job_id: str
    kind: str
    reason: str
    failed_at: float
    deliveries: int
    consumer: str
    job: str  # the original job (JSON), "" for an entry that was not a valid job

    @classmethod
    def from_entry(cls, entry_id: str, fields: dict[str, str]) -> DeadLetter:
        return cls(entry_id, fields.get("job_id", ""), fields.get("kind", "?"), fields.get("reason", ""),
                   float(fields.get("failed_at", 0) or 0), int(fields.get("deliveries", 0) or 0),
                   fields.get("consumer", ""), fields.get("job", ""))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def list_dead(r: redis.Redis, spec: Spec, limit: int = 50, kind: str | None = None) -> list[DeadLetter]:
    """Newest first; only ``kind`` when given."""
    out: list[DeadLetter] = []
    last = "+"
    while len(out) < limit:
        batch = cast(list[tuple[str, dict[str, str]]],
                     r.xrevrange(spec.queue.dead_letter_stream, last, "-", count=max(limit, 100)))
        if last != "+":
            batch = batch[1:]  # the previous batch's last entry again
        if not batch:
            break
        out += [d for d in (DeadLetter.from_entry(i, f) for i, f in batch) if kind is None or d.kind == kind]
        last = batch[-1][0]
    return out[:limit]


def find(r: redis.Redis, spec: Spec, key: str) -> DeadLetter:
    """A dead letter by its entry id (1700000000000-0) or its job id (the newest one)."""
    stream = spec.queue.dead_letter_stream
    if "-" in key and key.replace("-", "").isdigit():
        entries = cast(list[tuple[str, dict[str, str]]], r.xrange(stream, key, key))
        if entries:
            return DeadLetter.from_entry(*entries[0])
    for d in list_dead(r, spec, limit=10_000):
        if d.job_id == key:
            return d
    raise DeadLetterError(f"no dead letter {key!r} in {stream}; `splitstack dead-letters list` shows them")


def redrive_named(r: redis.Redis, spec: Spec, keys: list[str], kind: str | None = None,
                  every: bool = False) -> list[str]:
    """Re-drive the dead letters named by entry or job id, plus every one of ``kind`` (every one
    at all with ``every``), each once; the job ids re-driven. DeadLetterError for a key that
    names none (nothing is re-driven then) or a letter that holds no valid job (those before it
    are re-driven)."""
    letters = [find(r, spec, k) for k in keys]
    if kind or every:
        letters += list_dead(r, spec, limit=100_000, kind=kind)
    return redrive(r, spec, list({d.entry_id: d for d in letters}.values()))


def redrive(r: redis.Redis, spec: Spec, letters: list[DeadLetter]) -> list[str]:
    """Put each dead letter's job back on the queue; the job ids re-driven (a letter re-driven
    meanwhile by someone else is skipped)."""
    q = spec.queue
    done = []
    for d in letters:
        if not d.job:
            raise DeadLetterError(f"dead letter {d.entry_id} ({d.kind}) holds no valid job: nothing to "
                                  "re-drive; enqueue the document again with `splitstack submit`")
        job = Job.model_validate_json(d.job)
        part = job.part_of
        keys = [q.dead_letter_stream, q.stream, f"{q.stream}:job:{job.job_id}",
                f"{q.stream}:parts:{part.parent_id}" if part else "",
                f"{q.stream}:job:{part.parent_id}" if part else ""]
        if r.eval(_REDRIVE_LUA, len(keys), *keys, d.entry_id, d.job, str(time.time())):
            done.append(job.job_id)
    return done
