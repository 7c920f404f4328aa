import asyncio
import json

import httpx
import pytest

from contract.metrics import BreakerState
from worker.breaker import CircuitBreaker
from worker.client import CHAT_PATH, InferenceClient, request_counter
from worker.errors import CircuitOpenError, ServerAnswerError, TransientError
from worker.metrics import WorkerMetrics
from worker.tracing import current_trace, parse_traceparent

OK = {"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}]}


def client(handler, *, threshold=5, retries=3, metrics=None):
    metrics = metrics or WorkerMetrics()
    breaker = CircuitBreaker(threshold, 30.0)
    c = InferenceClient("http://server:8000", api_key="k", breaker=breaker, metrics=metrics,
                        concurrency=2, request_timeout_s=5, max_retries=retries,
                        backoff_initial_s=0.001, backoff_max_s=0.002,
                        transport=httpx.MockTransport(handler))
    return c, metrics, breaker


def sample(metrics, name, **labels):
    return metrics.registry.get_sample_value(name, labels) or 0.0


def test_retries_503_honouring_retry_after_then_succeeds() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if len(calls) < 3:
            return httpx.Response(503, headers={"Retry-After": "0"}, json={"error": "busy"})
        return httpx.Response(200, json=OK)

    c, m, b = client(handler)
    assert asyncio.run(c.post_chat({"x": 1}))["choices"][0]["message"]["content"] == "hi"
    assert len(calls) == 3
    assert calls[0].headers["authorization"] == "Bearer k"
    assert sample(m, "mineru_vllm_client_retries_total", endpoint=CHAT_PATH) == 2
    assert sample(m, "mineru_vllm_client_requests_total", endpoint=CHAT_PATH) == 3
    assert sample(m, "mineru_vllm_client_failures_total", endpoint=CHAT_PATH, kind="http_5xx") == 2
    assert sample(m, "mineru_vllm_client_request_duration_seconds_count", endpoint=CHAT_PATH) == 3
    assert b.state is BreakerState.closed


def test_connection_errors_open_the_breaker_then_fail_fast_without_sending() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        raise httpx.ConnectError("refused", request=request)

    c, m, b = client(handler, threshold=3, retries=5)
    with pytest.raises(CircuitOpenError, match="circuit breaker is open"):
        asyncio.run(c.post_chat({}))
    assert len(calls) == 3  # the 4th attempt was refused by the breaker, never sent
    assert b.state is BreakerState.open
    assert sample(m, "mineru_vllm_client_failures_total", endpoint=CHAT_PATH, kind="connect") == 3
    assert sample(m, "mineru_vllm_client_failures_total", endpoint=CHAT_PATH, kind="breaker_open") == 1


def test_bad_request_fails_the_document_without_retry() -> None:
    calls = []

    def handler(request):
        calls.append(request)
        return httpx.Response(400, text="image too large")

    c, m, b = client(handler)
    with pytest.raises(ServerAnswerError, match="answered 400: image too large"):
        asyncio.run(c.post_chat({}))
    assert len(calls) == 1 and b.state is BreakerState.closed


def test_unauthorized_is_transient_and_names_the_fix() -> None:
    c, _m, b = client(lambda r: httpx.Response(401, json={"error": "Unauthorized"}), threshold=1)
    with pytest.raises(TransientError, match="API key env var"):
        asyncio.run(c.post_chat({}))
    assert b.state is BreakerState.open


def test_traceparent_is_a_child_of_the_jobs_trace_and_requests_are_counted() -> None:
    seen = []

    def handler(request):
        seen.append(request.headers.get("traceparent"))
        return httpx.Response(200, json=OK)

    c, _m, _b = client(handler)
    parent = parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")

    async def job():
        current_trace.set(parent)
        counter = [0]
        request_counter.set(counter)
        await asyncio.gather(c.post_chat({}), c.post_chat({}))
        return counter[0]

    assert asyncio.run(job()) == 2
    assert all(h.startswith("00-4bf92f3577b34da6a3ce929d0e0e4736-") for h in seen)
    assert len({h.split("-")[2] for h in seen}) == 2  # one span id per request
    assert all(h.split("-")[2] != "00f067aa0ba902b7" for h in seen)


def test_non_json_200_is_a_server_answer_error() -> None:
    c, _m, _b = client(lambda r: httpx.Response(200, text="<html>proxy</html>"))
    with pytest.raises(ServerAnswerError, match="not JSON"):
        asyncio.run(c.post_chat({}))


def test_context_overflow_400_names_the_spec_field_to_raise() -> None:
    body = {"error": {"message": "This model's maximum context length is 2048 tokens. However, you "
                      "requested 2573 tokens in the input prompt."}}
    c, _m, _b = client(lambda r: httpx.Response(400, json=body))
    with pytest.raises(ServerAnswerError, match=r"raise inference_servers\[\]\.max_model_len"):
        asyncio.run(c.post_chat({}))


def test_a_hung_server_times_out_at_the_deadline_frees_its_connection_and_opens_the_breaker() -> None:
    from worker.deadlines import DeadlinePolicy

    hang = asyncio.Event()

    async def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "m"}]})
        await hang.wait()  # never set: no answer
        return httpx.Response(200, json=OK)

    metrics = WorkerMetrics()
    breaker = CircuitBreaker(2, 30.0)
    c = InferenceClient("http://server:8000", api_key="k", breaker=breaker, metrics=metrics, concurrency=1,
                        request_timeout_s=600, max_retries=1, backoff_initial_s=0.001, backoff_max_s=0.002,
                        transport=httpx.MockTransport(handler),
                        deadlines=DeadlinePolicy(floor_s=0.2, slack=1.0, cap_s=600, max_model_len=4096))

    async def scenario() -> tuple[float, list[str]]:
        t0 = asyncio.get_running_loop().time()
        work = asyncio.ensure_future(c.post_chat({"messages": [], "max_tokens": 1}))
        await asyncio.sleep(0.05)
        # The one work connection hangs; the readiness probe has its own pool and answers.
        models = await c.list_models()
        # Not doubled for the retry: the server answered nothing since the request was sent.
        with pytest.raises(TransientError, match=r"no answer within its deadline of 0\.2 s"):
            await work
        return asyncio.get_running_loop().time() - t0, models

    took, models = asyncio.run(scenario())
    assert models == ["m"]
    assert took < 2.0  # two attempts of 0.25 s plus backoff: seconds, not 600
    assert sample(metrics, "mineru_vllm_client_failures_total", endpoint=CHAT_PATH, kind="timeout") == 2
    assert breaker.state is BreakerState.open  # timeouts count as failures
    assert c.oldest_request_s() == 0.0 and sample(metrics, "mineru_vllm_client_requests_in_flight") == 0
    assert "deadline" in c.last_failure


