"""OpenSLO v1 export and import (https://github.com/OpenSLO/OpenSLO, apiVersion openslo/v1).

Export: one ``Service``, an ``AlertNotificationTarget`` per severity, and per objective an
``SLO`` with an inline SLI whose Prometheus queries keep the rules' semantics (ratioMetric for
event SLIs, budgetingMethod Occurrences; thresholdMetric + Timeslices for time SLIs, with
``target`` the SLO's target; missing counters read 0; a throughput slice without backlog is not
judged), plus one ``AlertPolicy`` with an inline burn-rate ``AlertCondition`` per burn-rate alert.
The structured splitstack SLI also travels in the annotation ``splitstack.io/sli`` so an export
imports back exactly. tests/unit/slo/test_slo_openslo.py validates the export against a JSON
schema of the v1 specification.

Import: SLOs carrying that annotation are taken as is; others are mapped when their queries fit
splitstack's model (ratios of catalog counters, a histogram bucket over its count, a gauge or
``up`` against a threshold). Anything else is rejected with the SLO's name and the reason.
"""

from __future__ import annotations

import json
from decimal import Decimal

import promql_parser
import yaml

from contract import metrics as catalog
from contract.metrics import MetricType
from slo import promql
from slo.exprcheck import ExprError, selectors
from slo.report import fmt_duration_s, parse_duration_s
from slo.rules import burn_alerts
from slo.spec import SLO, EventRatioSLI, Jobs, LatencySLI, SLOSpec, SpecError, ThresholdSLI, UptimeSLI, dec, parse_spec
from slo.windows import BurnWindow, BurnWindows, Severity, load_burn_windows

API = "openslo/v1"
SERVICE = "splitstack"
SLI_ANNOTATION = "splitstack.io/sli"
_OPS = {"gte": "gte", "lte": "lte"}


class OpenSLOError(ValueError):
    pass


def _source(query: str) -> dict:
    return {"metricSource": {"type": "Prometheus", "spec": {"query": query}}}


def _sum(metrics: tuple[str, ...], job: str, jobs: Jobs, *extra: str) -> str:
    # A counter that does not exist yet (created at its first event elsewhere) reads 0, as in the rules.
    return " + ".join(f"(sum({promql.selector(m, job, *extra, jobs=jobs)}) or vector(0))" for m in metrics)


def _indicator(slo: SLO, jobs: Jobs) -> dict:
    sli = slo.sli
    spec: dict
    if isinstance(sli, EventRatioSLI):
        job = jobs.of(sli.job)
        spec = {"ratioMetric": {"counter": True, "bad": _source(_sum(sli.bad, job, jobs)),
                                "total": _source(_sum(sli.total, job, jobs))}}
    elif isinstance(sli, LatencySLI):
        job = jobs.of(sli.job)
        good = f"sum({promql.selector(sli.histogram + '_bucket', job, promql.le_matcher(sli.threshold_s), jobs=jobs)})"
        total = " + ".join([f"sum({promql.selector(sli.histogram + '_count', job, jobs=jobs)})",
                            *([_sum(sli.failures, job, jobs)] if sli.failures else [])])
        spec = {"ratioMetric": {"counter": True, "good": _source(good), "total": _source(total)}}
    elif isinstance(sli, UptimeSLI):
        spec = {"thresholdMetric": _source(promql.indicator_expr(slo, jobs))}
    else:
        spec = {"thresholdMetric": _source(_threshold_value(sli, jobs))}
    return {"metadata": {"name": f"{slo.name}-sli"}, "spec": spec}


def _threshold_value(sli: ThresholdSLI, jobs: Jobs) -> str:
    """The slice's value; a slice without backlog returns nothing, so it is not judged (as in the rules)."""
    window = f"{sli.slice_min}m"
    value = promql.threshold_value(sli, jobs, window)
    if sli.backlog_gauge:
        return f"({value}) and on () ({promql.backlog_throughout(sli, jobs, window)})"
    return value


