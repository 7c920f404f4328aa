"""Locust users that send a bench ``chat`` scenario's prepared requests.

Started by ``bench locust run|master|worker`` (splitstack/cli/bench_locust.py, through
bench/locust/launch.py), which set:
  BENCH_SCENARIO      scenario name or YAML path (processes that run users)
  BENCH_TARGET_JSON   {"base_url", "model", "api_key_env", "max_model_len", "tokenizer"} (processes that
                      run users)
  BENCH_RECORDS_DIR   headless process or master: folder for the per-request JSONL (bench
                      RequestRecord format); workers ship their records to the master (collect.py)
  BENCH_DRAIN_TIMEOUT_S, BENCH_FLUSH_INTERVAL_S   see bench/locust/settings.py
  BENCH_READY_FILE    worker: written once connected to the master and prepared
and two Locust options, ``--bench-rate-rps`` (total arrival rate shared by all users, each on
its own fixed schedule; without it the users form a closed loop) and ``--bench-users``; given to
the master, Locust forwards them to every worker, so worker machines need no load settings of
their own.

Besides the normal request statistic ("chat"), TTFT, TPOT and ITL are fired as custom request
events, so Locust's own tables and CSVs show them (a master aggregates its workers' events).
Timestamps: wall-clock ns at send (so records from several machines share a time base, up to
clock sync) plus monotonic deltas for every latency (so no latency depends on clock sync).
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import time
from pathlib import Path

import gevent.event
import orjson
from locust import HttpUser, events, task
from locust.exception import StopUser
from locust.runners import MasterRunner, WorkerRunner

from bench.chat import prepare
from bench.locust.collect import READY_MARK, Collector
from bench.locust.settings import LocustSettings
from bench.metric_table import derive, itl_gaps_ms
from bench.records import RequestRecord
from bench.scenario import load_chat_scenario
from bench.sse import SSESplitter, decode_chat_events
from bench.target import from_url
from bench.tokcheck import for_run

_CFG = json.loads(os.environ.get("BENCH_TARGET_JSON", "{}"))
_STATE: dict = {}
# a worker's message loop runs while init prepares: users that a spawn message starts early wait here
_PREPARED = gevent.event.Event()


@events.init_command_line_parser.add_listener
def _options(parser) -> None:
    parser.add_argument("--bench-rate-rps", type=float, default=0.0,
                        help="bench: total requests/s over all users and workers (0 = closed loop)")
    parser.add_argument("--bench-users", type=int, default=1, help="bench: users over all workers (splits the rate)")


@events.init.add_listener
def _prepare(environment, **_kw) -> None:
    settings = LocustSettings.from_env(dict(os.environ))
    worker = isinstance(environment.runner, WorkerRunner)
    records = None if worker else Path(os.environ.get("BENCH_RECORDS_DIR", "locust-records"))
    _STATE["collector"] = Collector(environment, records, settings.drain_timeout_s, settings.flush_interval_s)
    if isinstance(environment.runner, MasterRunner):
        return  # the master sends nothing: no scenario, no /tokenize
    if not _CFG:
        raise RuntimeError("BENCH_TARGET_JSON is not set: run this file through `bench locust run` "
                           "(or `bench locust worker` on a worker machine)")
    scn = load_chat_scenario(os.environ["BENCH_SCENARIO"])
    target = from_url(_CFG["base_url"], _CFG["model"], _CFG.get("api_key_env"), _CFG.get("max_model_len"))
    # exact prompt lengths via /tokenize, else the run's --tokenizer; the context guard
    _STATE["prepared"] = prepare(scn, target, tokenizer=for_run(scn, _CFG.get("tokenizer"))).requests
    _STATE["headers"] = target.headers
    _STATE["counter"] = itertools.count()
    _STATE["tag"] = f"{socket.gethostname()}-{os.getpid()}"
    _PREPARED.set()
    if worker and os.environ.get("BENCH_READY_FILE"):  # init fires only once the master answered
        Path(os.environ["BENCH_READY_FILE"]).write_text(READY_MARK + "\n")


def _fire(environment, name: str, ms: float | None, exc: Exception | None = None) -> None:
    if ms is not None:
        environment.events.request.fire(request_type="METRIC", name=name, response_time=ms,
                                         response_length=0, exception=exc, context={})


class ChatUser(HttpUser):
    # rate mode: each user sends on its own fixed schedule, one request every period, so the
    # records get a real intended send time and the schedule lag shows when users cannot keep up
    # (a request slower than the period); without a rate, a closed loop (intended = sent)
    _next_ns: int | None = None

    def _period_ns(self) -> int | None:
        opts = self.environment.parsed_options
        rate = getattr(opts, "bench_rate_rps", 0.0) or 0.0
        return int(1e9 * max(1, opts.bench_users) / rate) if rate > 0 else None

    def wait_time(self) -> float:
        if self._next_ns is None:
            return 0.0
        return max(0.0, (self._next_ns - time.time_ns()) / 1e9)

    def on_start(self) -> None:
        _PREPARED.wait()

    @task
    def chat(self) -> None:
        col: Collector = _STATE["collector"]
        if col.draining:  # end of run: nothing new, so every request the server sees gets recorded
            raise StopUser()
        col.in_flight += 1
        try:
            self._send(col)
        finally:
            col.in_flight -= 1

    def _send(self, col: Collector) -> None:
        i = next(_STATE["counter"])
        req = _STATE["prepared"][i % len(_STATE["prepared"])]
        wall0 = time.time_ns()
        m0 = time.monotonic_ns()
        period = self._period_ns()
        intended = wall0 if period is None or self._next_ns is None else self._next_ns
        if period is not None:
            self._next_ns = intended + period
        rec = RequestRecord(request_id=f"{_STATE['tag']}-{i}", phase="measure", intended_ns=intended, sent_ns=wall0,
                            wall_sent_s=wall0 / 1e9, prompt_tokens=req.prompt_tokens, max_tokens=req.max_tokens,
                            process=col.process)
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
                    rec.event_ns, rec.event_tokens = res.event_ns, res.event_tokens
                    rec.event_content = res.event_content
                    rec.output_tokens, rec.server_prompt_tokens = res.output_tokens, res.prompt_tokens
                    rec.finish_reason, rec.response_id = res.finish_reason, res.response_id
                    if res.error:
                        rec.error = res.error
                        resp.failure(res.error)
                rec.end_ns = wall0 + time.monotonic_ns() - m0
        except Exception as exc:  # noqa: BLE001 - any transport error is recorded by class name, like the engine
            rec.end_ns = wall0 + time.monotonic_ns() - m0
            rec.error, rec.error_detail = type(exc).__name__, str(exc)[:300]
        col.add(orjson.dumps(rec.model_dump(mode="json")) + b"\n")
        if rec.ok:
            d = derive(rec)
            _fire(self.environment, "TTFT", d.ttft_ms)
            _fire(self.environment, "TPOT", d.tpot_ms)
            gaps = itl_gaps_ms(rec)
            if gaps:
                _fire(self.environment, "ITL (mean per request)", sum(gaps) / len(gaps))
