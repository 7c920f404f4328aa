"""The worker's one HTTP client to the inference server: every request of both backends goes
through :meth:`InferenceClient.post_chat`, so retries, the circuit breaker, per-worker
concurrency, W3C trace propagation and the ``mineru_vllm_client_*`` metrics are the same
whether MinerU or the page-vlm backend is talking.

Failure kinds (permanent or retryable, worker/errors.py): connection errors, timeouts, 429 and 5xx are retryable (with
exponential backoff and jitter, honouring Retry-After), and count against the breaker; a 401/403
also counts against the breaker (a wrong key is a deployment fault: keep the documents); any
other 4xx or an unreadable answer fails the document for good (:class:`ServerAnswerError`).

Every request has a deadline sized from its tokens and the server's measured speed
(worker/deadlines.py), not one fixed timeout: a hung or slow server is a timeout within seconds,
counted by the breaker, and the cancelled request gives its connection back. The readiness probe
(``list_models``) has a client and connection pool of its own, so requests stuck in the work
pool can never make it fail (it would then blame a healthy server).

A request is not left to hang for its whole deadline once the server has shown it works again:
when a request sent *after* it is answered (a work request or a 1-token completion probe), and it
has waited more than ``HUNG_FACTOR`` times what it should take at the measured speed (at least
``HUNG_MIN_S``), it is taken as lost on the server: cancelled (its connection released), counted
as a timeout by the breaker and retried at once with the deadline it had. A request past that
point with no newer answer sends such a probe itself (on the probe pool, at most one per
``WATCH_INTERVAL_S``), so a worker with a single request outstanding recovers too.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import statistics
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import httpx
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, stop_after_attempt
from tenacity.wait import wait_exponential_jitter

from contract import metrics as catalog
from contract.metrics import BreakerState
from worker.breaker import CircuitBreaker
from worker.deadlines import WINDOW, DeadlinePolicy
from worker.errors import CircuitOpenError, ServerAnswerError, TransientError
from worker.metrics import WorkerMetrics
from worker.otel import Tracer
from worker.tracing import current_trace

# Requests sent on behalf of the job the current task works on (read into its metadata); a
# one-element list so that MinerU's sub-tasks, which copy the context, add to the same counter.
request_counter: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar(
    "splitstack_request_counter", default=None)

CHAT_PATH = catalog.CHAT_ENDPOINT
MODELS_PATH = "/v1/models"
RETRYABLE_STATUS = {429, 500, 502, 503, 504}
BREAKER_STATUS = RETRYABLE_STATUS | {401, 403}
MAX_RETRY_AFTER_S = 30.0
PROBE_CONNECTIONS = 4  # readiness (list, 1-token completion) and the overdue-request probes
DEFAULT_MAX_MODEL_LEN = 32768
DEADLINE_RECHECK_S = 0.5  # how often a waiting request's deadline is sized again
HUNG_FACTOR = 2.0  # overdue: waiting this many times its expected time (measured speed) ...
HUNG_MIN_S = 1.0  # ... and at least this long
WATCH_INTERVAL_S = 1.0  # at most one probe for overdue requests per this (and one at a time)
PING_MIN_TIMEOUT_S = 2.0  # a 1-token probe waits at least this long ...
PING_FACTOR = 2.0  # ... or this many times the median work request, at most its deadline


class _Overtaken(Exception):
    """The request was cancelled: the server answered a newer one while this one was overdue."""


class RetryableResponse(TransientError):
    def __init__(self, kind: str, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.retry_after_s = retry_after_s


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return min(MAX_RETRY_AFTER_S, max(0.0, float(value))) if value else None
    except ValueError:
        return None


class InferenceClient:
    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None,
        breaker: CircuitBreaker,
        metrics: WorkerMetrics,
        concurrency: int,
        request_timeout_s: float,
        max_retries: int,
        connect_timeout_s: float = 10.0,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
        tracer: Tracer | None = None,
        deadlines: DeadlinePolicy | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.breaker = breaker
        self.metrics = metrics
        self.max_retries = max_retries
        self.tracer = tracer or Tracer()
        self.deadlines = deadlines or DeadlinePolicy(
            floor_s=5.0, slack=4.0, cap_s=request_timeout_s, max_model_len=DEFAULT_MAX_MODEL_LEN)
        self.connect_timeout_s = connect_timeout_s
        self._wait = wait_exponential_jitter(multiplier=backoff_initial_s, max=backoff_max_s)
        self._slots = asyncio.Semaphore(concurrency)  # per worker, across all its jobs
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=headers,
            transport=transport,
            timeout=httpx.Timeout(connect=connect_timeout_s, read=request_timeout_s,
                                  write=request_timeout_s, pool=None),
            limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency),
        )
        # The readiness probe's own pool: requests stuck in the work pool cannot starve it.
        self._probe = httpx.AsyncClient(
            base_url=self.base_url, headers=headers, transport=transport,
            timeout=httpx.Timeout(2.0, connect=min(2.0, connect_timeout_s)),
            limits=httpx.Limits(max_connections=PROBE_CONNECTIONS,
                                max_keepalive_connections=PROBE_CONNECTIONS),
        )
        self.requests_sent = 0  # attempts, including retries; read into job metadata
        self.last_success = 0.0  # monotonic time of the last 200: lets readiness skip a probe
        # When the newest answered request (work or 1-token probe) was sent, monotonic: a probe
        # that timed out proves a hang only if nothing sent after it was answered since.
        self.last_answered_sent_at = 0.0
        self.timeouts = 0  # requests that ran past their deadline (consecutive; 0 after an answer)
        self.last_failure = "none"  # the last failed request, in words (for /readyz)
        self._started: dict[int, float] = {}  # in-flight requests: id -> monotonic start
        self._bodies: dict[int, dict[str, Any]] = {}  # in-flight requests: id -> body
        self._tasks: dict[int, asyncio.Future[httpx.Response]] = {}  # id -> its HTTP exchange
        self._overtaken: set[int] = set()  # ids cancelled as lost on the server
        self._last_watch = 0.0  # monotonic time of the last probe for an overdue request
        self._watchers: set[asyncio.Task[None]] = set()
        self._elapsed: deque[float] = deque(maxlen=WINDOW)  # durations of the last answers
        self._ids = itertools.count()
        metrics.requests_in_flight.set_function(lambda: len(self._started))
        metrics.oldest_request.set_function(self.oldest_request_s)

    async def aclose(self) -> None:
        for task in list(self._watchers):
            task.cancel()
        await asyncio.gather(*self._watchers, return_exceptions=True)
        await self._http.aclose()
        await self._probe.aclose()

    def oldest_request_s(self) -> float:
        """Age of the oldest request waiting for an answer (0 when none)."""
        started = list(self._started.values())
        return time.monotonic() - min(started) if started else 0.0

    # -- public calls ---------------------------------------------------------------------------
    async def post_chat(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST a chat completion with retries; returns the parsed JSON answer."""
        first_sent = time.monotonic()
        overtaken = 0  # attempts cut as lost on the server: their retry keeps the same deadline
        async for attempt in AsyncRetrying(
            retry=retry_if_exception_type(RetryableResponse),
            stop=stop_after_attempt(self.max_retries + 1),
            wait=self._wait_for,
            before_sleep=lambda state: self.metrics.retries.labels(CHAT_PATH).inc(),
            reraise=True,
        ):
            with attempt:
                try:
                    return await self._attempt(body, attempt.retry_state.attempt_number - overtaken,
                                               first_sent)
                except RetryableResponse as exc:
                    overtaken += exc.kind == "overtaken"
                    raise
        raise AssertionError("unreachable: tenacity reraises")  # pragma: no cover

    async def list_models(self, timeout_s: float = 2.0) -> list[str]:
        """GET /v1/models once (readiness probe, on its own pool): no retries, does not move
        the breaker."""
        response = await self._probe.get(MODELS_PATH, timeout=timeout_s)
        response.raise_for_status()
        return [m.get("id", "") for m in response.json().get("data", [])]

    async def ping_completion(self, model: str, timeout_s: float | None = None) -> float:
        """One 1-token chat completion on the probe's pool: no retries, not counted by the
        breaker or the work metrics. Listing the models proves the HTTP server is up; this
        proves it answers completions (a hung engine still lists its models). Waits at most
        :meth:`ping_timeout_s` (or ``timeout_s``); returns how long it took. Its answer is
        evidence that the server works: overdue requests sent before it are cut."""
        body = {"model": model, "messages": [{"role": "user", "content": "ping"}], "max_tokens": 1}
        deadline_s = self.ping_timeout_s(body) if timeout_s is None else timeout_s
        sent_at = time.monotonic()
        t0 = time.perf_counter()
        async with asyncio.timeout(deadline_s):
            response = await self._probe.post(CHAT_PATH, json=body, timeout=deadline_s)
        response.raise_for_status()
        self._answered(sent_at)
        return time.perf_counter() - t0

    def ping_timeout_s(self, body: dict[str, Any]) -> float:
        """How long a 1-token probe may wait: its deadline, but once work requests were answered
        no more than ``PING_FACTOR`` times their median duration (at least ``PING_MIN_TIMEOUT_S``):
        a probe to a server that hangs gives up soon, so the next one can see it back."""
        deadline_s = self.deadlines.deadline_s(body)
        if not self._elapsed:
            return deadline_s
        return min(deadline_s, max(PING_MIN_TIMEOUT_S, PING_FACTOR * statistics.median(self._elapsed)))

    # -- requests lost on the server ------------------------------------------------------------
    def _overdue_s(self, body: dict[str, Any]) -> float:
        return max(HUNG_MIN_S, HUNG_FACTOR * self.deadlines.expected_s(body))

    def _answered(self, sent_at: float) -> None:
        """A request sent at ``sent_at`` (monotonic) was answered: the server works. Every
        request sent before it that is overdue is lost there: cancel it (it is retried)."""
        now = time.monotonic()
        self.last_answered_sent_at = max(self.last_answered_sent_at, sent_at)
        for key, started in list(self._started.items()):
            body = self._bodies.get(key)
            task = self._tasks.get(key)
            if (started < sent_at and body is not None and task is not None and not task.done()
                    and key not in self._overtaken and now - started > self._overdue_s(body)):
                self._overtaken.add(key)
                task.cancel()

    def _watch(self, key: int, now: float) -> None:
        """Called while request ``key`` waits: once it is overdue and nothing sent after it was
        answered, ask the server for a 1-token completion (its answer cuts the request)."""
        started, body = self._started.get(key), self._bodies.get(key)
        if started is None or body is None or self.last_success >= started:
            return
        model = body.get("model")
        if (not isinstance(model, str) or now - started <= self._overdue_s(body) or self._watchers
                or now - self._last_watch < WATCH_INTERVAL_S):
            return
        self._last_watch = now

        async def probe() -> None:
            try:
                await self.ping_completion(model)
            except Exception:  # noqa: BLE001, S110 - no answer proves nothing; the deadline still holds
                pass

        task = asyncio.ensure_future(probe())
        self._watchers.add(task)
        task.add_done_callback(self._watchers.discard)

    # -- one attempt ------------------------------------------------------------------------------
    def _wait_for(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, RetryableResponse) and exc.retry_after_s is not None:
            return exc.retry_after_s
        if isinstance(exc, RetryableResponse) and exc.kind == "overtaken":
            return 0.0  # the server works: retry at once
        return self._wait(state)

    async def _attempt(self, body: dict[str, Any], number: int = 1, first_sent: float = 0.0) -> dict[str, Any]:
        m = self.metrics
        if not self.breaker.allow_request():
            m.failures.labels(CHAT_PATH, "breaker_open").inc()
            raise CircuitOpenError(
                f"circuit breaker is open after repeated failures of {self.base_url}; "
                f"next trial in {self.breaker.seconds_until_trial():.0f} s"
            )
        trace = current_trace.get()
        if trace is None:
            return await self._send(body, {}, number, first_sent)
        with self.tracer.span("mineru.vllm.chat_completion", trace, **{"http.url": self.base_url + CHAT_PATH}) as span:
            return await self._send(body, {"traceparent": span.traceparent}, number, first_sent)

    async def _send(self, body: dict[str, Any], headers: dict[str, str], number: int = 1,
                    first_sent: float = 0.0) -> dict[str, Any]:
        m = self.metrics
        async with self._slots:
            m.requests.labels(CHAT_PATH).inc()
            self.requests_sent += 1
            counter = request_counter.get()
            if counter is not None:
                counter[0] += 1
            def size() -> float:
                # A retry gets twice the time only when the server answered other requests
                # since this one was first sent (it is alive: this answer is just long). A
                # server that answers nothing (hung, dead) gets the first deadline again, so
                # recovery after it comes back never waits on a doubled deadline.
                grow = number if self.last_success >= first_sent else 1
                return self.deadlines.deadline_s(body, grow)

            deadline_s = size()
            m.deadline.set(deadline_s)
            key = next(self._ids)
            t0 = time.perf_counter()
            sent_at = self._started[key] = time.monotonic()
            self._bodies[key] = body
            deadline = [deadline_s]
            try:
                response = await self._post_within_deadline(body, headers, size, deadline, key)
            except _Overtaken as exc:
                waited = time.monotonic() - sent_at
                # A failure for the breaker only while it is closed: while it recovers, the newer
                # answer is what counts (a lost trial lets another one try, it does not re-open it).
                self._fail(t0, "timeout", f"no answer after {waited:.1f} s while newer requests were answered",
                           breaker=self.breaker.state is BreakerState.closed)
                self.timeouts += 1
                raise RetryableResponse(
                    "overtaken", f"request to {self.base_url} got no answer in {waited:.1f} s while a "
                    f"request sent after it was answered: lost on the server, sent again") from exc
            except (TimeoutError, httpx.TimeoutException) as exc:
                deadline_s = deadline[0]
                self._fail(t0, "timeout", f"no answer within the deadline of {deadline_s:.1f} s")
                self.timeouts += 1
                raise RetryableResponse(
                    "timeout", f"request to {self.base_url} got no answer within its deadline of "
                    f"{deadline_s:.1f} s ({self.deadlines.describe()})") from exc
            except httpx.TransportError as exc:
                self._fail(t0, "connect", f"connection failed: {type(exc).__name__}")
                raise RetryableResponse("connect", f"cannot reach {self.base_url}: {exc!r}") from exc
            except asyncio.CancelledError:
                self.breaker.release_trial()
                raise
            finally:
                self._started.pop(key, None)
                self._bodies.pop(key, None)
                self._overtaken.discard(key)
            elapsed = time.perf_counter() - t0
            m.request_duration.labels(CHAT_PATH).observe(elapsed)
        status = response.status_code
        if status == 200:
            try:
                data = response.json()
            except ValueError as exc:
                self.breaker.record_success()  # the server is up; this answer is bad
                m.failures.labels(CHAT_PATH, "bad_body").inc()
                raise ServerAnswerError(status, f"body is not JSON: {response.text[:200]}") from exc
            self.breaker.record_success()
            self.last_success = time.monotonic()
            self.timeouts = 0
            self._learn(data, elapsed)
            self._elapsed.append(elapsed)
            self._answered(sent_at)
            return data
        kind = "http_5xx" if status >= 500 else "http_4xx"
        m.failures.labels(CHAT_PATH, kind).inc()
        self.last_failure = f"HTTP {status}"
        if status in BREAKER_STATUS:
            self.breaker.record_failure()
            if status in RETRYABLE_STATUS:
                raise RetryableResponse(kind, f"{self.base_url} answered {status}", _retry_after(response))
            raise TransientError(
                f"{self.base_url} answered {status} (unauthorized): check that the worker's API "
                "key env var holds the key the server was started with"
            )
        self.breaker.record_success()
        detail = response.text
        if status == 400 and any(k in detail for k in ("max_model_len", "maximum context length", "input prompt")):
            detail += (" -- the page image does not fit the server's context: raise "
                       "inference_servers[].max_model_len (MinerU's layout request needs ~2,600 "
                       "tokens for a 1036x1036 page image)")
        raise ServerAnswerError(status, detail)

    async def _post_within_deadline(self, body: dict[str, Any], headers: dict[str, str],
                                    size: Callable[[], float], deadline: list[float],
                                    key: int = -1) -> httpx.Response:
        """POST, bounded by the request's deadline (the whole exchange: httpx's read timeout is
        per read). The deadline is sized again every ``DEADLINE_RECHECK_S`` from what the worker
        has learned meanwhile: a request sent on the prior speed (no answer measured yet, a
        deadline of a minute or more) gets the measured one as soon as other answers come in,
        so a server that hangs on a fresh worker is still detected within seconds.
        ``deadline[0]`` is left holding the last deadline applied. Cancelling the request
        closes its connection, so the pool gets it back. Raises :class:`_Overtaken` when
        :meth:`_answered` cancelled it; while it is overdue, :meth:`_watch` may probe."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        timeout = httpx.Timeout(self.deadlines.cap_s, connect=min(self.connect_timeout_s, deadline[0]))
        task = asyncio.ensure_future(self._http.post(CHAT_PATH, json=body, headers=headers, timeout=timeout))
        self._tasks[key] = task
        try:
            while True:
                remaining = start + deadline[0] - loop.time()
                if remaining <= 0:
                    raise TimeoutError(f"no answer within {deadline[0]:.1f} s")
                done, _ = await asyncio.wait({task}, timeout=min(remaining, DEADLINE_RECHECK_S))
                if done:
                    if task.cancelled() and key in self._overtaken:
                        raise _Overtaken()
                    return task.result()
                deadline[0] = size()
                self._watch(key, time.monotonic())
        finally:
            self._tasks.pop(key, None)
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    def _learn(self, data: Any, elapsed: float) -> None:
        usage = data.get("usage") if isinstance(data, dict) else None
        if isinstance(usage, dict):
            prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
            if isinstance(prompt, int) and isinstance(completion, int):
                self.deadlines.observe(prompt, completion, elapsed)

    def _fail(self, t0: float, kind: str, what: str, breaker: bool = True) -> None:
        self.last_failure = what
        self.metrics.request_duration.labels(CHAT_PATH).observe(time.perf_counter() - t0)
        self.metrics.failures.labels(CHAT_PATH, kind).inc()
        if breaker:
            self.breaker.record_failure()
        else:
            self.breaker.release_trial()