def _objective(slo: SLO) -> dict:
    """``target`` is the SLO's (share of good events, or of good slices); with Timeslices a slice is
    good when the indicator meets op/value in every evaluation of it (``timeSliceTarget`` 1)."""
    sli = slo.sli
    obj: dict = {"displayName": slo.title}
    if isinstance(sli, UptimeSLI):
        obj.update(op="gte", value=1, target=float(slo.target), timeSliceTarget=1, timeSliceWindow="1m")
    elif isinstance(sli, ThresholdSLI):
        obj.update(op=_OPS[sli.comparison], value=float(sli.threshold), target=float(slo.target),
                   timeSliceTarget=1, timeSliceWindow=f"{sli.slice_min}m")
    else:
        obj["target"] = float(slo.target)
    return obj


def _policy_name(slo: SLO, w: BurnWindow) -> str:
    return f"{slo.name}-{w.severity.value}-{w.long}-{w.short}".lower()


def _alert_policies(spec: SLOSpec, slo: SLO, windows: BurnWindows) -> list[dict]:
    """One AlertPolicy per burn-rate window pair (OpenSLO v1 allows one condition per policy)."""
    out = []
    for a in burn_alerts(spec, slo, windows):
        w = a.window
        out.append({
            "apiVersion": API, "kind": "AlertPolicy",
            "metadata": {"name": _policy_name(slo, w), "displayName": f"{slo.title}: {a.name} {w.long}/{w.short}",
                         "annotations": {"splitstack.io/alert": a.name, "splitstack.io/short-window": w.short,
                                         "splitstack.io/error-ratio-threshold": dec(a.threshold)}},
            "spec": {
                "description": (f"Burn rate >= {a.factor_text}x over {w.long} and over {w.short} "
                                f"(multiwindow: the short window is in the annotation; OpenSLO v1 has one window)"),
                "alertWhenNoData": False, "alertWhenResolved": True, "alertWhenBreaching": True,
                "conditions": [{
                    "kind": "AlertCondition",
                    "metadata": {"name": f"{_policy_name(slo, w)}-burn"},
                    "spec": {"description": f"burn rate >= {a.factor_text}x over {w.long}",
                             "severity": w.severity.value,
                             "condition": {"kind": "burnrate", "op": "gte", "threshold": float(a.factor_text),
                                           "lookbackWindow": w.long, "alertAfter": "0m"}},
                }],
                "notificationTargets": [{"targetRef": w.severity.value}],
            },
        })
    return out


def _slo_doc(spec: SLOSpec, slo: SLO, policies: list[dict]) -> dict:
    sli_json = json.dumps(slo.sli.model_dump(mode="json"), sort_keys=True)
    extra = {"source": slo.source, "min_events": str(slo.min_events), "alerts": ",".join(a.value for a in slo.alerts),
             "runbook_action": slo.runbook_action, "service": slo.service}
    if slo.manual_alert:
        extra["manual_alert"] = json.dumps(slo.manual_alert.model_dump(mode="json", exclude_defaults=True),
                                           sort_keys=True)
    body: dict = {
        "description": slo.description, "service": SERVICE, "indicator": _indicator(slo, spec.jobs),
        "timeWindow": [{"duration": f"{slo.window_d}d", "isRolling": True}],
        "budgetingMethod": "Timeslices" if slo.time_based else "Occurrences",
        "objectives": [_objective(slo)],
    }
    if policies:
        body["alertPolicies"] = [{"alertPolicyRef": p["metadata"]["name"]} for p in policies]
    return {
        "apiVersion": API, "kind": "SLO",
        "metadata": {"name": slo.name, "displayName": slo.title,
                     "annotations": {SLI_ANNOTATION: sli_json, **{f"splitstack.io/{k}": v for k, v in extra.items()}}},
        "spec": body,
    }


def export_openslo(spec: SLOSpec, windows: BurnWindows | None = None) -> str:
    """Service, notification targets, then per SLO its AlertPolicies and the SLO itself."""
    windows = windows or load_burn_windows()
    docs: list[dict] = [{"apiVersion": API, "kind": "Service",
                         "metadata": {"name": SERVICE, "displayName": "splitstack PDF pipeline"},
                         "spec": {"description": "MinerU workers sharing one vLLM inference server"}}]
    for sev in Severity:
        docs.append({"apiVersion": API, "kind": "AlertNotificationTarget", "metadata": {"name": sev.value},
                     "spec": {"target": "alertmanager",
                              "description": f"Alertmanager's {sev.value!r} receiver (slo/alertmanager.py)"}})
    for s in spec.slos:
        policies = _alert_policies(spec, s, windows)
        docs += policies
        docs.append(_slo_doc(spec, s, policies))
    return yaml.safe_dump_all(docs, sort_keys=False, width=10_000)