def test_answers_teach_the_deadline_the_servers_speed() -> None:
    answer = {**OK, "usage": {"prompt_tokens": 100, "completion_tokens": 50}}
    from worker.deadlines import DeadlinePolicy

    c, m, _b = client(lambda r: httpx.Response(200, json=answer))
    c.deadlines = DeadlinePolicy(floor_s=1.0, slack=4.0, cap_s=600.0, max_model_len=4096)
    before = c.deadlines.deadline_s({})
    asyncio.run(c.post_chat({}))
    assert c.deadlines.deadline_s({}) < before
    assert sample(m, "mineru_vllm_client_deadline_seconds") == pytest.approx(before)


def test_a_request_sent_before_any_answer_gets_the_measured_deadline_while_it_waits() -> None:
    """A fresh worker sizes its first deadlines on the slow prior (here 5.2 s); once another
    answer shows the server is fast, a request hanging since then is cut within a recheck."""
    from worker.deadlines import DeadlinePolicy

    hang = asyncio.Event()
    fast = {**OK, "usage": {"prompt_tokens": 0, "completion_tokens": 100}}

    async def handler(request: httpx.Request) -> httpx.Response:
        if b'"hang"' in request.content:
            await hang.wait()  # never set
        return httpx.Response(200, json=fast)

    c = InferenceClient("http://server:8000", api_key="k", breaker=CircuitBreaker(5, 30.0),
                        metrics=WorkerMetrics(), concurrency=2, request_timeout_s=600, max_retries=0,
                        backoff_initial_s=0.001, backoff_max_s=0.002, transport=httpx.MockTransport(handler),
                        deadlines=DeadlinePolicy(floor_s=0.2, slack=1.0, cap_s=600, max_model_len=4096))
    body = {"messages": [], "max_tokens": 100}
    assert c.deadlines.deadline_s(body) == pytest.approx(5.2)

    async def scenario() -> float:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        stuck = asyncio.ensure_future(c.post_chat({**body, "id": "hang"}))
        await asyncio.sleep(0.05)
        await c.post_chat(body)  # answered at once: the server is fast
        with pytest.raises(TransientError, match="no answer within its deadline of 0.2 s"):
            await stuck
        return loop.time() - t0

    assert asyncio.run(scenario()) < 1.5  # not the prior's 5.2 s


