"""One run of a scenario against a target: prepare, scrape, load, scrape, summarise.

Returns records and a summary (metrics, validity, server diff, run facts); writing files is
left to bench/report so a sweep can run many of these and keep them in memory.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, cast

import httpx

from bench import engine, queue_checks, server_metrics, tokcheck
from bench.agreement import agreement, count_agreement
from bench.chat import ChatWorkload, prepare
from bench.engine import ProgressFn, RunResult
from bench.heap import frozen_heap
from bench.metrics import chat_summary, pipeline_summary, throughput_end
from bench.pipeline import PipelineWorkload, outputs_summary, pipeline_checks
from bench.promptlen import SERVER_TOKENIZE
from bench.records import AnyRecord, PipelineRecord, RequestRecord
from bench.scenario import ChatScenario, PipelineScenario
from bench.server_view import ServerView
from bench.summary import Check, FirstFailure, Observer, ServerDiff, Summary
from bench.target import Target, TargetError, mask_url
from bench.validity import ValidityLimits, check
from worker.queue import JobQueue


@dataclass
class RunOutput:
    records: list[AnyRecord]
    summary: Summary
    result: RunResult


def run_scenario(scn: ChatScenario | PipelineScenario, target: Target, *,
                 limits: ValidityLimits | None = None, progress: ProgressFn | None = None,
                 http: httpx.Client | None = None, max_model_len: int | None = None,
                 tokenizer: str | None = None,
                 shown: Callable[[], AbstractContextManager[ProgressFn | None]] | None = None) -> RunOutput:
    """``tokenizer``: the ``--tokenizer`` flag (overrides the scenario's) for the cross-check.
    ``shown``: a progress display opened only once the target passed its checks and the requests
    are prepared, so a refusal is never preceded by a progress line counting nothing."""
    limits = limits or scn.validity
    tok = tokcheck.for_run(scn, tokenizer)  # a bad path fails here, before anything is sent
    prompts = None
    prompt_source: str | None = None
    own = http is None
    http = http or httpx.Client(timeout=30.0)
    try:
        preflight(scn, target, http)
        if isinstance(scn, ChatScenario):
            prepared = prepare(scn, target, http, max_model_len, tokenizer=tok)
            prompt_source = prepared.prompt_source
            server_counts = prompt_source == SERVER_TOKENIZE
            # without /tokenize the run's tokenizer counts the prompts (and outputs without usage)
            workload: Any = ChatWorkload(target, prepared.requests, keep_output=scn.keep_output,
                                         keep_text_without_usage=tok is not None)
            if tok is not None and server_counts:  # counted now, before the clock starts: never in the send path
                prompts = tokcheck.count_prompts(tok[0], workload.prepared)
        else:
            workload = PipelineWorkload.build(scn, target)
            canary = pipeline_preflight(workload, target)  # stream, group, live workers; canary if deployed
        view = ServerView(target, http)  # the server's /metrics, or Prometheus for a deployed stack
        before = view.before()
        t_start = time.time()
        with (shown() if shown is not None else nullcontext(progress)) as cb, \
                view.sampler(getattr(scn, "server_gauge_interval_s", 1.0)) as sampler:
            result = engine.run(workload, scn.load, cb)
        after = view.after()
    finally:
        if own:
            http.close()
    server = server_metrics.diff(before, after)
    observer: Observer | None = None
    if isinstance(scn, ChatScenario):
        # what the run asked of the server beyond its requests (docs/bench-metrics.md, "What the
        # bench costs the server"): the report states it beside the figures
        interval = scn.server_gauge_interval_s if sampler.reads else 0.0
        observer = {"continuous_usage_stats": scn.continuous_usage_stats, "server_gauge_interval_s": interval,
                    "server_metrics_reads": sampler.reads}
        observer["text"] = observer_text(observer)
    if server is not None:
        server["sampled"] = sampler.summary()  # max/mean of gauges scraped every second
        server["samples"] = sampler.samples
        server["source"] = view.source
    extra = None
    if isinstance(scn, PipelineScenario):
        extra = pipeline_checks(cast(list[PipelineRecord], result.records))  # the workload's own records
    if isinstance(scn, ChatScenario) and tok is not None:  # answers without usage: counted now, after the run
        chats = cast(list[RequestRecord], result.records)
        count_outputs_without_usage(tok[0], chats, keep_text=scn.keep_output)
    with frozen_heap():  # the libraries and the records out of collections (bench/heap.py)
        summary = summarize(scn, target, result, limits, t_start, server, extra)
    if isinstance(scn, PipelineScenario):
        pipeline_records = cast(list[PipelineRecord], result.records)
        summary["pipeline"] = {**outputs_summary(pipeline_records, workload), **canary}
    summary["server_source"] = view.source
    if isinstance(scn, ChatScenario):
        summary["tokens"]["prompt_source"] = prompt_source
        summary["tokens"]["output_source"] = output_sources(cast(list[RequestRecord], result.records))
        summary["tokens"]["continuous_usage_stats"] = scn.continuous_usage_stats
        summary["observer"] = observer
        if not scn.continuous_usage_stats:
            summary["tokens"]["merged_event_requests"] = merged_event_requests(
                cast(list[RequestRecord], result.records))
    if tok is not None and prompts is not None:  # outputs counted after the run, from the records
        summary["tokenizer_crosscheck"] = tokcheck.crosscheck(tok[0], prompts, result.records, tok[1])
    return RunOutput(result.records, summary, result)


def count_outputs_without_usage(tok: tokcheck.ClientTokenizer, records: list[RequestRecord],
                                keep_text: bool) -> int:
    """Output tokens of answers that came without ``usage``, counted with the run's tokenizer
    from their text (``output_tokens_source`` "tokenizer"); the text is dropped again unless the
    scenario keeps it. Returns how many were counted."""
    todo = [r for r in records if r.output_tokens_source != "usage" and r.output_text is not None]
    for r, n in zip(todo, tok.count_texts([r.output_text or "" for r in todo])):
        r.output_tokens, r.output_tokens_source = n, "tokenizer"
        if not keep_text:
            r.output_text = None
    return len(todo)


def observer_text(o: Observer) -> str:
    """What the run asked of the server beyond its requests, and what that costs it (measured by
    benchmarks/bench_observer_effect.py; docs/bench-metrics.md)."""
    usage = ("usage on every streamed event (continuous_usage_stats: the server serialises usage per "
             "token; costs it time per event)" if o["continuous_usage_stats"] else
             "usage at the end only (as other tools ask)")
    reads = (f"its /metrics read {o['server_metrics_reads']} times during the run (every "
             f"{o['server_gauge_interval_s']:g} s; each read renders the whole exposition on the server's API loop)"
             if o["server_metrics_reads"] else "its /metrics not read during the run")
    return f"asked of the server beyond the requests: {usage}; {reads}, and once before and after"


def merged_event_requests(records: list[RequestRecord]) -> int:
    """Answers whose final usage counted more tokens than their events with text (usage on the last
    event only): the server put several tokens into some event, and without per-event usage the
    bench credits the difference to the last event, so those answers' ITL is approximate."""
    return sum(1 for r in records if r.event_tokens and r.event_tokens[-1] > 1)


def output_sources(records: list[RequestRecord]) -> dict[str, int]:
    """How many answers' output token counts came from where (usage, tokenizer, events)."""
    out: dict[str, int] = {}
    for r in records:
        if r.output_tokens_source is not None:
            out[r.output_tokens_source] = out.get(r.output_tokens_source, 0) + 1
    return out


# Each preflight request waits at most this long: the checks (health, key, model name) finish in
# about 2 s even against an address that drops packets, before any progress line is drawn.
PREFLIGHT_TIMEOUT = httpx.Timeout(1.0)


def _fix_for(target: Target) -> str:
    """What to do about a server that does not answer: the stack's commands for a stack's server,
    the URL's own checks for a server given with --url."""
    if target.stack:
        return "start it (`splitstack up`) or check `splitstack status`"
    return (f"check the URL and that the server is up (`curl {target.base_url}/health`); give the server's "
            "base URL, without /v1")


def preflight(scn: ChatScenario | PipelineScenario, target: Target, http: httpx.Client) -> None:
    """Refuse to start against a target that is down, refuses the key or does not serve the model:
    a run of errors is not a measurement. A ``/health`` behind the API key (401/403) or missing
    (404/405, hosted APIs and proxies) is judged by the model list instead."""
    if target.base_url is None:  # a deployed stack's queue: the workers, not the bench, call the server
        if isinstance(scn, ChatScenario):
            raise TargetError(f"the chat scenario sends to the inference server: pass its URL with --url "
                              f"(stack {target.deployment!r} is reached only through its queue). Nothing was sent.")
        return
    try:
        r = http.get(f"{target.base_url}/health", timeout=PREFLIGHT_TIMEOUT)
        healthy = r.status_code == 200 or r.status_code in (401, 403, 404, 405)
        detail = f"/health returned {r.status_code}"
    except httpx.HTTPError as exc:
        healthy, detail = False, f"{type(exc).__name__}: {exc or 'no answer'}"
    if not healthy:
        where = f"stack {target.stack!r}" if target.stack else "--url"
        raise TargetError(f"the inference server of {where} at {target.base_url} is not healthy ({detail}); "
                          f"{_fix_for(target)}. Nothing was sent.")
    check_auth(target, http)


def check_auth(target: Target, http: httpx.Client) -> None:
    """One authenticated request before any load (``GET /v1/models`` with the run's key): a key the
    server refuses would turn the whole run into 401s, so 401/403 stop it here, naming the
    variable the key comes from; a model the server does not serve stops it naming the ones it
    does. Other answers (404 from a proxy without a model list, 5xx) are left to the run."""
    url = f"{target.base_url}/v1/models"
    try:
        r = http.get(url, headers=target.headers, timeout=PREFLIGHT_TIMEOUT)
    except httpx.HTTPError as exc:
        raise TargetError(f"GET {url} got no answer ({type(exc).__name__}: {exc or 'timed out'}); "
                          f"{_fix_for(target)}. Nothing was sent.") from None
    if r.status_code == 200:
        check_model(target, url, r)
        return
    if r.status_code not in (401, 403):
        return
    var = target.api_key_env
    if target.api_key:
        what = (f"refused the API key from ${var}" if var else "refused the API key") + f" ({r.status_code})"
        fix = (f"set {var} to the server's key" if var else "pass the server's key with --api-key-env VAR")
        if target.stack:
            fix += (f" (or unset it: stack {target.stack!r} keeps the key it was started with in its state "
                    "dir's secrets)")
    else:
        what = f"needs an API key ({r.status_code} without one)"
        fix = (f"export {var} with the server's key" if var else
               "export the key in a variable and pass --api-key-env VAR")
    raise TargetError(f"GET {url} {what}: every request of the run would fail the same way; {fix}. "
                      "Nothing was sent.")


def check_model(target: Target, url: str, answer: httpx.Response) -> None:
    """The model the run asks for is one the server lists (OpenAI's ``{"data": [{"id": ...}]}``);
    a list of another shape is not judged."""
    try:
        served = [m["id"] for m in answer.json()["data"]]
    except (ValueError, KeyError, TypeError):
        return
    if served and target.model not in served:
        named = f"named by stack {target.stack!r}'s spec" if target.stack else "given with --model"
        raise TargetError(f"{url} does not serve the model {target.model!r} ({named}); it serves: "
                          f"{', '.join(map(str, served))}: pass one of those with --model. Nothing was sent.")


def pipeline_preflight(workload, target: Target) -> dict[str, Any]:
    """The queue's checks (bench/queue_checks.py); on a deployed stack also one canary document,
    which proves the workers can read the bench's PDFs and, with --outputs-at, that the bench
    can read their outputs. Returns facts for the summary."""
    import asyncio

    import redis
    import redis.asyncio as aioredis

    queue_url = target.queue_url
    if queue_url is None:
        raise TargetError(f"stack {target.stack!r} lists no queue URL in its state file (no running queue "
                          "component); start it with `splitstack up`, or give --queue-url. Nothing was sent.")
    spec = target.stack_spec()
    client = redis.Redis.from_url(queue_url, decode_responses=True, socket_connect_timeout=5,
                                  socket_timeout=10)
    try:
        state = queue_checks.inspect_queue(client, spec, mask_url(queue_url), workload.stream, workload.group)
    finally:
        client.close()
    facts: dict[str, Any] = {"queue_at_start": state.as_dict()}
    if target.deployment is None:
        return facts

    doc = workload.documents[0]

    async def canary() -> dict[str, Any]:
        ac = aioredis.Redis.from_url(queue_url, decode_responses=True)
        try:
            q = JobQueue(ac, workload.stream, workload.group, workload.dead_letter_stream, "bench-canary")
            return await queue_checks.run_canary(q, ac, doc.source, workload.stall_timeout_s,
                                                 workload.job_timeout_s, state.describe())
        finally:
            await ac.aclose()

    rec = asyncio.run(canary())
    queue_checks.judge_canary(rec, doc.source, workload.folder, workload.output_dir, target.documents_at,
                              workload.store)
    facts["canary"] = {"job_id": rec["job_id"], "state": rec.get("state"), "latency_s": rec["latency_s"]}
    return facts


def summarize(scn: ChatScenario | PipelineScenario, target: Target, result: RunResult, limits: ValidityLimits,
              t_start: float, server: ServerDiff | None,
              extra_checks: list[Check] | None = None) -> Summary:
    """Metrics, validity, server diff and run facts of a finished run (also for Locust runs)."""
    end_ns = result.measure_end_ns if result.measure_end_ns is not None else result.measure_start_ns
    t_end = throughput_end(result.records, end_ns, result.load.cooldown_s)
    if isinstance(scn, ChatScenario):
        records = cast(list[RequestRecord], result.records)  # a chat run records RequestRecords only
        summary = chat_summary(records, result.measure_start_ns, end_ns, scn.slo, t_end)
    else:
        pipeline_records = cast(list[PipelineRecord], result.records)
        summary = pipeline_summary(pipeline_records, result.measure_start_ns, end_ns, t_end)
    summary["first_failures"] = first_failures(result.records)
    summary["validity"] = check(result, summary, limits)
    if extra_checks:
        summary["validity"]["checks"].extend(extra_checks)
        summary["validity"]["valid"] = all(c["passed"] for c in summary["validity"]["checks"])
    summary["server"] = server
    summary["agreement"] = agreement(result.records, server)
    summary["count_agreement"] = count_agreement(result.records, server)
    summary["run"] = {
        "scenario": scn.name, "scenario_kind": scn.kind, "target": target.base_url,
        "queue": target.queue_label, "deployment": target.deployment, "topology": target.topology,
        "model": target.model, "stack": target.stack, "load": result.load.model_dump(),
        "load_label": result.load.target_label, "started_at_unix_s": t_start,
        "wall_s": result.wall_s, "measure_start_ns": result.measure_start_ns, "measure_end_ns": end_ns,
        "client": {"processes": [vars(p) for p in result.processes],
                   "cpu_s": sum(p.cpu_s for p in result.processes),
                   "cpu_s_per_1k_requests": (1000 * sum(p.cpu_s for p in result.processes)
                                             / max(1, len(result.records))),
                   "host": platform.node(), "python": platform.python_version()},
    }
    return summary


def first_failures(records: list[AnyRecord], most: int = 3) -> list[FirstFailure]:
    """The first failures of distinct reasons, in the order they were sent, with their detail
    (which carries the fix where the failure knows one): what a person reads first."""
    seen: dict[str, FirstFailure] = {}
    for r in sorted((r for r in records if r.error is not None), key=lambda r: r.sent_ns):
        if r.error is not None and r.error not in seen:
            seen[r.error] = {"error": r.error, "detail": r.error_detail, "at_s": round(r.sent_ns / 1e9, 3),
                             "request_id": r.request_id}
            if len(seen) == most:
                break
    return list(seen.values())