# --- import ------------------------------------------------------------------------------------
def _selectors(query: str, where: str) -> list[promql_parser.VectorSelector]:
    try:
        return selectors(query)  # slo/exprcheck.py: the one walk over a PromQL tree
    except ExprError as e:
        raise OpenSLOError(f"{where}: query {query!r} {e}") from None


def _metric_name(sel: promql_parser.VectorSelector, where: str) -> str:
    if sel.name is None:
        raise OpenSLOError(f"{where}: selector {sel} names no metric; write the metric name before the braces")
    return sel.name


def _matcher(sel: promql_parser.VectorSelector, name: str) -> str | None:
    for m in sel.matchers.matchers:
        if m.name == name:
            return m.value
    return None


def _role(job: str | None, jobs: Jobs, where: str) -> str:
    for role in ("inference_server", "workers"):
        if jobs.of(role) == job:
            return role
    raise OpenSLOError(f"{where}: job {job!r} is neither the inference server job {jobs.inference_server!r} "
                       f"nor the workers job {jobs.workers!r}; add a job=\"...\" matcher with one of them")


def _query(node: dict | None, where: str) -> str:
    try:
        return node["metricSource"]["spec"]["query"]  # type: ignore[index]
    except (KeyError, TypeError):
        raise OpenSLOError(f"{where}: expected metricSource.spec.query (Prometheus)") from None


def _sli_from_queries(doc: dict, jobs: Jobs, where: str) -> dict:
    ind = doc["spec"].get("indicator") or {}
    spec = ind.get("spec") or {}
    obj = (doc["spec"].get("objectives") or [{}])[0]
    if "ratioMetric" in spec:
        rm = spec["ratioMetric"]
        total = _selectors(_query(rm.get("total"), f"{where}.total"), where)
        if "good" in rm:
            good = _selectors(_query(rm["good"], f"{where}.good"), where)
            if len(good) == 1:
                good_name = _metric_name(good[0], where)
                fam = catalog.family_of(good_name)
                if fam and fam.type is MetricType.histogram and good_name.endswith("_bucket"):
                    le = _matcher(good[0], "le")
                    if le is None:
                        raise OpenSLOError(f"{where}: the good query reads {good_name} without an le matcher")
                    return {"kind": "latency", "job": _role(_matcher(good[0], "job"), jobs, where),
                            "histogram": fam.name, "threshold_s": le.split("(")[0]}
            bad_names = [s.name for s in total if s.name not in {g.name for g in good}]
            if not bad_names:
                raise OpenSLOError(f"{where}: cannot derive bad events: every total counter is also good")
            return {"kind": "event_ratio", "job": _role(_matcher(total[0], "job"), jobs, where),
                    "bad": bad_names, "total": [s.name for s in total]}
        bad = _selectors(_query(rm.get("bad"), f"{where}.bad"), where)
        return {"kind": "event_ratio", "job": _role(_matcher(total[0], "job"), jobs, where),
                "bad": [s.name for s in bad], "total": [s.name for s in total]}
    if "thresholdMetric" in spec:
        sels = _selectors(_query(spec["thresholdMetric"], f"{where}.thresholdMetric"), where)
        names = {s.name for s in sels}
        slice_min = parse_duration_s(obj.get("timeSliceWindow", "1m")) // 60 or 1
        if names == {"up"}:
            # `up` without a job matcher is the "monitoring is up" gate of splitstack's own export.
            return {"kind": "uptime", "jobs": sorted({_role(_matcher(s, "job"), jobs, where) for s in sels
                                                       if _matcher(s, "job") is not None})}
        if len(sels) == 1:
            try:
                fam = catalog.get(_metric_name(sels[0], where))
            except KeyError as e:
                raise OpenSLOError(f"{where}: {e.args[0]}") from None
            measure = "max" if fam.type is MetricType.gauge else "rate_per_hour"
            return {"kind": "threshold", "job": _role(_matcher(sels[0], "job"), jobs, where), "metric": fam.name,
                    "measure": measure, "comparison": obj.get("op", "lte"), "threshold": str(obj.get("value")),
                    "slice_min": slice_min}
    raise OpenSLOError(f"{where}: indicator fits no splitstack SLI kind (ratioMetric of catalog counters or a "
                       "histogram bucket, or thresholdMetric of one gauge/counter or up)")


