"""Byte-level parity with the captured vLLM 0.32 responses (tests/unit/sim/data/)."""

from __future__ import annotations

import json
from pathlib import Path

from simulator import wire

DATA = Path(__file__).parent / "data"


def capture_body(name: str) -> bytes:
    raw = (DATA / name).read_bytes()
    return raw.split(b"\r\n\r\n", 1)[1] if raw.startswith(b"HTTP/") else raw


def test_streamed_chat_is_byte_identical_to_the_capture():
    captured = (DATA / "sse_chat_stream.txt").read_bytes()
    events = [json.loads(e[len(b"data: "):]) for e in captured.split(b"\n\n") if e and e != b"data: [DONE]"]
    first = events[0]
    texts = [e["choices"][0]["delta"]["content"] for e in events[1:-1]]
    stream = wire.ChatStream(first["model"], first["usage"]["prompt_tokens"], True, True, rid=first["id"],
                             created=first["created"])
    body = stream.role()
    for i, text in enumerate(texts[:-1]):
        body += stream.token(text, i + 1)
    body += stream.last(texts[-1], len(texts), "length")
    body += stream.final(len(texts))
    assert body == captured


def test_stream_without_usage_has_no_usage_keys_and_ends_with_done():
    s = wire.ChatStream("tiny", 5, include_usage=False, continuous_usage=False)
    assert b'"usage"' not in s.role() + s.token("a", 1) + s.last("b", 2, "stop")
    assert s.final(2) == b"data: [DONE]\n\n"


def test_include_usage_without_continuous_stats_sends_only_the_final_usage_chunk():
    s = wire.ChatStream("tiny", 5, include_usage=True, continuous_usage=False)
    assert b'"usage"' not in s.token("a", 1)
    final = s.final(2)
    assert json.loads(final.split(b"\n\n")[0][6:])["usage"] == {"prompt_tokens": 5, "total_tokens": 7,
                                                                 "completion_tokens": 2}
    assert final.endswith(b"data: [DONE]\n\n")


def test_non_streamed_chat_is_byte_identical_to_the_capture():
    captured = (DATA / "chat_nonstream.json").read_bytes()
    c = json.loads(captured)
    ours = wire.chat_response(c["model"], c["choices"][0]["message"]["content"], c["usage"]["prompt_tokens"],
                              c["usage"]["completion_tokens"], c["choices"][0]["finish_reason"], rid=c["id"],
                              created=c["created"])
    assert ours == captured


def test_models_listing_matches_the_capture_except_generated_ids():
    captured = json.loads(capture_body("models.json"))
    m = captured["data"][0]
    ours = json.loads(wire.models_response(m["id"], m["root"], m["max_model_len"], m["created"]))
    ours["data"][0]["permission"][0]["id"] = m["permission"][0]["id"]
    assert ours == captured
    assert ours["data"][0]["permission"][0]["id"].startswith("modelperm-")


def test_unauthorized_body_matches_the_capture():
    assert wire.UNAUTHORIZED == capture_body("models_noauth.txt")


def test_error_body_layout_matches_the_captures():
    body = json.loads(capture_body("error_bad_model.txt"))["error"]
    assert wire.error_body(body["message"], body["type"], body["code"], body["param"]) == capture_body(
        "error_bad_model.txt")


def test_ids_look_like_vllm_ids():
    s = wire.ChatStream("tiny", 1, False, False)
    assert s.rid.startswith("chatcmpl-") and len(s.rid) == len("chatcmpl-") + 16
    assert wire.CompletionStream("tiny", 1, False, False).rid.startswith("cmpl-")
