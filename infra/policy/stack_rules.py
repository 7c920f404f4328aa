"""Stack policies: rules that need every object at once (NetworkPolicy coverage, monitors)."""

from __future__ import annotations

from typing import Any

from infra.policy.objects import Obj, ident, pod_template

# ---- stack rules ----------------------------------------------------------------------------

def _selects(selector: dict, labels: dict) -> bool:
    match = selector.get("matchLabels") or {}
    return all(labels.get(k) == v for k, v in match.items()) and not selector.get(
        "matchExpressions")


def network_policy_coverage(objs: list[Obj]) -> list[str]:
    """Each namespace with workloads has default deny (ingress + egress), and every container
    port of every workload is opened by some ingress rule of a policy selecting its pods."""
    policies = [o for o in objs if o.get("kind") == "NetworkPolicy"]
    out = []
    namespaces = {(o.get("metadata") or {}).get("namespace") for o in objs if pod_template(o)}
    for ns in sorted(n for n in namespaces if n):
        deny = [p for p in policies if (p["metadata"].get("namespace") == ns
                and (p.get("spec") or {}).get("podSelector") in ({}, None)
                and set((p.get("spec") or {}).get("policyTypes") or []) >= {"Ingress", "Egress"}
                and not p["spec"].get("ingress") and not p["spec"].get("egress"))]
        if not deny:
            out.append(f"namespace {ns}: no default-deny NetworkPolicy (podSelector {{}}, "
                       "policyTypes [Ingress, Egress], no rules); add one")
    for obj in objs:
        found = pod_template(obj)
        if found is None:
            continue
        labels = found[0].get("labels") or {}
        ns = obj["metadata"].get("namespace")
        opened: set[Any] = set()
        for p in policies:
            spec = p.get("spec") or {}
            if p["metadata"].get("namespace") != ns or not _selects(spec.get("podSelector") or {}, labels):
                continue
            for rule in spec.get("ingress") or []:
                for port in rule.get("ports") or []:
                    opened.add(port.get("port"))
        for c in found[1].get("containers") or []:
            for port in c.get("ports") or []:
                if port.get("containerPort") not in opened and port.get("name") not in opened:
                    out.append(f"{ident(obj)}: container port {port.get('containerPort')} is "
                               "not opened by any NetworkPolicy ingress rule; with default deny "
                               "nothing reaches it (add the allowed flow)")
    return out


def service_monitor_selectors(objs: list[Obj]) -> list[str]:
    """Every ServiceMonitor selects a Service in its namespaces, by labels it really has, and
    scrapes a port name that Service defines."""
    services = [o for o in objs if o.get("kind") == "Service"]
    out = []
    for sm in (o for o in objs if o.get("kind") == "ServiceMonitor"):
        spec = sm.get("spec") or {}
        names = ((spec.get("namespaceSelector") or {}).get("matchNames")
                 or [sm["metadata"].get("namespace")])
        hits = [s for s in services if s["metadata"].get("namespace") in names
                and _selects(spec.get("selector") or {}, s["metadata"].get("labels") or {})]
        if not hits:
            out.append(f"{ident(sm)}: selector {spec.get('selector')} matches no Service's "
                       "labels; Prometheus would scrape nothing: copy the Service's labels")
            continue
        ports = {p.get("name") for s in hits for p in (s.get("spec") or {}).get("ports") or []}
        for ep in spec.get("endpoints") or []:
            if ep.get("port") and ep["port"] not in ports:
                out.append(f"{ident(sm)}: endpoint port {ep['port']!r} is not a port name of "
                           f"the selected Service(s) (have {sorted(p for p in ports if p)})")
        job = spec.get("jobLabel")
        if job and not all(job in (s["metadata"].get("labels") or {}) for s in hits):
            out.append(f"{ident(sm)}: jobLabel {job!r} is missing from a selected Service's "
                       "labels; the job label (used by alerts/) would fall back to the name")
    return out