def test_a_retry_gets_twice_the_time_only_while_the_server_answers_others() -> None:
    """A timeout while other requests are answered is a long answer: the retry gets 2x. With
    nothing answered since the request was first sent, the server is silent: same deadline."""
    from worker.deadlines import DeadlinePolicy

    policy = DeadlinePolicy(floor_s=0.2, slack=1.0, cap_s=600, max_model_len=4096)
    c, _m, _b = client(lambda r: httpx.Response(200, json=OK))
    c.deadlines = policy
    body = {"messages": [], "max_tokens": 1}
    seen: list[float] = []

    async def send(first_sent: float) -> None:
        async def post(*_a, size, deadline, **_k):
            seen.append(size())
            raise TimeoutError
        c._post_within_deadline = lambda b, h, size, deadline, *_: post(size=size, deadline=deadline)
        with pytest.raises(TransientError):
            await c._send(body, {}, 2, first_sent)

    c.last_success = 0.0
    asyncio.run(send(first_sent=10.0))  # nothing answered since: the first deadline
    c.last_success = 20.0
    asyncio.run(send(first_sent=10.0))  # answers came in meanwhile: twice that
    assert seen == [pytest.approx(0.25), pytest.approx(0.5)]


def test_the_completion_ping_sees_a_hung_engine_that_still_lists_its_models() -> None:
    from worker.deadlines import DeadlinePolicy

    hung = asyncio.Event()
    seen: list[dict] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "m"}]})
        seen.append(json.loads(request.content))
        if hung.is_set():
            await asyncio.Event().wait()  # no answer
        return httpx.Response(200, json=OK)

    breaker = CircuitBreaker(1, 30.0)
    c = InferenceClient("http://server:8000", api_key="k", breaker=breaker, metrics=WorkerMetrics(),
                        concurrency=1, request_timeout_s=600, max_retries=0, backoff_initial_s=0.001,
                        backoff_max_s=0.002, transport=httpx.MockTransport(handler),
                        deadlines=DeadlinePolicy(floor_s=0.2, slack=1.0, cap_s=600, max_model_len=4096))

    async def scenario() -> None:
        assert await c.ping_completion("m") < 0.2
        hung.set()
        assert await c.list_models() == ["m"]
        with pytest.raises(TimeoutError):
            await c.ping_completion("m")

    asyncio.run(scenario())
    assert seen[0] == {"model": "m", "messages": [{"role": "user", "content": "ping"}], "max_tokens": 1}
    assert breaker.state is BreakerState.closed and c.requests_sent == 0  # neither the breaker nor the work


def _lossy_server(lost: set[str], seen: list[str], delay_s: dict[str, float] | None = None):
    """A server that never answers the first attempt of the requests whose "id" is in ``lost``
    (they are lost on it), and answers everything else (after ``delay_s[id]`` if given)."""
    async def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        rid = body.get("id", "ping" if body["messages"][0]["content"] == "ping" else "?")
        seen.append(rid)
        if rid in lost:
            lost.discard(rid)
            await asyncio.Event().wait()  # no answer, ever
        await asyncio.sleep((delay_s or {}).get(rid, 0.0))
        return httpx.Response(200, json=OK)
    return handler


def _slow_deadline_client(handler, concurrency: int) -> tuple[InferenceClient, WorkerMetrics, CircuitBreaker]:
    """Deadlines of 30 s: anything cut sooner was cut by the overtaken rule."""
    from worker.deadlines import DeadlinePolicy

    metrics, breaker = WorkerMetrics(), CircuitBreaker(5, 30.0)
    c = InferenceClient("http://server:8000", api_key="k", breaker=breaker, metrics=metrics,
                        concurrency=concurrency, request_timeout_s=600, max_retries=2,
                        backoff_initial_s=5.0, backoff_max_s=5.0, transport=httpx.MockTransport(handler),
                        deadlines=DeadlinePolicy(floor_s=30.0, slack=1.0, cap_s=600, max_model_len=4096))
    return c, metrics, breaker


def test_an_overdue_request_is_cut_and_retried_at_once_when_a_newer_one_is_answered(monkeypatch) -> None:
    """The server lost request A (it hung while A was sent, then recovered). Request B, sent
    after A, is answered while A is overdue: A is cancelled, counted as a timeout and sent
    again at once (no backoff) with the deadline it had, long before its 30 s deadline."""
    import worker.client as wc
    monkeypatch.setattr(wc, "HUNG_MIN_S", 0.2)
    monkeypatch.setattr(wc, "WATCH_INTERVAL_S", 3600.0)  # only B's answer is evidence here
    seen: list[str] = []
    c, metrics, breaker = _slow_deadline_client(_lossy_server({"a"}, seen), concurrency=2)
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 1}

    async def scenario() -> float:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        a = asyncio.ensure_future(c.post_chat({**body, "id": "a"}))
        await asyncio.sleep(0.3)  # A is overdue now (0.2 s)
        await c.post_chat({**body, "id": "b"})
        assert await a == OK
        return loop.time() - t0

    assert asyncio.run(scenario()) < 1.0  # neither A's 30 s deadline nor the 5 s backoff
    assert seen == ["a", "b", "a"]
    assert sample(metrics, "mineru_vllm_client_failures_total", endpoint=CHAT_PATH, kind="timeout") == 1
    assert sample(metrics, "mineru_vllm_client_deadline_seconds") == pytest.approx(30.0, abs=0.1)  # not doubled
    assert breaker.state is BreakerState.closed and c.timeouts == 0
    assert c.oldest_request_s() == 0.0 and "newer requests were answered" in c.last_failure


