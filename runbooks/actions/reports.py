"""Read-only actions: `slo-status` (the SLO calculators of slo/ against Prometheus) and
`slow-pdfs` (high latency from large or complex PDFs: which documents take longest, from the output store's metadata
and the workers' JSON logs)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from contract.outputs import store_root
from runbooks.cases import Case
from runbooks.context import ActionContext
from runbooks.model import PlatformError, Refused, Report
from runbooks.names import Action
from runbooks.params import SloStatusParams, SlowPdfsParams
from runbooks.platforms.base import WORKERS
from runbooks.platforms.local import LocalPlatform
from runbooks.suggestion import Suggestion
from slo.prom_source import PrometheusSource, PrometheusUnreachable, QueryFailed
from slo.report import evaluate_prometheus, parse_duration_s
from slo.spec import load_spec


def slo_status(ctx: ActionContext, p: SloStatusParams) -> Report:
    if ctx.prometheus is None:
        raise Refused("slo-status needs Prometheus: pass --prometheus-url (the local stack's is found "
                      "from its state)")
    try:
        parse_duration_s(p.current)
        if p.window:
            parse_duration_s(p.window)
    except ValueError as exc:
        raise Refused(str(exc)) from exc
    spec = load_spec()
    source = PrometheusSource(ctx.prometheus.url, spec.jobs)
    try:
        source.check()
        evals = evaluate_prometheus(spec, source, p.window, p.current)
    except (PrometheusUnreachable, QueryFailed) as exc:
        raise PlatformError(str(exc)) from exc
    lines = []
    for e in evals:
        d = e.as_dict()
        lines.append(f"{e.slo}: {d['status']} (target {d['target']}, attainment "
                     f"{_pct(d['attainment'])}, budget left {_pct(d['budget_remaining_ratio'])}, "
                     f"burn rate {_num(d['burn_rate'])})" + (f"; {e.message}" if e.message else ""))
    worst = [e.slo for e in evals if e.status.value == "exhausted" or (e.burn_rate or 0) > 1]
    counts = Counter(e.status.value for e in evals)
    tally = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    return Report(action=Action.SLO_STATUS, outcome="report", evidence=lines,
                  summary=(f"{len(evals)} SLOs ({tally}); need attention: {', '.join(worst)}" if worst
                           else f"{len(evals)} SLOs ({tally}); none exhausted or burning faster than budget"),
                  data={"slos": [e.as_dict() for e in evals]},
                  suggestions=[Suggestion(action=Action.DIAGNOSE)] if worst else [])


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.2f} %"


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}x"


def slow_pdfs(ctx: ActionContext, p: SlowPdfsParams) -> Report:
    rows: dict[str, dict] = {}
    sources = []
    if ctx.spec.output_store.kind == "s3":
        # Not listed: a bucket's every metadata.json costs a request per thousand keys and a GET
        # each; the worker logs carry the same processing_s and job ids.
        sources.append(f"outputs in {store_root(ctx.spec)}/<job_id>/ (not listed)")
    elif isinstance(ctx.platform, LocalPlatform):  # the output store is on this host
        root = Path(ctx.platform.stack.paths.data) / ctx.spec.output_store.path
        for meta in root.glob("*/metadata.json"):
            try:
                m = json.loads(meta.read_text())
            except (OSError, ValueError):
                continue
            if "processing_s" in m:
                rows[m.get("job_id", meta.parent.name)] = m
        sources.append(f"output store {root}")
    if ctx.spec.worker_pool.replicas:
        for line in ctx.platform.logs(WORKERS, p.log_lines).splitlines():
            try:
                m = json.loads(line)
            except ValueError:
                continue
            if isinstance(m, dict) and "processing_s" in m and m.get("job_id"):
                rows.setdefault(m["job_id"], m)
        sources.append("worker logs")
    ranked = sorted(rows.values(), key=lambda m: -float(m["processing_s"]))[: p.top]
    lines = [f"{m['processing_s']:.1f} s, {m.get('pages', '?')} pages, "
             f"{float(m['processing_s']) / max(int(m.get('pages') or 1), 1):.2f} s/page: "
             f"{m.get('source', '?')} (job {m.get('job_id', '?')})" for m in ranked]
    return Report(action=Action.SLOW_PDFS, outcome="report", case=Case.LARGE_PDFS, evidence=lines,
                  summary=(f"{len(rows)} processed documents in {', '.join(sources) or 'no source'}; "
                           f"slowest {len(ranked)} listed" if rows else "no processed documents found"),
                  suggestions=["if the slow ones are the large ones: accept (update the p99 target), "
                               "split them (worker_pool.split_pages_over) or raise request_timeout_s"],
                  data={"documents": ranked})
