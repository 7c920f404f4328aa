"""Gate kinds. Each gate is a small typed model with ``evaluate(ctx) -> GateResult`` that states
the measured value, the threshold, pass/fail and why -- or says it cannot be evaluated and why
(a gate never passes silently). Thresholds cite their source in the gate files."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated, Literal

import httpx
import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from bench import metric_table
from bench.gating.cohorts import Criteria, judge
from bench.gating.context import GateContext, GateResult, Status
from bench.probes import breaker_cycle, time_worker_startup
from bench.records import AnyRecord, PipelineRecord, RequestRecord
from bench.stats import bootstrap_diff_ci, min_samples_for, pct_stat
from slo.records import Record as SLORecord
from slo.records import RecordError, from_bench, sli_counts
from slo.spec import SpecError, load_spec

if TYPE_CHECKING:
    LatencyMetric = str
else:  # the gated metrics of bench/metric_table.py (the gate file's schema and docs list them)
    LatencyMetric = Literal[metric_table.GATED]


class Gate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, description="Label in the gate table; default: the kind.")
    required: bool = Field(
        default=True,
        description="Required gates that cannot be evaluated make the verdict 'invalid' (exit 2); "
        "optional ones are listed as not evaluated and do not block.",
    )
    source: str = Field(default="", description="Where the threshold comes from.")
    if TYPE_CHECKING:  # every subclass declares its own ``kind: Literal[...]`` field (the discriminator)
        kind: str

    def _r(self, status: Status, measured, threshold: str, reason: str) -> GateResult:
        default = getattr(self, "slo", None) or self.kind
        return GateResult(name=self.name or default, kind=self.kind, status=status,
                          measured=measured, threshold=threshold, reason=reason, required=self.required)


def latency_values(metric: str, records: Iterable[AnyRecord]) -> list[float]:
    """The samples of ``metric`` (bench/metric_table.py) over the measured records, as the summary
    takes them."""
    measured = [r for r in records if r.phase == "measure"]
    values = metric_table.samples(measured, [metric_table.BY_NAME[metric]])[metric]
    return values.tolist() if isinstance(values, np.ndarray) else values


class HealthGate(Gate):
    kind: Literal["health"]
    timeout_s: float = Field(default=5.0, gt=0, description="Per-probe timeout, s.")

    def evaluate(self, ctx: GateContext) -> GateResult:
        if ctx.target is None or ctx.http is None:
            return self._r("not_evaluable", None, "all healthy", "no target to probe")
        from stack.health import HealthCheck, probe

        urls = {"inference server": f"{ctx.target.base_url}/health"} if ctx.target.base_url else {}
        checks: dict[str, HealthCheck] = {}  # a local stack's components, probed as the stack probes them
        for name, comp in ctx.target.components.items():
            h = comp.get("health") or {}
            if h.get("kind") == "http" and h.get("url") and h["url"] not in urls.values():
                urls[name] = h["url"]
                checks[name] = HealthCheck.from_state(h)  # with its basic auth (the local Alertmanager's API)
        if not urls:  # a deployed stack reached through its queue only
            return self._r("not_evaluable", None, "all healthy", "no HTTP endpoint of the stack is reachable "
                           "from the bench (pass the server with --url, e.g. through a port-forward)")
        bad = []
        for name, url in urls.items():
            code: int | str
            if name in checks:
                healthy, detail = probe(checks[name], self.timeout_s)
                code = 200 if healthy else detail
            else:
                try:
                    code = ctx.http.get(url, timeout=self.timeout_s).status_code
                except (httpx.HTTPError, httpx.InvalidURL) as exc:  # a transport failure is 'unhealthy', named below
                    code = f"{type(exc).__name__}"
            if code != 200:
                bad.append(f"{name} ({url}): {code}")
        ok = len(urls) - len(bad)
        if bad:
            return self._r("fail", f"{ok}/{len(urls)}", "all healthy", "unhealthy: " + "; ".join(bad))
        return self._r("pass", f"{ok}/{len(urls)}", "all healthy", f"{', '.join(urls)} answered 200")


class LatencyGate(Gate):
    kind: Literal["latency"]
    metric: LatencyMetric
    percentile: float = Field(default=95, gt=0, lt=100, description="Which percentile of the metric, 0-100.")
    max: float = Field(gt=0, description="Upper limit in the metric's unit (ms or s).")
    enforce_min_samples: bool = Field(
        default=True, description="Not evaluable when fewer samples than the percentile needs.")

    def evaluate(self, ctx: GateContext) -> GateResult:
        vals = latency_values(self.metric, ctx.records)
        thr = f"p{self.percentile:g} <= {self.max:g} {self.metric.rsplit('_', 1)[1]}"
        need = min_samples_for(self.percentile)
        if not vals:
            return self._r("not_evaluable", None, thr, f"no successful measured requests with {self.metric}")
        if self.enforce_min_samples and len(vals) < need:
            return self._r("not_evaluable", len(vals), thr,
                           f"{len(vals)} samples < {need} needed for a p{self.percentile:g} "
                           "(10 beyond the percentile); run longer or set enforce_min_samples: false")
        v = float(np.percentile(vals, self.percentile, method="linear"))
        ok = v <= self.max
        return self._r("pass" if ok else "fail", round(v, 3), thr,
                       f"p{self.percentile:g} of {len(vals)} samples is {v:.3f}")


class ErrorRateGate(Gate):
    kind: Literal["error_rate"]
    max_fraction: float = Field(ge=0, le=1, description="Highest allowed error fraction (0.001 = 0.1 %).")

    def evaluate(self, ctx: GateContext) -> GateResult:
        req = ctx.summary["requests"]
        thr = f"<= {self.max_fraction:.4%}"
        if not req["sent"]:
            return self._r("not_evaluable", None, thr, "no measured requests")
        rate = req["errors"] / req["sent"]
        # With zero errors in n requests the 95 % upper bound is 3/n (rule of three): a tiny
        # run cannot demonstrate 0.1 %.
        if req["errors"] == 0 and 3 / req["sent"] > self.max_fraction:
            return self._r("not_evaluable", 0.0, thr,
                           f"0 errors in {req['sent']} requests only bounds the rate below "
                           f"{3 / req['sent']:.3%} (rule of three); "
                           f"need >= {int(np.ceil(3 / self.max_fraction))} requests")
        ok = rate <= self.max_fraction
        by = ", ".join(f"{k}: {v}" for k, v in ctx.summary.get("errors_by_reason", {}).items()) or "none"
        return self._r("pass" if ok else "fail", round(rate, 6), thr,
                       f"{req['errors']} of {req['sent']} failed ({by})")


class ThroughputGate(Gate):
    kind: Literal["throughput"]
    metric: Literal["completed_rps", "output_tokens_per_s", "goodput_rps", "documents_per_h", "pages_per_s"]
    min: float | None = Field(default=None, ge=0, description="Absolute floor in the metric's unit.")
    min_ratio_vs_baseline: float | None = Field(
        default=None, gt=0, description="Candidate / baseline must reach this (1.2 = +20 %).")

    def evaluate(self, ctx: GateContext) -> GateResult:
        v = ctx.summary["throughput"].get(self.metric)
        if v is None:
            return self._r("not_evaluable", None, "?", f"this run has no {self.metric} (scenario kind "
                           f"{ctx.summary.get('kind')})")
        if self.min_ratio_vs_baseline is not None:
            thr = f">= {self.min_ratio_vs_baseline:g} x baseline"
            if ctx.baseline_summary is None:
                return self._r("not_evaluable", round(v, 3), thr, "no baseline run given (--baseline DIR)")
            b = ctx.baseline_summary["throughput"].get(self.metric)
            if not b:
                return self._r("not_evaluable", round(v, 3), thr, f"baseline has no {self.metric}")
            ratio = v / b
            return self._r("pass" if ratio >= self.min_ratio_vs_baseline else "fail", round(ratio, 4), thr,
                           f"{v:.3f} vs baseline {b:.3f} {self.metric}")
        if self.min is None:
            return self._r("not_evaluable", round(v, 3), "?", "gate sets neither min nor min_ratio_vs_baseline")
        return self._r("pass" if v >= self.min else "fail", round(v, 3), f">= {self.min:g}",
                       f"{self.metric} over the {ctx.summary['window_s']:.1f} s window")


class LatencyVsBaselineGate(Gate):
    kind: Literal["latency_vs_baseline"]
    metric: LatencyMetric = "e2e_ms"
    percentile: float = Field(default=95, gt=0, lt=100, description="Which percentile of the metric, 0-100.")
    max_increase_fraction: float = Field(default=0.10, ge=0, description="0.10 = within 10 %.")

    def evaluate(self, ctx: GateContext) -> GateResult:
        thr = f"p{self.percentile:g} <= baseline + {self.max_increase_fraction:.0%}"
        if ctx.baseline_records is None:
            return self._r("not_evaluable", None, thr, "no baseline run given (--baseline DIR)")
        cand = np.asarray(latency_values(self.metric, ctx.records))
        base = np.asarray(latency_values(self.metric, ctx.baseline_records))
        need = min_samples_for(self.percentile)
        if min(cand.size, base.size) < need:
            return self._r("not_evaluable", None, thr, f"samples baseline {base.size}, candidate {cand.size}; "
                           f"p{self.percentile:g} needs >= {need} in each")
        point, lo, hi = bootstrap_diff_ci(base, cand, pct_stat(self.percentile), resamples=1000,
                                          rng=np.random.default_rng(0))
        ok = point <= self.max_increase_fraction
        return self._r("pass" if ok else "fail", round(point, 4), thr,
                       f"relative change {point:+.1%} (95 % bootstrap CI {lo:+.1%} .. {hi:+.1%})")


class GoodputGate(Gate):
    kind: Literal["goodput"]
    min_fraction: float = Field(gt=0, le=1, description="Share of requests meeting every request SLO.")

    def evaluate(self, ctx: GateContext) -> GateResult:
        g = ctx.summary.get("goodput")
        thr = f">= {self.min_fraction:.1%}"
        fraction = g.get("fraction") if g else None
        if g is None or fraction is None:
            return self._r("not_evaluable", None, thr, "no goodput in this run (no chat requests)")
        if not g.get("slo"):
            return self._r("not_evaluable", fraction, thr,
                           "the scenario sets no request SLO (slo: ttft_ms/tpot_ms/e2e_ms)")
        ok = fraction >= self.min_fraction
        return self._r("pass" if ok else "fail", round(fraction, 4), thr,
                       f"{g['good']} requests met every objective ("
                       + ", ".join(f"{k} <= {v:g}" for k, v in g["slo"].items()) + ")")


class SLOGate(Gate):
    """An SLO of slo/objectives.yaml evaluated on this run's records with the SLO package's own
    offline calculator (slo.records.sli_counts), so bench gates and `slo report` agree."""

    kind: Literal["slo"]
    slo: str = Field(description="SLO name in slo/objectives.yaml.")

    def evaluate(self, ctx: GateContext) -> GateResult:
        try:
            slo = load_spec().get(self.slo)
        except SpecError as exc:  # names the known SLOs
            return self._r("not_evaluable", None, "?", str(exc))
        target = float(slo.target)
        thr = f">= {target:.1%} good ({slo.title})"
        recs = [x for x in (from_bench(r.model_dump()) for r in ctx.records) if x is not None]
        # gauges sampled during the run (bench/sampler.py) are slo.records' 'gauge' records
        server = ctx.summary.get("server")
        for smp in (server.get("samples") if server else None) or []:
            recs.append(SLORecord(kind="gauge", t_s=smp["t_s"], metric=smp["metric"], value=smp["value"]))
        try:
            counts = sli_counts(slo, recs)
        except RecordError as exc:
            return self._r("not_evaluable", None, thr, str(exc))
        if counts is None or counts.total == 0:
            return self._r("not_evaluable", None, thr,
                           f"this {ctx.summary.get('kind')} run has no records for SLI kind {slo.sli.kind!r}")
        good, total = float(counts.good), float(counts.total)
        frac = good / total
        if slo.sli.kind == "threshold" and ctx.summary["throughput"].get("sent_rps") is not None:
            offered_h = ctx.summary["throughput"]["sent_rps"] * 3600
            if frac < target and offered_h < float(slo.sli.threshold):
                return self._r("not_evaluable", round(frac, 4), thr,
                               f"the run offered only {offered_h:.0f}/h: throughput cannot exceed arrivals")
        if slo.sli.kind == "event_ratio" and good == total and 3 / total > 1 - target:
            return self._r("not_evaluable", 1.0, thr,
                           f"0 bad in {total:.0f} events only bounds the bad fraction below {3 / total:.2%} "
                           f"(rule of three); need >= {int(np.ceil(3 / (1 - target)))} events")
        return self._r("pass" if frac >= target else "fail", round(frac, 4), thr,
                       f"{good:.0f} of {total:.0f} {'slices' if slo.time_based else 'events'} good "
                       f"(slo.records.sli_counts over measured records)")


class MemoryGrowthGate(Gate):
    kind: Literal["memory_growth"]
    max_growth_mib: float = Field(default=64.0, ge=0, description="Allowed RSS growth of the server, MiB.")
    min_requests: int = Field(default=1000, ge=1,
                              description="Requests the run must have (Phase 1: 1,000+, docs/migration.md).")

    def evaluate(self, ctx: GateContext) -> GateResult:
        thr = f"<= {self.max_growth_mib:g} MiB over >= {self.min_requests} requests"
        n = ctx.summary["requests"]["all_phases"]
        server = ctx.summary.get("server")
        g = ((server.get("gauges") if server else None) or {}).get("process_resident_memory_bytes")
        before = g.get("before") if g else None
        if g is None or before is None:
            return self._r("not_evaluable", None, thr, "the server exposes no process_resident_memory_bytes "
                           "(GPU memory needs DCGM: use kind gpu_utilization's Prometheus)")
        if n < self.min_requests:
            return self._r("not_evaluable", None, thr, f"only {n} requests; run at least {self.min_requests}")
        growth = (g["after"] - before) / 2**20
        return self._r("pass" if growth <= self.max_growth_mib else "fail", round(growth, 2), thr,
                       f"server RSS {before / 2**20:.0f} -> {g['after'] / 2**20:.0f} MiB over {n} requests")


class DeterminismGate(Gate):
    """Active probe: the same request at temperature 0 with a fixed seed, repeated."""

    kind: Literal["determinism"]
    repeats: int = Field(default=20, ge=2, le=1000, description="Identical requests sent.")
    min_identical_fraction: float = Field(default=0.9, gt=0, le=1,
                                          description="Share of answers equal to the commonest one.")
    max_tokens: int = Field(default=32, ge=1, description="max_tokens of each request.")
    prompt: str = Field(default="Summarise the document layout of page one in one sentence.",
                        description="The request's text (temperature 0).")

    def evaluate(self, ctx: GateContext) -> GateResult:
        thr = f">= {self.min_identical_fraction:.0%} identical"
        if ctx.target is None or ctx.http is None or not ctx.target.base_url:
            return self._r("not_evaluable", None, thr, "no inference server to probe (--url)")
        body = {"model": ctx.target.model, "messages": [{"role": "user", "content": self.prompt}],
                "max_tokens": self.max_tokens, "temperature": 0.0, "seed": 1234}
        outs = []
        for _ in range(self.repeats):
            r = ctx.http.post(f"{ctx.target.base_url}/v1/chat/completions", json=body,
                              headers=ctx.target.headers, timeout=120.0)
            if r.status_code != 200:
                return self._r("not_evaluable", None, thr, f"probe request failed: {r.status_code} {r.text[:200]}")
            outs.append(r.json()["choices"][0]["message"]["content"] or "")
        top, count = Counter(outs).most_common(1)[0]
        frac = count / len(outs)
        return self._r("pass" if frac >= self.min_identical_fraction else "fail", round(frac, 4), thr,
                       f"{count} of {len(outs)} answers identical ({len(set(outs))} distinct)")


class OutputEquivalenceGate(Gate):
    """Baseline and candidate runs on the same inputs give the same outputs."""

    kind: Literal["output_equivalence"]
    min_equal_fraction: float = Field(default=1.0, gt=0, le=1,
                                      description="Share of answers equal to the baseline run's.")

    def evaluate(self, ctx: GateContext) -> GateResult:
        thr = f">= {self.min_equal_fraction:.0%} equal"
        if ctx.baseline_records is None:
            return self._r("not_evaluable", None, thr, "no baseline run given (--baseline DIR)")

        def keyed(records) -> dict[str, str]:
            out = {}
            for r in records:
                if not r.ok:
                    continue
                if isinstance(r, PipelineRecord) and r.output_sha256:
                    out[r.document] = r.output_sha256
                elif isinstance(r, RequestRecord) and r.output_text is not None:
                    out[r.request_id] = hashlib.sha256(r.output_text.encode()).hexdigest()
            return out

        base, cand = keyed(ctx.baseline_records), keyed(ctx.records)
        common = sorted(set(base) & set(cand))
        if not common:
            return self._r("not_evaluable", None, thr, "no input present with an output in both runs "
                           "(chat runs need keep_output: true; pipeline runs need the same documents)")
        equal = sum(1 for k in common if base[k] == cand[k])
        frac = equal / len(common)
        return self._r("pass" if frac >= self.min_equal_fraction else "fail", round(frac, 4), thr,
                       f"{equal} of {len(common)} inputs gave identical output")


class GpuUtilizationGate(Gate):
    kind: Literal["gpu_utilization"]
    min_percent: float = Field(default=85.0, ge=0, le=100, description="Lowest mean GPU utilisation, %.")

    def evaluate(self, ctx: GateContext) -> GateResult:
        thr = f">= {self.min_percent:g} %"
        prom = ctx.target.prometheus_url if ctx.target else None
        if not prom or ctx.http is None:
            return self._r("not_evaluable", None, thr, "no Prometheus for this target")
        run = ctx.summary["run"]
        start = run["started_at_unix_s"]
        end = start + run["wall_s"]
        q = f"avg(avg_over_time(DCGM_FI_DEV_GPU_UTIL[{max(1, int(end - start))}s]))"
        try:
            r = ctx.http.get(f"{prom}/api/v1/query", params={"query": q, "time": end}, timeout=10.0)
            res = r.json()["data"]["result"]
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:  # Prometheus down, not JSON, no data
            return self._r("not_evaluable", None, thr, f"Prometheus query failed: {exc}")
        if not res:
            return self._r("not_evaluable", None, thr, "no DCGM_FI_DEV_GPU_UTIL series (no GPU / DCGM exporter here)")
        v = float(res[0]["value"][1])
        return self._r("pass" if v >= self.min_percent else "fail", round(v, 1), thr, "mean over the run from DCGM")


class WorkerStartupGate(Gate):
    """Active probe: start one extra worker exactly as the local stack does and time it from
    spawn to a 200 on /readyz; it is stopped right after."""

    kind: Literal["worker_startup"]
    max_s: float = Field(default=5.0, gt=0, description="Phase 2: worker startup < 5 s (docs/migration.md).")
    timeout_s: float = Field(default=60.0, gt=0, description="Give up (fail) after this long.")

    def evaluate(self, ctx: GateContext) -> GateResult:
        thr = f"<= {self.max_s:g} s spawn -> ready"
        if ctx.target is None or ctx.target.stack is None:
            return self._r("not_evaluable", None, thr, "needs a local stack (--stack) to start a worker like it does")

        try:
            took = time_worker_startup(ctx.target, self.timeout_s)
        except RuntimeError as exc:
            return self._r("not_evaluable", None, thr, str(exc))
        if took is None:
            return self._r("fail", None, thr, f"the probe worker was not ready within {self.timeout_s:g} s")
        return self._r("pass" if took <= self.max_s else "fail", round(took, 3), thr,
                       "one extra worker, same command and environment as the stack's")


class BreakerGate(Gate):
    """Active probe: make the simulator fail every request while documents are submitted,
    expect a worker's breaker to open, clear the fault and expect every breaker to close."""

    kind: Literal["breaker"]
    metric: str = Field(default="mineru_vllm_circuit_breaker_state",
                        description="Gauge with contract.metrics.BreakerState values (0 closed, 1 half-open, 2 open).")
    open_within_s: float = Field(default=60.0, gt=0, description="The breaker must open within, s.")
    recover_within_s: float = Field(default=120.0, gt=0, description="And close again within, s.")

    def evaluate(self, ctx: GateContext) -> GateResult:
        thr = f"opens <= {self.open_within_s:g} s, all closed <= {self.recover_within_s:g} s after"
        if ctx.target is None or ctx.http is None or ctx.target.stack is None:
            return self._r("not_evaluable", None, thr, "needs a local stack with workers (--stack)")

        try:
            res = breaker_cycle(ctx.target, ctx.http, self.metric, self.open_within_s, self.recover_within_s)
        except RuntimeError as exc:
            return self._r("not_evaluable", None, thr, str(exc))
        if res["opened_s"] is None:
            return self._r("fail", None, thr, f"no breaker opened within {self.open_within_s:g} s of 100 % 503s")
        if res["closed_s"] is None:
            return self._r("fail", round(res["opened_s"], 2), thr,
                           f"opened after {res['opened_s']:.1f} s but still open "
                           f"{self.recover_within_s:g} s after the fault cleared")
        return self._r("pass", round(res["closed_s"], 2), thr,
                       f"opened {res['opened_s']:.1f} s into the outage, "
                       f"all closed {res['closed_s']:.1f} s after it ended")