def test_a_request_not_yet_overdue_is_left_alone_by_newer_answers() -> None:
    """A newer answer says nothing about a request that has not waited past its due time
    (HUNG_MIN_S, 1 s here): A keeps its exchange and gets its own, slower answer."""
    seen: list[str] = []
    c, metrics, _b = _slow_deadline_client(_lossy_server(set(), seen, {"a": 0.4}), concurrency=2)
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 1}

    async def scenario() -> None:
        a = asyncio.ensure_future(c.post_chat({**body, "id": "a"}))
        await asyncio.sleep(0.05)
        await c.post_chat({**body, "id": "b"})
        assert await a == OK

    asyncio.run(scenario())
    assert seen == ["a", "b"]
    assert sample(metrics, "mineru_vllm_client_failures_total", endpoint=CHAT_PATH, kind="timeout") == 0


def test_a_lone_overdue_request_probes_the_server_and_is_retried_once_it_answers(monkeypatch) -> None:
    """With nothing else in flight, an overdue request asks for a 1-token completion on the
    probe pool; its answer proves the server back, so the request is cut and sent again. While
    the probes get no answer either (the server still hangs), the request keeps waiting."""
    import worker.client as wc
    monkeypatch.setattr(wc, "HUNG_MIN_S", 0.2)
    monkeypatch.setattr(wc, "WATCH_INTERVAL_S", 0.1)
    monkeypatch.setattr(wc, "PING_MIN_TIMEOUT_S", 0.3)
    seen: list[str] = []
    lost = {"a", "ping"}  # the first probe is lost too: no evidence from it
    c, metrics, _b = _slow_deadline_client(_lossy_server(lost, seen), concurrency=1)
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 1, "id": "a"}

    async def scenario() -> float:
        await c.post_chat({**body, "id": "warm"})  # a probe waits 2x the median answer (>= 0.3 s)
        seen.clear()
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        assert await c.post_chat(body) == OK
        took = loop.time() - t0
        await c.aclose()
        return took

    assert asyncio.run(scenario()) < 2.0
    assert seen[0] == "a" and seen[-1] == "a" and seen.count("ping") >= 2 and seen.count("a") == 2
    assert sample(metrics, "mineru_vllm_client_failures_total", endpoint=CHAT_PATH, kind="timeout") == 1
    assert c.requests_sent == 3  # the probes are not work requests


def test_a_probe_waits_twice_the_median_answer_not_a_whole_deadline() -> None:
    from worker.deadlines import DeadlinePolicy

    c, _m, _b = client(lambda r: httpx.Response(200, json=OK))
    c.deadlines = DeadlinePolicy(floor_s=30.0, slack=1.0, cap_s=600, max_model_len=4096)
    body = {"model": "m", "messages": [{"role": "user", "content": "ping"}], "max_tokens": 1}
    assert c.ping_timeout_s(body) == pytest.approx(c.deadlines.deadline_s(body))  # nothing measured
    c._elapsed.extend([0.01, 0.02, 0.03])
    assert c.ping_timeout_s(body) == 2.0  # at least PING_MIN_TIMEOUT_S
    c._elapsed.extend([4.0, 5.0, 6.0, 7.0])
    assert c.ping_timeout_s(body) == 8.0  # 2x the median
    c._elapsed.extend([100.0] * 10)
    assert c.ping_timeout_s(body) == pytest.approx(c.deadlines.deadline_s(body))  # at most the deadline


def test_a_lost_trial_does_not_reopen_a_recovering_breaker(monkeypatch) -> None:
    """The breaker is half-open and its trial request is lost on the server; the probe's answer
    cuts it: another trial goes at once (it answers, the breaker closes), no re-opening."""
    import worker.client as wc
    monkeypatch.setattr(wc, "HUNG_MIN_S", 0.2)
    monkeypatch.setattr(wc, "WATCH_INTERVAL_S", 0.1)
    seen: list[str] = []
    c, metrics, breaker = _slow_deadline_client(_lossy_server({"a"}, seen), concurrency=1)
    breaker._set(BreakerState.half_open)
    states: list[BreakerState] = []
    breaker.subscribe(states.append)
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 1, "id": "a"}

    async def scenario() -> None:
        assert await c.post_chat(body) == OK
        await c.aclose()

    asyncio.run(scenario())
    assert seen == ["a", "ping", "a"] and states == [BreakerState.closed]
    assert sample(metrics, "mineru_vllm_client_failures_total", endpoint=CHAT_PATH, kind="timeout") == 1
