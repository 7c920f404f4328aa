"""What happens to one delivered job: checks, fan-out, the backend, the atomic commit, the ack,
dead-lettering, the fan-in merge, and memory care after a document. A mixin of
:class:`worker.runner.Worker`, which owns the loops; split out only to keep modules small."""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import time
from concurrent.futures.process import BrokenProcessPool
from contextlib import suppress
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import psutil
from redis.exceptions import RedisError
from tenacity.wait import wait_exponential_jitter

from contract.migration import shadow_of
from worker import fanout
from worker.backends import Backend, BackendResult
from worker.breaker import CircuitBreaker
from worker.client import request_counter
from worker.config import WorkerSettings
from worker.errors import PermanentError, RenderCrash, TransientError
from worker.jobs import Job, PartOf
from worker.logs import log
from worker.memory import malloc_trim
from worker.metrics import WorkerMetrics
from worker.parse_errors import document_failure
from worker.pdfcheck import check_range, extract_pages, inspect_pdf, unrenderable_pages
from worker.queue import Delivery, JobQueue
from worker.sources import InputStalled, fetch
from worker.store import OutputStore
from worker.tracing import current_trace

logger = logging.getLogger("worker")
EXIT_RECYCLE = 75  # EX_TEMPFAIL: supervisord (autorestart=unexpected) and Kubernetes restart us
RENDER_CRASHES_MAX = 2  # render pool broken this often under one document: the document's fault
# Errors of the machine, not of the document, when writing images or outputs: the job is kept.
STALLS_FIELD = "input_stalls"  # on the job record: deliveries that stalled reading the input
_MACHINE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.EMFILE, errno.ENFILE,
                   errno.ENOMEM}


