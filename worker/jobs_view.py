"""Read-side of the queue for `splitstack submit` / `splitstack jobs`: synchronous redis, no
worker machinery, so the CLI stays fast."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import redis

from contract.inputs import file_refusal, forbidden_dirs, input_roots, max_input_bytes, path_refusal
from contract.spec import Spec
from worker.jobs import Job, PageRange
from worker.pagecount import page_count
from worker.queue import DEAD_SILENT_S, process_gone


def redis_url(spec: Spec) -> str:
    return os.environ.get(spec.queue.url_env) or f"redis://{spec.local.host}:{spec.queue.port}/0"


def connect(spec: Spec, url: str | None = None) -> redis.Redis:
    """A client of the queue at ``url`` (default: ``redis_url(spec)``)."""
    return redis.Redis.from_url(url or redis_url(spec), decode_responses=True, socket_connect_timeout=3)


class InputRefused(ValueError):
    """A file the workers may not read (outside the input roots, not a file); the message says
    why and how."""


class PagesPastEnd(InputRefused):
    """A page range past a document's last page."""

    def __init__(self, path: Path, count: int) -> None:
        super().__init__(f"{path} has {count} page{'s' if count != 1 else ''}; give a range within 1-{count}")
        self.path, self.count = path, count


def check_files(paths: list[Path], pages: PageRange | None = None) -> None:
    """Before the spec is read: InputRefused naming every path that is not a file, PagesPastEnd
    for a range past a document's end (a document whose pages cannot be counted here is left to
    the worker, which dead-letters it as bad_page_range). Nothing is queued either way."""
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise InputRefused(f"not a file: {', '.join(missing)}")
    for path in paths if pages is not None else []:
        count = page_count(path)
        if pages is not None and count is not None and pages.last > count:
            raise PagesPastEnd(path, count)


def check_inputs(spec: Spec, paths: list[Path], project_root: Path) -> None:
    """InputRefused naming every file outside the workers' input roots, not a regular file or
    over ``worker_pool.max_input_mib`` (contract/inputs.py)."""
    roots, forbidden = input_roots(spec, project_root), forbidden_dirs(spec, project_root)
    cap = max_input_bytes(spec)
    problems = [p for p in (path_refusal(str(path.resolve()), roots, forbidden)
                            or file_refusal(str(path.resolve()), cap) for path in paths) if p]
    if problems:
        raise InputRefused("; ".join(problems))


def submit(r: redis.Redis, spec: Spec, paths: list[Path], pages: PageRange | None = None,
           language: str | None = None, correlation_id: str | None = None) -> list[str]:
    q = spec.queue
    ids = []
    for path in paths:
        job = Job(source=str(path.resolve()), pages=pages, language=language,
                  correlation_id=correlation_id)
        with r.pipeline(transaction=True) as p:
            p.xadd(q.stream, job.to_fields())
            p.hset(f"{q.stream}:job:{job.job_id}", mapping={
                "state": "queued", "source": job.source, "submitted_at": str(job.submitted_at),
                "updated_at": str(time.time())})
            p.zadd(f"{q.stream}:index", {job.job_id: job.submitted_at})
            p.execute()
        ids.append(job.job_id)
    return ids


def list_jobs(r: redis.Redis, spec: Spec, limit: int = 50, ids: list[str] | None = None) -> list[dict[str, Any]]:
    q = spec.queue
    if ids is None:
        # connect() decodes replies (decode_responses=True): the members are str.
        ids = cast(list[str], r.zrevrange(f"{q.stream}:index", 0, limit - 1))
    rows = []
    with r.pipeline(transaction=False) as p:
        for job_id in ids:
            p.hgetall(f"{q.stream}:job:{job_id}")
        records = p.execute()
    seen = cast(dict[str, str], r.hgetall(f"{q.stream}:workers:seen"))
    now = time.time()
    for job_id, rec in zip(ids, records):
        row = {"job_id": job_id, **rec}  # a done job's "output": where its worker stored it
        if rec.get("state") == "running" and _worker_dead(rec.get("consumer", ""), seen, now):
            # Its worker died: the job waits for another to take it over (within seconds,
            # worker/queue.py); it is not running anywhere.
            row.update(state="queued", reason=f"waiting: its worker {rec.get('consumer')} stopped; "
                       "another worker takes it over")
        rows.append(row)
    return rows


# Fields of a job record that hold numbers (Redis keeps every value as a string).
NUMERIC_FIELDS = {"pages", "parts_total", "parts_done", "deliveries", "total", "requests_sent", "parts"}


def typed(row: dict[str, Any]) -> dict[str, Any]:
    """A job record with its numbers as numbers: counts as int, times (``*_at``, ``*_s``) as float;
    what does not parse stays as it was."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, str) and (key in NUMERIC_FIELDS or key.endswith(("_at", "_s"))):
            try:
                out[key] = int(value) if key in NUMERIC_FIELDS else float(value)
                continue
            except ValueError:
                pass
        out[key] = value
    return out


def _worker_dead(consumer: str, seen: dict[str, str], now: float) -> bool:
    if not consumer:
        return False
    if process_gone(consumer):
        return True
    return consumer in seen and now - float(seen[consumer]) > DEAD_SILENT_S


def summarize(rows: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for row in rows:
        out[row.get("state", "unknown")] = out.get(row.get("state", "unknown"), 0) + 1
    return out


TERMINAL = frozenset({"done", "dead_lettered"})


def any_dead_lettered(rows: list[dict[str, Any]]) -> bool:
    return any(row.get("state") == "dead_lettered" for row in rows)


def wait_terminal(r: redis.Redis, spec: Spec, ids: list[str], timeout_s: float,
                  progress: Callable[[float, str], None], progress_every_s: float = 10.0,
                  poll_s: float = 0.5) -> list[dict[str, Any]] | None:
    """Poll the jobs ``ids`` until every one is done or dead-lettered: their final records, or None
    after ``timeout_s``. ``progress(seconds_waited, "state=count ...")`` is called when the counts
    move, and at least every ``progress_every_s``."""
    started = time.monotonic()
    last_said, said_at = "", started
    while time.monotonic() - started < timeout_s:
        rows = list_jobs(r, spec, ids=ids)
        counts = " ".join(f"{k}={v}" for k, v in sorted(summarize(rows).items()))
        if counts != last_said or time.monotonic() - said_at >= progress_every_s:
            progress(time.monotonic() - started, counts)
            last_said, said_at = counts, time.monotonic()
        if all(row.get("state") in TERMINAL for row in rows):
            return rows
        time.sleep(poll_s)
    return None