class CohortsGate(Gate):
    """Live: the migration's split and monolithic cohorts over the same window (pass, fail, or too few documents to judge); `runbook migrate` collects the window's documents from the stack."""  # noqa: E501

    kind: Literal["cohorts"]
    criteria: Criteria = Field(default_factory=Criteria, description="The bounds both cohorts are judged by.")

    def evaluate(self, ctx: GateContext) -> GateResult:
        samples = ctx.extra.get("cohorts")
        k = self.criteria
        threshold = (f"split error < {k.max_error_fraction:.2%} and no worse than monolithic; "
                     f"p95 within {k.max_p95_increase_fraction:.0%}; crashes <= {k.max_crashes}; shadow pairs "
                     f">= {k.min_shadow_equivalent_fraction:.0%} equivalent (when sampled)")
        if samples is None:
            return self._r("not_evaluable", None, threshold, "no cohort samples: run it live (`runbook migrate`)")
        v = judge(samples, self.criteria, ctx.extra.get("crashes"), ctx.extra.get("shadow"))
        status: Status = "pass" if v.judgement == "pass" else "fail" if v.judgement == "fail" else "not_evaluable"
        reason = "; ".join(v.lines())
        if v.judgement == "too_few":
            reason = "too few documents to judge: " + reason
        return self._r(status, v.judgement, threshold, reason)


AnyGate = Annotated[
    HealthGate | LatencyGate | ErrorRateGate | ThroughputGate | LatencyVsBaselineGate | GoodputGate
    | SLOGate | MemoryGrowthGate | DeterminismGate | OutputEquivalenceGate | GpuUtilizationGate
    | WorkerStartupGate | BreakerGate | CohortsGate,
    Field(discriminator="kind"),
]
