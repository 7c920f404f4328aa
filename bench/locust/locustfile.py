"""Locust users that send a bench ``chat`` scenario's prepared requests.

Configured through the environment by ``bench locust`` (or by hand on worker machines):
  BENCH_SCENARIO      scenario name or YAML path
  BENCH_TARGET_JSON   {"base_url", "model", "api_key_env", "max_model_len"}
  BENCH_RECORDS_DIR   folder for this process's per-request JSONL (bench RequestRecord format)
  BENCH_RATE_RPS      optional: total arrival rate shared by all users (constant throughput);
                      without it the users form a closed loop (each sends when the last finished)
  BENCH_USERS         number of users (to split BENCH_RATE_RPS), default 1

Besides the normal request statistic ("chat"), TTFT, TPOT and ITL are fired as custom request
events, so Locust's own tables and CSVs show them. Timestamps: wall-clock ns at send (so records
from several machines share a time base, up to clock sync) plus monotonic deltas for every
latency (so no latency depends on clock sync).
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import time
from pathlib import Path

import orjson
from locust import HttpUser, constant, constant_throughput, events, task

from bench.chat import prepare
from bench.metrics import derive, itl_gaps_ms
from bench.records import RequestRecord
from bench.scenario import load_scenario
from bench.sse import SSESplitter, decode_chat_events
from bench.target import from_url

_CFG = json.loads(os.environ.get("BENCH_TARGET_JSON", "{}"))
_STATE: dict = {}


@events.init.add_listener
def _prepare(environment, **_kw) -> None:
    if not _CFG:
        raise RuntimeError("BENCH_TARGET_JSON is not set: run this file through `bench locust run`")
    scn = load_scenario(os.environ["BENCH_SCENARIO"])
    target = from_url(_CFG["base_url"], _CFG["model"], _CFG.get("api_key_env"), _CFG.get("max_model_len"))
    _STATE["prepared"] = prepare(scn, target)  # exact prompt lengths via /tokenize, context guard
    _STATE["headers"] = target.headers
    _STATE["counter"] = itertools.count()
    folder = Path(os.environ.get("BENCH_RECORDS_DIR", "locust-records"))
    folder.mkdir(parents=True, exist_ok=True)
    _STATE["out"] = open(folder / f"records-{socket.gethostname()}-{os.getpid()}.jsonl", "ab")
    _STATE["tag"] = f"{socket.gethostname()}-{os.getpid()}"


def _fire(environment, name: str, ms: float | None, exc: Exception | None = None) -> None:
    if ms is not None:
        environment.events.request.fire(request_type="METRIC", name=name, response_time=ms,
                                         response_length=0, exception=exc, context={})


def _wait_time():
    rate = float(os.environ.get("BENCH_RATE_RPS", "0") or 0)
    users = max(1, int(os.environ.get("BENCH_USERS", "1")))
    return constant_throughput(rate / users) if rate > 0 else constant(0)


class ChatUser(HttpUser):
    wait_time = _wait_time()

    @task
    def chat(self) -> None:
        i = next(_STATE["counter"])
        req = _STATE["prepared"][i % len(_STATE["prepared"])]
        wall0 = time.time_ns()
        m0 = time.monotonic_ns()
        rec = RequestRecord(request_id=f"{_STATE['tag']}-{i}", phase="measure", intended_ns=wall0, sent_ns=wall0,
                            wall_sent_s=wall0 / 1e9, prompt_tokens=req.prompt_tokens, max_tokens=req.max_tokens)
        splitter = SSESplitter()
        try:
            with self.client.post("/v1/chat/completions", data=req.body, headers=_STATE["headers"], stream=True,
                                  catch_response=True, name="chat") as resp:
                rec.headers_ns = wall0 + time.monotonic_ns() - m0
                rec.status = resp.status_code
                if resp.status_code != 200:
                    rec.error, rec.error_detail = f"http_{resp.status_code}", resp.text[:300]
                    resp.failure(rec.error)
                else:
                    for chunk in resp.iter_content(chunk_size=None):
                        splitter.feed(chunk, wall0 + time.monotonic_ns() - m0)
                    res = decode_chat_events(splitter.events)
                    rec.event_ns, rec.event_tokens, rec.event_content = res.event_ns, res.event_tokens, res.event_content
                    rec.output_tokens, rec.server_prompt_tokens = res.output_tokens, res.prompt_tokens
                    rec.finish_reason = res.finish_reason
                    if res.error:
                        rec.error = res.error
                        resp.failure(res.error)
                rec.end_ns = wall0 + time.monotonic_ns() - m0
        except Exception as exc:  # transport errors: recorded by class name, like the asyncio engine
            rec.end_ns = wall0 + time.monotonic_ns() - m0
            rec.error, rec.error_detail = type(exc).__name__, str(exc)[:300]
        _STATE["out"].write(orjson.dumps(rec.model_dump(mode="json")) + b"\n")
        _STATE["out"].flush()
        if rec.ok:
            d = derive(rec)
            _fire(self.environment, "TTFT", d.ttft_ms)
            _fire(self.environment, "TPOT", d.tpot_ms)
            gaps = itl_gaps_ms(rec)
            if gaps:
                _fire(self.environment, "ITL (mean per request)", sum(gaps) / len(gaps))
