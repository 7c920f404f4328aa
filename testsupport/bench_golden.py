"""A fixed set of records (chat and pipeline, every phase, errors, multi-token and reasoning
events, a non-streamed answer) and what the bench derives from them: the summaries, the report's
CSV rows, ``bench compare`` and the gates' samples. tests/unit/bench/fixtures/golden_outputs.json
holds what the code wrote when the metric table was introduced; test_bench_summary_golden.py
checks that today's code writes the same bytes."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from bench.compare import compare
from bench.gating.models import latency_values
from bench.metrics import chat_summary, pipeline_summary
from bench.records import PipelineRecord, RequestRecord
from bench.report.compare_html import figures as compare_figures
from bench.report.html import figures
from bench.report.series import build
from bench.scenario import RequestSLO

MS = 1_000_000
S = 1_000_000_000


def chat_records(seed: int, scale: float = 1.0) -> list[RequestRecord]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(160):
        intended = int(i * 0.5 * S)
        sent = intended + int(rng.integers(0, 3 * MS))
        phase = "warmup" if i < 10 else "cooldown" if i >= 150 else "measure"
        e2e = int(scale * float(rng.lognormal(np.log(400), 0.3)) * MS)
        ttft = e2e // 5
        n = int(rng.integers(1, 12))
        ev = [sent + ttft + (e2e - ttft) * k // (n + 1) for k in range(n)]
        toks = [int(x) for x in rng.integers(1, 3, size=n)] if i % 3 == 0 else [1] * n
        content = [k > 0 or i % 4 != 0 for k in range(n)]  # every 4th: a reasoning token first
        kw: dict[str, Any] = dict(request_id=f"p{i % 2}-{i}", phase=phase, process=i % 2, intended_ns=intended,
                                  sent_ns=sent, wall_sent_s=1.7e9 + sent / 1e9, headers_ns=sent + 2 * MS,
                                  prompt_tokens=100 + i % 7, max_tokens=64)
        if i % 17 == 5:
            out.append(RequestRecord(**kw, end_ns=sent + 3 * MS, status=503, error="http_503",
                                     error_detail="busy"))
        elif i % 29 == 7:
            out.append(RequestRecord(**kw, end_ns=None, error="timeout", error_detail="no answer"))
        elif i % 23 == 3:  # not streamed: the whole answer at the headers
            out.append(RequestRecord(**kw, event_ns=[sent + 2 * MS], event_tokens=[n], event_content=[True],
                                     end_ns=sent + 2 * MS + 1000, status=200, output_tokens=n,
                                     server_prompt_tokens=100 + i % 7, output_tokens_source="usage",
                                     finish_reason="length"))
        else:
            out.append(RequestRecord(**kw, event_ns=ev, event_tokens=toks, event_content=content,
                                     end_ns=sent + e2e, status=200, output_tokens=sum(toks),
                                     server_prompt_tokens=100 + (i % 7 if i % 11 else 1),
                                     output_tokens_source="usage", finish_reason="stop",
                                     response_id=f"chatcmpl-{i}"))
    return out


def pipeline_records(seed: int) -> list[PipelineRecord]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(60):
        intended = i * 2 * S
        sent = intended + int(rng.integers(0, 5 * MS))
        phase = "warmup" if i < 5 else "cooldown" if i >= 55 else "measure"
        lat = int(float(rng.lognormal(np.log(20), 0.4)) * S)
        kw: dict[str, Any] = dict(request_id=f"job-{i}", phase=phase, document=f"doc{i % 4}.pdf", pages=1 + i % 4,
                                  intended_ns=intended, sent_ns=sent, wall_sent_s=1.7e9 + sent / 1e9)
        if i % 13 == 4:
            out.append(PipelineRecord(**kw, status="failed", error="dead_lettered:parse", end_ns=sent + lat))
        elif i % 19 == 6:
            out.append(PipelineRecord(**kw, status="timeout", error="timeout"))
        else:
            out.append(PipelineRecord(**kw, status="done", end_ns=sent + lat, server_requests=3 + i % 4,
                                      output_sha256=f"{i:064x}", processing_s=lat / S * 0.9,
                                      worker_pages=1 + i % 4, output_verified=True))
    return out


def _summary(kind: str, records: list, start: int, end: int) -> dict[str, Any]:
    if kind == "chat":
        s = chat_summary(records, start, end, RequestSLO(ttft_ms=120, e2e_ms=600), end + S // 2)
    else:
        s = pipeline_summary(records, start, end, end + 3 * S)
    s["run"] = {"scenario": "golden", "load": {"mode": "open"}, "measure_start_ns": start, "measure_end_ns": end}
    return s


def _figures(figs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What each plotly figure shows: its title and its traces in legend order (name, colour,
    points, sum of x)."""
    def trace(t: dict[str, Any]) -> list[Any]:
        xs = [x for x in t.get("x") or [] if isinstance(x, int | float)]
        return [str(t.get("name")), (t.get("line") or t.get("marker") or {}).get("color"), len(t.get("x") or []),
                round(sum(xs), 6)]

    return [{"title": f["layout"]["title"]["text"], "traces": [trace(t) for t in f["data"]]} for f in figs]


def outputs() -> dict[str, Any]:
    chat_a, chat_b = chat_records(0), chat_records(1, scale=1.2)
    pipe_a, pipe_b = pipeline_records(0), pipeline_records(1)
    chat_sa = _summary("chat", chat_a, 10 * S, 110 * S)
    chat_sb = _summary("chat", chat_b, 10 * S, 110 * S)
    pipe_sa = _summary("pipeline", pipe_a, 10 * S, 110 * S)
    pipe_sb = _summary("pipeline", pipe_b, 10 * S, 110 * S)
    out: dict[str, Any] = {"chat_summary": chat_sa, "pipeline_summary": pipe_sa}
    for name, recs in (("chat", chat_a), ("pipeline", pipe_a)):
        rs = build(recs)
        out[f"{name}_series"] = {"columns": list(rs.columns), "rows": rs.rows, "time_rows": rs.time_rows(),
                                 "latency_name": rs.latency_name, "itl_by_request": rs.itl_by_request}
    out["chat_compare"] = compare((chat_a, chat_sa), (chat_b, chat_sb), resamples=200)
    out["pipeline_compare"] = compare((pipe_a, pipe_sa), (pipe_b, pipe_sb), resamples=200)
    out["report_figures"] = {"chat": _figures(figures(chat_sa, chat_a)), "pipeline": _figures(figures(pipe_sa, pipe_a))}
    out["compare_figures"] = {"chat": _figures(compare_figures((chat_a, chat_sa), (chat_b, chat_sb))),
                              "pipeline": _figures(compare_figures((pipe_a, pipe_sa), (pipe_b, pipe_sb)))}
    out["gate_samples"] = {m: latency_values(m, chat_a + pipe_a)
                           for m in ("ttfb_ms", "ttft_ms", "ttfc_ms", "e2e_ms", "tpot_ms", "itl_ms", "doc_latency_s")}
    return out


def render() -> str:
    """The outputs as summary.json is written (bench/report/writer.py: json.dumps, indent 2)."""
    return json.dumps(outputs(), indent=2, default=str, allow_nan=False) + "\n"


if __name__ == "__main__":
    print(render(), end="")
