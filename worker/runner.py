"""The worker's main loop: intake, reclaim, heartbeats, probes, graceful drain.

One asyncio loop runs ``jobs_per_worker`` jobs at once. New jobs are taken only while the
worker is ready (inference server answers /v1/models, Redis answers) and the circuit breaker
is not open. A job that hits a transient failure is held (its pending entry heart-beaten) and
retried after a backoff, or, while the breaker is open, as soon as the breaker lets a trial
through (which follows the readiness probe: worker/breaker.py); when the breaker closes, every
held job resumes at once. It is never acked or dead-lettered because the server was down.
SIGTERM stops intake, lets in-flight jobs run for ``drain_timeout_s``, then releases what is
left back to the queue and exits 0.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from contextlib import suppress

import httpx
import psutil
from redis.exceptions import RedisError
from tenacity.wait import wait_exponential_jitter

from contract.metrics import BreakerState
from worker.backends import Backend
from worker.client import InferenceClient, request_counter
from worker.config import WorkerSettings
from worker.logs import correlation_id_var, job_id_var, log
from worker.metrics import WorkerMetrics
from worker.processing import JobSteps
from worker.queue import ANNOUNCE_INTERVAL_S, ANNOUNCE_TTL_S, DEAD_SILENT_S, Delivery, JobQueue
from worker.store import OutputStore
from worker.tracing import current_trace, new_trace, parse_traceparent

logger = logging.getLogger("worker")
PROBE_INTERVAL_S = 2.0
# A worker that got no completion answered for this long asks for one itself (1 token): a hung
# server still lists its models, and an idle worker would never see the hang otherwise.
HANG_CHECK_S = 5.0
DEAD_CHECK_INTERVAL_S = 1.0  # how often a worker with a free slot looks for dead workers' jobs
READ_BLOCK_MS = 1000  # an idle worker wakes twice per probe interval, and a stop waits at most this for a read
OPEN_PROBE_INTERVAL_S = 0.5  # probe cadence while the server or the breaker says "down"
PRUNE_INTERVAL_S = 60.0  # how often dead consumers are looked for


class Worker(JobSteps):
    def __init__(self, settings: WorkerSettings, queue: JobQueue, store: OutputStore,
                 inference: InferenceClient, metrics: WorkerMetrics) -> None:
        self.s = settings
        self.queue = queue
        self.store = store
        self.inference = inference
        self.metrics = metrics
        self.breaker = inference.breaker
        self.backend: Backend | None = None  # set once MinerU is imported (see __main__)
        self.server_ok = False
        self.redis_ok = False
        self.last_probe = time.monotonic()
        self.probe_detail = "not probed yet"
        self.exit_code = 0
        self.stop_requested_at: float | None = None  # monotonic time of request_stop
        self.in_flight_at_stop = 0  # documents in flight when the stop was requested
        self.in_flight: dict[str, Delivery] = {}
        self._tasks: dict[str, asyncio.Task] = {}
        self._slots = asyncio.Semaphore(settings.pool.jobs_per_worker)
        self._stopping = asyncio.Event()
        self._reading = False  # intake is inside a Redis read (see run: do not cancel it there)
        self._server_back = asyncio.Event()  # set while the server answers; held jobs wake on it
        self._breaker_moved = asyncio.Event()  # replaced at each breaker transition (see below)
        self._loop: asyncio.AbstractEventLoop | None = None
        self.breaker.subscribe(self._on_breaker_change)
        self._next_prune = 0.0
        self._docs_since_recycle = 0
        self._job_backoff = wait_exponential_jitter(multiplier=1.0, max=10.0)
        self._proc = psutil.Process()
        self.announce_ttl_s = ANNOUNCE_TTL_S
        self._last_hang_check = 0.0  # monotonic: the last 1-token completion asked for (see HANG_CHECK_S)
        self._hang_task: asyncio.Task | None = None
        self._announced_since: float | None = None  # monotonic; announcements succeeding since

    # -- state ----------------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return self.server_ok and self.redis_ok and self.backend is not None and not self._stopping.is_set()

    def can_take(self) -> bool:
        return self.ready and self.breaker.allows_intake()

    def readiness(self) -> tuple[bool, str]:
        """/readyz: ready to take work, or why not (the breaker included: a worker whose
        requests fail is not ready, even when the server lists its model)."""
        if not self.ready:
            if self._stopping.is_set():
                return False, "stopping: finishing or releasing its documents"
            if self.backend is None and self.server_ok and self.redis_ok:
                return False, "starting: MinerU is loading"
            return False, self.probe_detail
        if not self.breaker.allows_intake():
            return False, (f"circuit breaker open: requests to the server fail (last: "
                           f"{self.inference.last_failure}); a trial goes out once the server "
                           "answers /v1/models and a 1-token completion")
        return True, self.probe_detail

    def _on_breaker_change(self, state: BreakerState) -> None:
        # Called wherever the breaker moves (also from the health thread reading its state):
        # wake the held jobs on the event loop.
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._wake_held)

    def _wake_held(self) -> None:
        moved, self._breaker_moved = self._breaker_moved, asyncio.Event()
        moved.set()

    def request_stop(self, reason: str, exit_code: int = 0) -> None:
        if not self._stopping.is_set():
            log(logger, logging.INFO, "stopping", reason=reason, in_flight=len(self.in_flight))
            self.exit_code = exit_code
            self.stop_requested_at = time.monotonic()
            self.in_flight_at_stop = len(self.in_flight)
            self._stopping.set()

    # -- main -------------------------------------------------------------------------------------
    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        self._loop = loop
        for sig in (signal.SIGTERM, signal.SIGINT):
            with suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.request_stop, signal.Signals(sig).name)
        await self._until_redis()
        swept = self.store.sweep_staging(older_than_s=max(3600.0, 4 * self.s.spec.queue.visibility_timeout_s),
                                         now=time.time())
        await self._announce()
        intake = asyncio.create_task(self._intake_loop())
        loops = [asyncio.create_task(c) for c in (self._probe_loop(), self._heartbeat_loop(),
                                                  self._announce_loop())]
        log(logger, logging.INFO, "worker started", consumer=self.s.consumer, swept_staging=swept)
        await self._stopping.wait()
        await self._announce()  # leaves the live set: new fan-outs are sized without us
        drain = asyncio.create_task(self._drain())  # the drain clock starts at the signal
        if self._reading:
            # A blocking read ends within READ_BLOCK_MS and gives back what it got: cancelling
            # it mid-read could strand a delivered entry until the visibility timeout.
            with suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(intake), READ_BLOCK_MS / 1000 + 3)
        loops.append(intake)  # waiting for a slot or asleep: safe to cancel
        await drain
        for task in loops:
            task.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        return self.exit_code

    async def _until_redis(self) -> None:
        while not self._stopping.is_set():
            try:
                await self.queue.ensure_group()
                self.redis_ok = True
                return
            except (RedisError, OSError) as exc:
                log(logger, logging.WARNING, "redis not reachable, retrying", error=repr(exc))
                await self._sleep(1.0)

    async def _drain(self) -> None:
        tasks = list(self._tasks.values())
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=self.s.drain_timeout_s)
            for task in pending:  # each releases its job on cancellation (see _handle)
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    async def _wait_to_retry(self, backoff_s: float) -> None:
        """Hold a job until it may try again: after ``backoff_s`` while the breaker is closed;
        while it is open, until it admits a trial (a held job then sends it); and at once when
        the breaker closes again after an outage, or the worker stops."""
        until = time.monotonic() + backoff_s
        was_open = False
        while not self._stopping.is_set():
            state = self.breaker.state
            if state is BreakerState.closed:
                if was_open or time.monotonic() >= until:
                    return
                await self._hold(until - time.monotonic())
            elif state is BreakerState.half_open and not self.breaker.trial_in_flight:
                return
            else:
                was_open = True
                await self._hold(self.breaker.recovery_timeout_s)

    async def _hold(self, seconds: float) -> None:
        """Sleep up to ``seconds``; wake early on stop, on a breaker transition, or when the
        server answers again after an outage."""
        waits = [asyncio.ensure_future(self._stopping.wait()),
                 asyncio.ensure_future(self._breaker_moved.wait())]
        if not self._server_back.is_set():
            waits.append(asyncio.ensure_future(self._server_back.wait()))
        try:
            await asyncio.wait(waits, timeout=max(0.0, seconds), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()

    async def _announce(self) -> None:
        """Count this worker in the live set fan-out sizes parts by (a starting worker counts:
        it takes parts within seconds); best effort, Redis trouble is handled by the loops."""
        try:
            await self.queue.announce(not self._stopping.is_set(), self.announce_ttl_s)
        except (RedisError, OSError):
            self._announced_since = None
            return
        if self._announced_since is None:
            self._announced_since = time.monotonic()

    def _silence_is_evidence(self) -> float | None:
        """DEAD_SILENT_S once this worker has announced itself that long without a break: after
        Redis was unreachable every worker was silent, and silence says nothing yet."""
        since = self._announced_since
        return DEAD_SILENT_S if since is not None and time.monotonic() - since > DEAD_SILENT_S else None

    async def _sleep(self, seconds: float) -> None:
        with suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), timeout=seconds)

    # -- loops --------------------------------------------------------------------------------------
    async def _intake_loop(self) -> None:
        """Fill free slots: first the jobs of dead workers (silent or their process gone: every
        DEAD_CHECK_INTERVAL_S), then jobs idle past the visibility timeout (every quarter of
        it), then new ones (XREADGROUP)."""
        vt = self.s.spec.queue.visibility_timeout_s
        next_reclaim = next_dead_check = 0.0
        while not self._stopping.is_set():
            if not self.can_take():
                await self._sleep(0.2)
                continue
            await self._slots.acquire()
            if self._stopping.is_set():  # stopped while waiting for a free slot
                self._slots.release()
                break
            delivery = None
            try:
                self._reading = True
                if time.monotonic() >= next_dead_check:
                    next_dead_check = time.monotonic() + DEAD_CHECK_INTERVAL_S
                    taken = await self.queue.reclaim_from_dead(1, self._silence_is_evidence())
                    if taken:
                        delivery = taken[0]
                        self._clean_abandoned_staging(delivery)
                        log(logger, logging.INFO, "took over a dead worker's job", message_id=delivery.message_id,
                            job_id=delivery.job.job_id if delivery.job else None,
                            previous=delivery.abandoned_by, deliveries=delivery.deliveries)
                        next_dead_check = 0.0  # there may be more
                if delivery is None and time.monotonic() >= next_reclaim:
                    next_reclaim = time.monotonic() + max(0.5, vt / 4)
                    claimed = await self.queue.reclaim(vt, count=1)
                    if claimed:
                        delivery = claimed[0]
                        log(logger, logging.INFO, "reclaimed abandoned job", message_id=delivery.message_id,
                            job_id=delivery.job.job_id if delivery.job else None,
                            deliveries=delivery.deliveries)
                        next_reclaim = 0.0  # there may be more
                if delivery is None:
                    read = await self.queue.read(count=1, block_ms=READ_BLOCK_MS)
                    delivery = read[0] if read else None
            except (RedisError, OSError) as exc:
                self._reading = False
                self._slots.release()
                self.redis_ok = False
                log(logger, logging.WARNING, "reading the stream failed", error=repr(exc))
                await self._sleep(1.0)
                continue
            self._reading = False
            if delivery is None:
                self._slots.release()
                continue
            if self._stopping.is_set():  # stop arrived while reading: give it straight back
                await self.queue.release(delivery)
                self._slots.release()
                continue
            self._spawn(delivery)

    def _clean_abandoned_staging(self, d: Delivery) -> None:
        """The dead worker's half-written outputs of this job: nobody else writes them."""
        if d.job is not None:
            removed = self.store.discard_job_staging(d.job.job_id)
            if removed:
                log(logger, logging.INFO, "removed a dead worker's staging folder", folders=removed)

    async def _announce_loop(self) -> None:
        """Say this worker is alive, on its own loop: a probe waiting on a hung server must not
        make the worker look dead to the others (they take a silent worker's jobs)."""
        while True:
            await self._announce()
            await asyncio.sleep(ANNOUNCE_INTERVAL_S)

    async def _heartbeat_loop(self) -> None:
        interval = max(0.5, self.s.spec.queue.visibility_timeout_s / 3)
        while True:
            await asyncio.sleep(interval)  # keeps running through the drain
            with suppress(RedisError, OSError):
                await self.queue.heartbeat(list(self.in_flight))

    async def _probe_loop(self) -> None:
        while True:
            breaker_closed = self.breaker.state is BreakerState.closed
            # A chat answer in the last interval proves the server up: skip the probe request
            # (it would only add CPU to every busy worker). Never skipped while the breaker is
            # not closed: its trials wait for this probe's verdict.
            recent = time.monotonic() - self.inference.last_success < PROBE_INTERVAL_S
            if self.s.in_process is not None:
                # Monolithic: no server to ask; the engine is up once the backend has loaded.
                self.server_ok = self.backend is not None
                self.probe_detail = "ok" if self.server_ok else "in-process engine loading"
            elif not (self.server_ok and breaker_closed and recent):
                sent_at = time.monotonic()
                what = f"GET {self.s.server_url}/v1/models"
                try:
                    models = await self.inference.list_models()
                    self.server_ok = self.s.model_name in models
                    self.probe_detail = "ok" if self.server_ok else (
                        f"server lists {models}, not the spec's model {self.s.model_name!r}")
                    if self.server_ok and not breaker_closed:
                        # The breaker's trial waits for a completion to answer, not only the
                        # model list: a trial sent to a hung engine would hang for a whole
                        # deadline, and recovery would wait on it after the server is back.
                        what = f"a 1-token completion from {self.s.server_url} (it lists its models)"
                        await self.inference.ping_completion(self.s.model_name)
                    elif self.server_ok and self._hang_check_due():
                        # On a task of its own: it waits as long as answers take (under a backlog,
                        # long), and the probe loop (/healthz) must not wait with it.
                        self._hang_task = asyncio.create_task(self._hang_check())
                except Exception as exc:  # noqa: BLE001 - any failure means "not ready", with the reason
                    self.server_ok = False
                    failed = "got no answer in time: the server is hung" if isinstance(
                        exc, (TimeoutError, httpx.TimeoutException)) else f"failed: {exc!r}"
                    self.probe_detail = f"{what} {failed}"
                self.breaker.server_ready(self.server_ok, sent_at)
            if self.server_ok:
                self._server_back.set()
            else:
                self._server_back.clear()
            try:
                await self.queue.r.ping()
                self.redis_ok = True
                lag, pending = await self.queue.group_counts()
                if lag is not None:
                    self.metrics.queue_lag.set(lag)
                if pending is not None:
                    self.metrics.queue_pending.set(pending)
                await self._prune_consumers()
            except (RedisError, OSError) as exc:
                self.redis_ok = False
                self.probe_detail = f"redis: {exc!r}"
            state = self.breaker.state
            self.metrics.breaker_state.set(int(state))
            self.last_probe = time.monotonic()
            down = not self.server_ok or state is not BreakerState.closed
            await asyncio.sleep(OPEN_PROBE_INTERVAL_S if down else PROBE_INTERVAL_S)

    def _hang_check_due(self) -> bool:
        now = time.monotonic()
        running = self._hang_task is not None and not self._hang_task.done()
        return (not running and self.breaker.state is BreakerState.closed
                and now - self.inference.last_success > HANG_CHECK_S and now - self._last_hang_check > HANG_CHECK_S)

    async def _hang_check(self) -> None:
        """A 1-token completion (waiting what probes wait: twice the median answer, at least
        2 s, at most its deadline); no answer in time, or a 5xx, opens the breaker at once (the
        worker stops taking jobs and /readyz says why): every worker, busy or idle, sees a hung
        server within HANG_CHECK_S plus that wait."""
        sent_at = self._last_hang_check = time.monotonic()
        what = (f"a 1-token completion from {self.s.server_url} (it lists its models; no completion "
                f"answered this worker for {HANG_CHECK_S:g} s)")
        try:
            await self.inference.ping_completion(self.s.model_name)
        except (TimeoutError, httpx.TimeoutException):
            if self.inference.last_answered_sent_at > sent_at:
                return  # a request sent after it was answered: the hang, if any, is over
            self.inference.last_failure = "a 1-token completion got no answer in time (the server is hung)"
            self.probe_detail = f"{what} got no answer in time: the server is hung"
            self.breaker.trip()
        except httpx.HTTPStatusError as exc:
            if exc.response.status_code >= 500 and self.inference.last_answered_sent_at <= sent_at:
                self.inference.last_failure = f"a 1-token completion answered HTTP {exc.response.status_code}"
                self.probe_detail = f"{what} answered HTTP {exc.response.status_code}"
                self.breaker.trip()
        except Exception as exc:  # noqa: BLE001 - not a verdict on the server (connection: the probe sees it)
            log(logger, logging.DEBUG, "hang check failed", error=repr(exc))

    async def _prune_consumers(self) -> None:
        if time.monotonic() < self._next_prune:
            return
        self._next_prune = time.monotonic() + PRUNE_INTERVAL_S
        removed = await self.queue.prune_dead_consumers()
        if removed:
            log(logger, logging.INFO, "removed dead consumers from the group", consumers=removed)

    # -- one job ------------------------------------------------------------------------------------
    def _spawn(self, d: Delivery) -> None:
        self.in_flight[d.message_id] = d
        self._tasks[d.message_id] = asyncio.create_task(self._handle(d))

    async def _handle(self, d: Delivery) -> None:
        self.metrics.in_flight.inc()
        job = d.job
        root = (parse_traceparent(job.traceparent) if job else None) or new_trace()
        if job is not None:
            job_id_var.set(job.job_id)
            correlation_id_var.set(job.correlation_id or job.job_id)
        request_counter.set([0])
        try:
            with self.inference.tracer.span("mineru.job", root, **{
                    "splitstack.job_id": job.job_id if job else "", "messaging.message.id": d.message_id}) as span:
                # Export on: the job span is the parent of every request span. Export off: the
                # job keeps the submitter's trace id (root), each request gets a child span id.
                current_trace.set(span if self.inference.tracer.exporting else root)
                await self._process(d)
        except asyncio.CancelledError:
            with suppress(RedisError, OSError):
                await self.queue.release(d)
            log(logger, logging.WARNING, "released unfinished job at shutdown", message_id=d.message_id)
        except (RedisError, OSError) as exc:
            # Nothing acked: the entry stays pending and is reclaimed after the visibility timeout.
            log(logger, logging.ERROR, "queue error while processing; job left pending", error=repr(exc))
        except Exception:  # a bug (ours or MinerU's): keep the job, let redelivery count it
            logger.exception("unexpected error; job left pending, it is redelivered after the "
                             "visibility timeout and dead-lettered as 'poison' if it keeps failing")
        finally:
            self.in_flight.pop(d.message_id, None)
            self._tasks.pop(d.message_id, None)
            self.metrics.in_flight.dec()
            self._slots.release()