class JobSteps:
    # Set by worker.runner.Worker.__init__ (declared here for the type checker only).
    s: WorkerSettings
    queue: JobQueue
    store: OutputStore
    metrics: WorkerMetrics
    breaker: CircuitBreaker
    backend: Backend | None
    announce_ttl_s: float
    _stopping: asyncio.Event
    _docs_since_recycle: int
    _job_backoff: wait_exponential_jitter
    _proc: psutil.Process

    if TYPE_CHECKING:  # defined by worker.runner.Worker
        def request_stop(self, reason: str, exit_code: int = 0) -> None: ...

        async def _wait_to_retry(self, backoff_s: float) -> None: ...

    async def _process(self, d: Delivery) -> None:
        job = d.job
        if job is None:
            # The entry's fields are not echoed: they may hold anything a producer wrote.
            await self._dead_letter(d, "bad_job", f"stream entry {d.message_id} is not a valid job "
                                    f"(fields: {', '.join(sorted(d.raw)) or 'none'}); enqueue jobs "
                                    "with `splitstack submit` or worker.jobs.Job.to_fields()")
            return
        if d.abandoned_by is not None:
            await self._record_abandonment(d, job)
        max_attempts = self.s.spec.queue.max_delivery_attempts
        # A delivery that stalled on its input went back to the queue as a new entry (deliveries
        # 1 again): the job record keeps the count.
        stalls = int(await self.queue.r.hget(self.queue.job_key(job.job_id), STALLS_FIELD) or 0)
        if d.deliveries + stalls > max_attempts:
            await self._dead_letter(d, "poison", await self._poison_reason(d, job, max_attempts, stalls))
            return
        if await self._stored(job.job_id):  # redelivered after its output was stored
            await self._finish_part(job)
            await self.queue.ack(d.message_id, job.job_id, "done")
            log(logger, logging.INFO, "output already stored; acked duplicate delivery")
            return
        await self.queue.set_state(job.job_id, state="running", consumer=self.s.consumer,
                                   started_at=time.time(), deliveries=d.deliveries)
        t0 = time.perf_counter()
        attempt = crashes = 0
        while True:
            try:
                await self._attempt(d, job, t0)
                return
            except InputStalled as exc:
                await self._give_back_stalled(d, job, str(exc))
                return
            except PermanentError as exc:  # ServerAnswerError included (kind server_rejected)
                await self._dead_letter(d, exc.kind, str(exc))
                return
            except RenderCrash as exc:
                crashes += 1
                if crashes >= RENDER_CRASHES_MAX and not self._stopping.is_set():
                    await self._dead_letter(d, "render_crashed", f"{exc.reason}, {crashes} times in a "
                                            "row on this document (a page crashes PDFium, or needs "
                                            "more memory than the render process may use)")
                    return
                log(logger, logging.WARNING, "page-render process died; trying the document again",
                    error=exc.reason, crashes=crashes)
                if self._stopping.is_set():
                    await self.queue.release(d)
                    return
            except TransientError as exc:
                attempt += 1
                # tenacity types the argument as a RetryCallState; its wait strategies read only
                # attempt_number, which _Attempt carries.
                backoff_s = self._job_backoff.__call__(_Attempt(attempt))  # type: ignore[arg-type]
                log(logger, logging.WARNING, "transient failure; job kept and retried",
                    error=str(exc), attempt=attempt, backoff_s=round(backoff_s, 2),
                    breaker=self.breaker.state.name)
                await self._wait_to_retry(backoff_s)
                if self._stopping.is_set():
                    await self.queue.release(d)
                    return

    async def _stored(self, job_id: str) -> bool:
        """The job's output is committed. In a bucket this is a request (off the event loop);
        when the bucket does not answer, the job is parsed again and its commit, create-only,
        still keeps a committed output as it is."""
        try:
            return await asyncio.to_thread(self.store.exists, job_id)
        except TransientError as exc:
            log(logger, logging.WARNING, "output store not answering; parsing the job again",
                error=str(exc))
            return False

    async def _record_abandonment(self, d: Delivery, job: Job) -> None:
        """Keep who held the job before and died (or went silent): the poison evidence."""
        alive = await self.queue.is_live(d.abandoned_by or "", self.announce_ttl_s)
        note = {"consumer": d.abandoned_by, "silent_s": round(d.silent_s or 0.0, 1),
                "still_announcing": alive, "at": round(time.time(), 3)}
        key = self.queue.job_key(job.job_id)
        history = json.loads(await self.queue.r.hget(key, "abandoned_by") or "[]")
        await self.queue.set_state(job.job_id, abandoned_by=[*history, note][-10:])
        log(logger, logging.WARNING, "took over a job its worker stopped heart-beating",
            previous=d.abandoned_by, silent_s=note["silent_s"], previous_still_announcing=alive,
            deliveries=d.deliveries)

    async def _give_back_stalled(self, d: Delivery, job: Job, reason: str) -> None:
        """Reading the input stalled: count it on the job record (it counts as a delivery
        towards ``poison``) and give the job back to the queue, freeing this worker."""
        await self.record_stall(job.job_id, reason)
        await self.queue.release(d)
        log(logger, logging.WARNING, "input read stalled; job given back to the queue", error=reason)

    async def record_stall(self, job_id: str, reason: str) -> None:
        key = self.queue.job_key(job_id)
        await self.queue.through_blip(lambda: self.queue.r.hincrby(key, STALLS_FIELD, 1))
        await self.queue.set_state(job_id, last_stall=reason)

    async def _poison_reason(self, d: Delivery, job: Job, max_attempts: int, stalls: int = 0) -> str:
        history = json.loads(await self.queue.r.hget(self.queue.job_key(job.job_id), "abandoned_by") or "[]")
        dead = [h for h in history if not h.get("still_announcing")]
        stuck = [h for h in history if h.get("still_announcing")]
        parts = [f"delivered {d.deliveries + stalls} times without finishing "
                 f"(queue.max_delivery_attempts={max_attempts})"]
        if stalls:
            last = cast(str | None, await self.queue.r.hget(self.queue.job_key(job.job_id), "last_stall"))
            parts.append(f"reading its input stalled {stalls} time(s) (last: {last}); check the "
                         "storage the file is on")
        if dead:
            parts.append("the worker holding it stopped (process gone, no release at shutdown) "
                         f"{len(dead)} time(s): " + ", ".join(
                             f"{h['consumer']} (silent {h['silent_s']:g} s)" for h in dead)
                         + "; a worker killed by the kernel for memory shows in `runbook diagnose` "
                         "(kernel log, cgroup events, pod status OOMKilled)")
        if stuck:
            parts.append(f"{len(stuck)} time(s) a worker that was still running stopped heart-beating "
                         "it (its event loop stalled on this document): " + ", ".join(
                             str(h["consumer"]) for h in stuck))
        if not history and not stalls:
            parts.append("no worker recorded giving it up (deliveries from before this worker version)")
        return "; ".join(parts)

    async def _attempt(self, d: Delivery, job: Job, t0: float) -> None:
        pool = self.s.pool
        try:
            data = await fetch(job.source, self.s.url_allowlist, roots=self.s.input_roots,
                               forbidden=self.s.forbidden_dirs,
                               max_bytes=pool.max_input_mib * 1024 * 1024,
                               read_timeout_s=pool.input_read_timeout_s)
        except asyncio.CancelledError:
            # Stopped (drain over) while its input would not finish reading: a stall, counted
            # before the job is released (worker/runner.py), so a file that holds every worker
            # that reads it ends as 'poison'.
            with suppress(RedisError, OSError):
                await self.record_stall(job.job_id, f"{job.source}: still reading the file when the "
                                        "worker stopped")
            raise
        # Split documents may be long (max_document_pages); what one worker parses at once is
        # bounded by max_pages below.
        page_count = await asyncio.to_thread(inspect_pdf, data, job.source, pool.max_document_pages,
                                             "worker_pool.max_document_pages")
        parsed = job.pages.count if job.pages is not None else page_count
        fans_out = job.pages is None and job.part_of is None and page_count > pool.split_pages_over
        if not fans_out and parsed > pool.max_pages:
            raise PermanentError("too_many_pages", f"{job.source}: {parsed} pages in one job is over "
                                 f"worker_pool.max_pages={pool.max_pages} (documents over "
                                 f"worker_pool.split_pages_over={pool.split_pages_over} pages are split "
                                 "into parts); raise worker_pool.max_pages or submit the whole document")
        if fans_out:
            trace = current_trace.get()
            workers = max(1, await self.queue.live_workers(self.announce_ttl_s))
            n = await fanout.fan_out(self.queue, d, page_count, pool.page_window,
                                     trace.traceparent if trace else None, workers)
            log(logger, logging.INFO, "fanned out", pages=page_count, parts=n, live_workers=workers)
            return
        first = 0
        if job.pages is not None:
            check_range(job.pages, page_count, job.source)
            data = await asyncio.to_thread(extract_pages, data, job.pages)
            first = job.pages.first - 1
        assert self.backend is not None
        requests_sent = request_counter.get()  # this job's counter, set by worker/runner.py
        assert requests_sent is not None
        staging = self.store.staging(job.job_id)
        try:
            result = await self._parse(data, staging, first, job)
            elapsed = time.perf_counter() - t0
            trace = current_trace.get()
            metadata: dict[str, Any] = {
                "job_id": job.job_id, "correlation_id": job.correlation_id, "source": job.source,
                "pages": result.pages, "page_range": job.pages.model_dump() if job.pages else None,
                "language": job.language, "backend": self.backend.name,
                "mineru_version": self.backend.version if self.backend.name == "vlm-http-client" else None,
                "model": self.s.model_name, "server_url": self.s.server_url,
                "requests_sent": requests_sent[0], "processing_s": round(elapsed, 3),
                "queue_wait_s": round(max(0.0, time.time() - elapsed - job.submitted_at), 3),
                "worker": self.s.consumer, "topology": self.s.topology, "shadow_of": shadow_of(job.job_id),
                "trace_id": trace.trace_id if trace else None,
                "deliveries": d.deliveries, "part_of": job.part_of.model_dump() if job.part_of else None,
                "completed_at": time.time(), **result.extra,
            }
            committed = await asyncio.to_thread(
                self.store.commit, job.job_id, staging, result.markdown, result.content_list, metadata)
        except BaseException:
            self.store.discard(staging)
            raise
        await self._finish_part(job)
        await self.queue.ack(d.message_id, job.job_id, "done", pages=result.pages,
                             processing_s=round(elapsed, 3), requests_sent=metadata["requests_sent"],
                             output=self.store.location(job.job_id))
        if job.part_of is None and committed and shadow_of(job.job_id) is None:
            self._count_done(elapsed, job.submitted_at, result.pages)
        log(logger, logging.INFO, "job done", pages=result.pages, seconds=round(elapsed, 3),
            requests=metadata["requests_sent"], committed=committed)
        self._after_document()

    def _count_done(self, elapsed: float, submitted_at: float, pages: int) -> None:
        """One PDF done: its pages, processing time, and the time since submission the user waited."""
        assert self.backend is not None
        name = self.backend.name
        self.metrics.pdfs_processed.labels(name).inc()
        self.metrics.pages_processed.labels(name).inc(pages)
        self.metrics.pdf_duration.labels(name).observe(elapsed)
        # Submitter and worker clocks may differ a little; never observe a negative wait.
        self.metrics.pdf_end_to_end.labels(name).observe(max(elapsed, time.time() - submitted_at))

    async def _parse(self, data: bytes, staging: Path, first: int, job: Job) -> BackendResult:
        """The backend on one document; what the parser raises is that document's failure."""
        assert self.backend is not None
        try:
            return await self.backend.process(data, staging, first)
        except (PermanentError, TransientError, RenderCrash):
            raise  # ours, already classified (the client's errors pass through MinerU unchanged)
        except BrokenProcessPool as exc:
            raise RenderCrash(f"{job.source}: a page-render process died ({exc})") from exc
        except OSError as exc:
            if exc.errno in _MACHINE_ERRNOS:
                raise  # the disk or the process, not the document: the job is kept
            raise document_failure(exc, job.source, first, self._library(),
                                   partial(unrenderable_pages, data)) from exc
        except Exception as exc:  # noqa: BLE001 - MinerU/PDFium on this document: classified, not hidden
            raise document_failure(exc, job.source, first, self._library(),
                                   partial(unrenderable_pages, data)) from exc

    def _library(self) -> str:
        assert self.backend is not None
        return f"MinerU {self.backend.version}" if self.backend.name == "vlm-http-client" else self.backend.name

    async def _finish_part(self, job: Job) -> None:
        """For a part: record it, and merge the parent if it was the last one."""
        if job.part_of is None:
            return
        if await fanout.record_part_done(self.queue, job.part_of):
            await self._merge(job.part_of, job.submitted_at)

    async def _merge(self, part: PartOf, submitted_at: float) -> None:
        """``submitted_at``: the parent's submission time, which every part carries."""
        assert self.backend is not None
        committed, elapsed, pages = await fanout.merge_parent(
            self.queue, self.store, part, self.backend.name, self.backend.version,
            self.s.model_name, self.s.consumer)
        if committed:
            if shadow_of(part.parent_id) is None:  # a shadow copy is no second completion
                self._count_done(elapsed, submitted_at, pages)
            log(logger, logging.INFO, "merged parts", parent=part.parent_id, parts=part.total,
                seconds=round(elapsed, 3))

    async def _dead_letter(self, d: Delivery, kind: str, reason: str) -> None:
        if d.job is not None and shadow_of(d.job.job_id) is not None:
            await self._fail_shadow(d, d.job, kind, reason)
            return
        if not await self.queue.dead_letter(d, kind, reason):
            log(logger, logging.WARNING, "not dead-lettered: the delivery was finished already",
                kind=kind)
            return
        backend = self.s.backend.value
        part = d.job.part_of if d.job else None
        if part is None:
            self.metrics.pdfs_failed.labels(backend, kind).inc()
        else:
            key = self.queue.parts_key(part.parent_id)
            if await self.queue.r.hsetnx(key, "failed", reason):  # count the parent once
                self.metrics.pdfs_failed.labels(backend, kind).inc()
            await self.queue.set_state(part.parent_id, state="dead_lettered", kind=kind,
                                       reason=f"part {part.index} failed: {reason}")
        log(logger, logging.ERROR, "dead-lettered", kind=kind, reason=reason)

    async def _fail_shadow(self, d: Delivery, job: Job, kind: str, reason: str) -> None:
        """A shadow copy (contract/migration.py) that failed: its record says so, and nothing
        else does. It is no document of its own: no dead letter, no failure counted."""
        await self.queue.ack(d.message_id, job.job_id, "dead_lettered", kind=kind, reason=reason)
        if job.part_of is not None:
            await self.queue.set_state(job.part_of.parent_id, state="dead_lettered", kind=kind,
                                       reason=f"part {job.part_of.index} failed: {reason}")
        log(logger, logging.WARNING, "shadow copy failed (not dead-lettered, not counted)", kind=kind,
            reason=reason)

    def _after_document(self) -> None:
        malloc_trim()
        self._docs_since_recycle += 1
        if self._docs_since_recycle >= self.s.pool.recycle_after_documents and self.backend:
            self.backend.recycle()
            self._docs_since_recycle = 0
            log(logger, logging.INFO, "recycled the MinerU context")
        rss_mib = self._proc.memory_info().rss / 2**20
        limit = self.s.pool.memory_limit_mib * self.s.rss_limit_fraction
        if rss_mib > limit:
            self.request_stop(f"RSS {rss_mib:.0f} MiB over {limit:.0f} MiB: recycling the process",
                              EXIT_RECYCLE)


class _Attempt:
    """The bit of tenacity's RetryCallState that its wait strategies read."""

    def __init__(self, number: int) -> None:
        self.attempt_number = number
