"""GET/DELETE /sim/timings in-process: per-request server stamps keyed by response id and X-Request-Id."""

from __future__ import annotations

import json
import time

import pytest

from simulator.timings import TIMED_PATHS, RequestTiming, TimingLog

from .sim_helpers import sim_client

pytestmark = pytest.mark.anyio
AUTH = {"Authorization": "Bearer sekret"}
STREAM = {"stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}


def chat(content="hello there", **kw) -> dict:
    return {"model": "tiny", "messages": [{"role": "user", "content": content}], **kw}


def ordered(t: dict) -> bool:
    return t["arrival_ns"] <= t["asgi_ns"] <= t["first_chunk_ns"] <= t["first_token_ns"] <= t["end_ns"]


async def test_streamed_chat_is_recorded_by_response_id_and_request_id():
    async with sim_client() as (_, c):
        before = time.monotonic_ns()
        r = await c.post("/v1/chat/completions", json=chat(max_tokens=8, **STREAM), headers={"X-Request-Id": "p0-7"})
        after = time.monotonic_ns()
        events = [json.loads(e[6:]) for e in r.text.split("\n\n") if e.startswith("data: {")]
        body = (await c.get("/sim/timings")).json()
    assert body["clock"] == "CLOCK_MONOTONIC" and body["unit"] == "ns" and body["last_seq"] == 1
    [t] = body["timings"]
    assert t["response_id"] == events[0]["id"] and t["response_id"].startswith("chatcmpl-")
    assert t["request_id"] == "p0-7" and t["path"] == "/v1/chat/completions" and t["status"] == 200
    assert before <= t["arrival_ns"] and t["end_ns"] <= after and ordered(t)
    # the role chunk (no token) goes out first; the first token write also carries the first text
    assert t["first_chunk_ns"] < t["first_token_ns"] == t["first_content_ns"]
    assert t["seq"] == 1


async def test_non_streamed_completion_and_errors_are_recorded():
    async with sim_client() as (_, c):
        r = await c.post("/v1/completions", json={"model": "tiny", "prompt": "a b c", "max_tokens": 4})
        bad = await c.post("/v1/chat/completions", json=chat(max_tokens=-1))
        assert bad.status_code == 400
        await c.get("/v1/models")  # not an inference request: not recorded
        timings = (await c.get("/sim/timings")).json()["timings"]
    ok, err = timings
    assert ok["response_id"] == r.json()["id"] and ok["response_id"].startswith("cmpl-") and ok["request_id"] is None
    assert ok["first_chunk_ns"] == ok["first_token_ns"] == ok["first_content_ns"] > 0 and ordered(ok)
    assert err["status"] == 400 and err["response_id"] is None and err["first_token_ns"] == 0 and err["end_ns"] > 0


async def test_since_clear_and_delete():
    async with sim_client() as (_, c):
        for _ in range(3):
            await c.post("/v1/chat/completions", json=chat(max_tokens=2))
        assert [t["seq"] for t in (await c.get("/sim/timings?since=1")).json()["timings"]] == [2, 3]
        assert (await c.get("/sim/timings?since=3")).json()["timings"] == []
        r = await c.get("/sim/timings?since=2&clear=true")
        assert [t["seq"] for t in r.json()["timings"]] == [3]
        assert (await c.get("/sim/timings")).json()["timings"] == []
        await c.post("/v1/chat/completions", json=chat(max_tokens=2))
        assert (await c.delete("/sim/timings")).json() == {"cleared": 1}
        body = (await c.get("/sim/timings")).json()
        assert body["timings"] == [] and body["last_seq"] == 4  # numbering continues after a clear
        r = await c.get("/sim/timings?since=abc")
        assert r.status_code == 400 and r.json()["error"]["message"] == (
            "since='abc' is not an integer: pass the last_seq of a previous GET /sim/timings answer "
            "(or 0 for everything kept)")
        r = await c.get("/sim/timings?clear=yes")
        assert r.status_code == 400 and "clear='yes': use clear=true or clear=false" in r.text


async def test_ring_keeps_the_newest_and_counts_dropped():
    async with sim_client(timings_max_entries=2) as (_, c):
        for _ in range(5):
            await c.post("/v1/chat/completions", json=chat(max_tokens=2))
        body = (await c.get("/sim/timings")).json()
    assert [t["seq"] for t in body["timings"]] == [4, 5]
    assert body["dropped"] == 3 and body["recorded"] == 5 and body["max_entries"] == 2


async def test_zero_entries_records_nothing():
    async with sim_client(timings_max_entries=0) as (app, c):
        await c.post("/v1/chat/completions", json=chat(max_tokens=2))
        body = (await c.get("/sim/timings")).json()
    assert body["timings"] == [] and body["recorded"] == 0 and not app.timings.enabled


async def test_timings_need_the_api_key_like_other_sim_endpoints():
    async with sim_client(api_key="sekret") as (_, c):
        assert (await c.get("/sim/timings")).status_code == 401
        assert (await c.delete("/sim/timings")).status_code == 401
        assert (await c.get("/sim/timings", headers=AUTH)).status_code == 200


async def test_recording_does_not_change_the_bytes():
    # same seed, same request: identical bodies apart from the random id and the created time
    bodies = []
    for size in (0, 10):
        async with sim_client(timings_max_entries=size) as (_, c):
            r = await c.post("/v1/chat/completions", json=chat(max_tokens=5, temperature=0, **STREAM))
            bodies.append([{k: v for k, v in json.loads(e[6:]).items() if k not in ("id", "created")}
                           for e in r.text.split("\n\n") if e.startswith("data: {")])
    assert bodies[0] == bodies[1]


def test_arrival_from_the_protocol_wins_over_the_app_stamp():
    log = TimingLog(4)
    scope = {"path": "/v1/completions", "headers": [(b"x-request-id", b"r1")],
             "extensions": {"splitstack.arrival_ns": 123}}
    t = log.start(scope)
    assert isinstance(t, RequestTiming) and t.arrival_ns == 123 and t.asgi_ns > 123 and t.request_id == "r1"
    assert log.start({"path": "/v1/completions", "headers": []}).arrival_ns > 0
    assert TIMED_PATHS == {"/v1/chat/completions", "/v1/completions"}


def test_ended_entries_are_not_scanned_by_the_garbage_collector():
    """Full collections scanning 100k timing objects stalled the simulator's loop 50-100 ms."""
    import gc

    log = TimingLog(100)
    for _ in range(3):
        t = log.start({"path": "/v1/chat/completions", "headers": [(b"x-request-id", b"r")]})
        t.response_id = "chatcmpl-1"
        log.finish(t, 200)
    gc.collect()
    assert not any(gc.is_tracked(e) for e in log.entries)
    assert [e["seq"] for e in log.since(1)] == [2, 3] and log.since(0)[0]["response_id"] == "chatcmpl-1"