def _slo_entry(doc: dict, jobs: Jobs) -> dict:
    meta = doc.get("metadata") or {}
    name = meta.get("name", "?")
    where = f"OpenSLO SLO {name!r}"
    ann = meta.get("annotations") or {}
    spec = doc.get("spec") or {}
    if isinstance(spec.get("indicatorRef"), str):
        raise OpenSLOError(f"{where}: indicatorRef is not supported; inline the SLI under spec.indicator")
    windows = spec.get("timeWindow") or [{"duration": "30d"}]
    try:
        window_s = parse_duration_s(windows[0]["duration"])
    except (ValueError, KeyError):
        raise OpenSLOError(f"{where}: timeWindow duration must be like 30d") from None
    if window_s % 86400:
        raise OpenSLOError(
            f"{where}: timeWindow {fmt_duration_s(window_s)} is not whole days; splitstack windows are days")
    obj = (spec.get("objectives") or [None])[0]
    if obj is None:
        raise OpenSLOError(f"{where}: no objectives")
    if len(spec["objectives"]) > 1:
        raise OpenSLOError(f"{where}: {len(spec['objectives'])} objectives; split them into one SLO each")
    target = obj.get("target", obj.get("timeSliceTarget"))
    if target is None:
        raise OpenSLOError(f"{where}: objective has neither target nor timeSliceTarget")
    sli = json.loads(ann[SLI_ANNOTATION]) if SLI_ANNOTATION in ann else _sli_from_queries(doc, jobs, where)
    entry = {"name": name, "title": meta.get("displayName") or name, "description": spec.get("description") or name,
             "source": ann.get("splitstack.io/source", f"imported from OpenSLO SLO {name}"), "sli": sli,
             "target": dec(Decimal(str(target))), "window_d": window_s // 86400}
    if "splitstack.io/min_events" in ann:
        entry["min_events"] = int(ann["splitstack.io/min_events"])
    if "splitstack.io/alerts" in ann:
        entry["alerts"] = [a for a in ann["splitstack.io/alerts"].split(",") if a]
    if "splitstack.io/runbook_action" in ann:
        entry["runbook_action"] = ann["splitstack.io/runbook_action"]
    if "splitstack.io/service" in ann:
        entry["service"] = ann["splitstack.io/service"]
    if "splitstack.io/manual_alert" in ann:
        entry["manual_alert"] = json.loads(ann["splitstack.io/manual_alert"])
    return entry


def import_openslo(text: str, origin: str = "<openslo>", jobs: Jobs | None = None) -> str:
    """OpenSLO YAML -> objectives.yaml text (validated by the SLO spec before it is returned)."""
    jobs = jobs or Jobs()
    try:
        docs = [d for d in yaml.safe_load_all(text) if d]
    except yaml.YAMLError as e:
        raise OpenSLOError(f"{origin}: not valid YAML: {e}") from None
    slos = [d for d in docs if isinstance(d, dict) and d.get("kind") == "SLO"]
    if not slos:
        raise OpenSLOError(f"{origin}: no OpenSLO documents of kind SLO")
    for d in slos:
        if d.get("apiVersion") != API:
            raise OpenSLOError(f"{origin}: SLO {d.get('metadata', {}).get('name')!r} has apiVersion "
                               f"{d.get('apiVersion')!r}; only {API} is supported")
    data = {"version": 1, "jobs": jobs.model_dump(exclude_none=True), "slos": [_slo_entry(d, jobs) for d in slos]}
    try:
        parse_spec(data, origin)
    except SpecError as e:
        raise OpenSLOError(str(e)) from None
    return yaml.safe_dump(data, sort_keys=False, width=10_000)
