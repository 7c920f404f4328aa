"""Who can reach whom under the rendered NetworkPolicies, computed, and what the stack needs.

``reachable`` evaluates Kubernetes NetworkPolicy semantics
(https://kubernetes.io/docs/concepts/services-networking/network-policies/) over the objects the
program renders: a pod selected by a policy of a type (Ingress / Egress) admits only what one of
those policies' rules allows; a pod no policy selects admits everything; a flow needs both its
source's egress and its destination's ingress. ``needed_flows`` states, from the spec alone, the
flows the pipeline uses. ``matrix`` puts both side by side for `splitstack infra plan` and the
tests: every needed flow allowed, every other flow that touches a pod the policies guard denied.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

from contract import naming, sizing
from contract.cluster_fit import scaled_servers, workers_scaled
from contract.migration import MONOLITHIC_POOL_DEPLOYMENT, ROUTER_DEPLOYMENT
from contract.spec import DeploymentMode, Engine, Spec

NS_LABEL = "kubernetes.io/metadata.name"
INTERNET_IP = "203.0.113.10"  # a public address (documentation range) for "the internet"
NODE_LOCAL_DNS_IP = "169.254.20.10"
Port = tuple[str, int]  # (protocol, number)
DNS_PORTS: tuple[Port, ...] = (("UDP", 53), ("TCP", 53))


@dataclass(frozen=True)
class Endpoint:
    name: str
    namespace: str | None  # None: not a pod (an address outside the cluster)
    labels: dict[str, str] = field(default_factory=dict, hash=False)
    ports: tuple[Port, ...] = ()  # what it listens on
    ip: str = ""

    @property
    def pod(self) -> bool:
        return self.namespace is not None


class UnsupportedPolicy(ValueError):
    """A policy uses a selector form this evaluator does not implement (matchExpressions)."""


def _selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    selector = selector or {}
    if selector.get("matchExpressions"):
        raise UnsupportedPolicy(f"matchExpressions {selector['matchExpressions']}: only "
                                "matchLabels are evaluated; extend infra/reachability.py")
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def _in_block(ip: str, block: dict[str, Any]) -> bool:
    addr = ipaddress.ip_address(ip)
    if addr not in ipaddress.ip_network(block["cidr"]):
        return False
    return not any(addr in ipaddress.ip_network(e) for e in block.get("except") or [])


def _peer_matches(peer: dict[str, Any], other: Endpoint, policy_ns: str) -> bool:
    if "ipBlock" in peer:
        return bool(other.ip) and _in_block(other.ip, peer["ipBlock"])
    if not other.pod:
        return False
    if "namespaceSelector" in peer:
        if not _selects(peer["namespaceSelector"], {NS_LABEL: other.namespace or ""}):
            return False
    elif other.namespace != policy_ns:
        return False
    return _selects(peer.get("podSelector"), other.labels)


def _port_matches(rule_ports: list[dict[str, Any]] | None, port: Port) -> bool:
    if not rule_ports:
        return True
    return any(p.get("protocol", "TCP") == port[0] and p.get("port") in (None, port[1])
               for p in rule_ports)


def _policy_types(body: dict[str, Any]) -> list[str]:
    return body.get("policyTypes") or (["Ingress"] + (["Egress"] if "egress" in body else []))


def _admits(policies: list[dict[str, Any]], me: Endpoint, other: Endpoint, port: Port,
            direction: str) -> bool:
    """Does ``me`` let ``other`` in (Ingress) / out to (Egress) on ``port``?"""
    if not me.pod:
        return True
    kind, rules_key, peers_key = (("Ingress", "ingress", "from") if direction == "ingress"
                                  else ("Egress", "egress", "to"))
    selecting = [p for p in policies if p["metadata"].get("namespace") == me.namespace
                 and kind in _policy_types(p["spec"]) and _selects(p["spec"].get("podSelector"), me.labels)]
    if not selecting:
        return True
    for p in selecting:
        for rule in p["spec"].get(rules_key) or []:
            peers = rule.get(peers_key)
            peer_ok = not peers or any(_peer_matches(peer, other, me.namespace or "") for peer in peers)
            if peer_ok and _port_matches(rule.get("ports"), port):
                return True
    return False


def reachable(policies: list[dict[str, Any]], src: Endpoint, dst: Endpoint, port: Port) -> bool:
    return (_admits(policies, src, dst, port, "egress")
            and _admits(policies, dst, src, port, "ingress"))


def guarded(policies: list[dict[str, Any]], endpoint: Endpoint, kind: str) -> bool:
    """A policy of ``kind`` (Ingress / Egress) selects it: those flows are the program's to
    allow or deny."""
    return endpoint.pod and any(
        p["metadata"].get("namespace") == endpoint.namespace and kind in _policy_types(p["spec"])
        and _selects(p["spec"].get("podSelector"), endpoint.labels) for p in policies)


# ---- the pods and the outsiders -------------------------------------------------------------

def endpoints(spec: Spec, objects: list[dict[str, Any]]) -> list[Endpoint]:
    """The stack's pods (from the rendered workloads) and everyone they talk to or guard against."""
    out: list[Endpoint] = []
    for i, obj in enumerate(o for o in objects if o.get("kind") in ("Deployment", "StatefulSet")):
        template = obj["spec"]["template"]
        ports = tuple((p.get("protocol", "TCP"), p["containerPort"])
                      for c in template["spec"]["containers"] for p in c.get("ports") or [])
        out.append(Endpoint(obj["metadata"]["name"], obj["metadata"]["namespace"],
                            dict(template["metadata"]["labels"]), ports, f"10.244.{i}.10"))
    o = spec.observability
    out += [
        Endpoint("prometheus", o.prometheus_namespace, dict(naming.PROMETHEUS_POD_LABELS),
                 (("TCP", naming.PROMETHEUS_PORT),), "10.244.100.10"),
        Endpoint("grafana", o.prometheus_namespace, {"app.kubernetes.io/name": "grafana"},
                 (), "10.244.100.11"),
        Endpoint("keda-operator", spec.cluster.keda_namespace, {"app": "keda-operator"},
                 (), "10.244.101.10"),
        *[Endpoint(f"producer@{ns}", ns, {"app": "producer"}, (), f"10.244.{102 + j}.10")
          for j, ns in enumerate(spec.queue.producer_namespaces)],
        Endpoint(f"other-pod@{spec.namespace}", spec.namespace, {"app": "other"}, (), "10.244.120.10"),
        Endpoint("other-pod@default", "default", {"app": "other"}, (), "10.244.121.10"),
        Endpoint("kube-dns", "kube-system", {"k8s-app": "kube-dns"}, DNS_PORTS, "10.244.122.10"),
        Endpoint("node-local-dns", None, {}, DNS_PORTS, NODE_LOCAL_DNS_IP),
        Endpoint("internet", None, {}, (("TCP", 443),) + (
            (("TCP", spec.queue.port),) if spec.queue.kind == "external" else ()), INTERNET_IP),
    ]
    return out


def needed_flows(spec: Spec) -> set[tuple[str, str, Port]]:
    """(source, destination, port) the pipeline uses, from the spec alone (not the policies)."""
    mono = spec.deployment_mode is DeploymentMode.monolithic
    workers = naming.MONOLITHIC_NAME if mono else naming.WORKER_NAME
    q, w = spec.queue, spec.worker_pool
    servers = [] if mono else spec.inference_servers
    # While migrating: the monolithic pool beside the split one, and the router (queue only).
    migrating = sizing.migrating(spec)
    extra_pools = [MONOLITHIC_POOL_DEPLOYMENT] if migrating else []
    router = [ROUTER_DEPLOYMENT] if migrating else []
    # DNS for every pod of the namespace (allow-dns selects them all, ours or not).
    ours = [workers, *extra_pools, *router, *([naming.REDIS_NAME] if q.kind == "in-cluster" else []),
            *[s.name for s in servers], f"other-pod@{spec.namespace}"]
    flows: set[tuple[str, str, Port]] = set()
    for pod in ours:
        for port in DNS_PORTS:
            flows |= {(pod, "kube-dns", port), (pod, "node-local-dns", port)}
    for s in servers:
        flows.add(("prometheus", s.name, ("TCP", s.port)))
        if s.engine is Engine.vllm:  # the model download from Hugging Face
            flows.add((s.name, "internet", ("TCP", 443)))
    if not mono:
        flows.add((workers, spec.worker_server.name, ("TCP", spec.worker_server.port)))
    flows.add(("prometheus", workers, ("TCP", w.metrics_port)))
    if mono or spec.output_store.kind == "s3":  # model download / bucket uploads
        flows.add((workers, "internet", ("TCP", 443)))
    for pool in extra_pools:
        flows.add(("prometheus", pool, ("TCP", w.metrics_port)))
        flows.add((pool, "internet", ("TCP", 443)))  # the model download
    if q.kind == "external":
        flows |= {(pod, "internet", ("TCP", q.port)) for pod in (workers, *extra_pools, *router)}
    else:
        flows |= {(pod, naming.REDIS_NAME, ("TCP", q.port)) for pod in (workers, *extra_pools, *router)}
        if workers_scaled(spec):
            flows.add(("keda-operator", naming.REDIS_NAME, ("TCP", q.port)))
        flows |= {(f"producer@{ns}", naming.REDIS_NAME, ("TCP", q.port))
                  for ns in q.producer_namespaces}
    if spec.observability.install_kube_prometheus_stack:
        flows.add(("grafana", "prometheus", ("TCP", naming.PROMETHEUS_PORT)))
    if scaled_servers(spec):  # KEDA's prometheus scaler runs the server's query
        flows.add(("keda-operator", "prometheus", ("TCP", naming.PROMETHEUS_PORT)))
    return flows


# ---- the matrix ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Cell:
    src: str
    dst: str
    port: Port
    allowed: bool
    needed: bool

    @property
    def wrong(self) -> bool:
        return self.allowed != self.needed


def matrix(spec: Spec, objects: list[dict[str, Any]]) -> list[Cell]:
    """Every (source, destination port) pair where a policy guards either end."""
    policies = [o for o in objects if o.get("kind") == "NetworkPolicy"]
    eps = endpoints(spec, objects)
    needed = needed_flows(spec)
    cells = []
    for src in eps:
        if not src.pod:
            continue
        for dst in eps:
            if dst is src:
                continue
            for port in dst.ports:
                if not (guarded(policies, src, "Egress") or guarded(policies, dst, "Ingress")):
                    continue
                cells.append(Cell(src.name, dst.name, port, reachable(policies, src, dst, port),
                                  (src.name, dst.name, port) in needed))
    return cells


def unmet(spec: Spec, objects: list[dict[str, Any]]) -> list[str]:
    """Needed flows denied and unneeded ones allowed (empty: the policies are exact)."""
    cells = matrix(spec, objects)
    seen = {(c.src, c.dst, c.port) for c in cells}
    out = [f"{c.src} -> {c.dst} {c.port[0]}/{c.port[1]}: "
           + ("needed but denied" if c.needed else "allowed but not needed")
           for c in cells if c.wrong]
    # A needed flow between two pods no policy guards (an existing cluster's Prometheus and
    # KEDA) is not in the matrix: it must still exist and be open.
    policies = [o for o in objects if o.get("kind") == "NetworkPolicy"]
    eps = {e.name: e for e in endpoints(spec, objects)}
    for s, d, p in sorted(needed_flows(spec) - seen):
        if s not in eps or d not in eps or p not in eps[d].ports:
            out.append(f"{s} -> {d} {p[0]}/{p[1]}: needed but no such endpoint or port")
        elif not reachable(policies, eps[s], eps[d], p):
            out.append(f"{s} -> {d} {p[0]}/{p[1]}: needed but denied")
    return out


def render_matrix(cells: list[Cell]) -> list[str]:
    """Rows: sources; columns: destination:port. Y allowed and needed, '.' denied and not
    needed; a wrong cell shows ALLOWED (not needed) or DENIED (needed)."""
    cols = sorted({(c.dst, c.port) for c in cells}, key=lambda x: (x[0], x[1][1], x[1][0]))
    rows = sorted({c.src for c in cells})
    by = {(c.src, c.dst, c.port): c for c in cells}
    heads = [f"{d}:{p[1]}{'/udp' if p[0] == 'UDP' else ''}" for d, p in cols]
    width = max(len(r) for r in rows) + 2
    out = [" " * width + " ".join(heads)]
    for r in rows:
        marks = []
        for (d, p), h in zip(cols, heads, strict=True):
            c = by.get((r, d, p))
            mark = "-" if c is None else ("Y" if c.allowed and c.needed else "." if not c.allowed
                                          and not c.needed else "ALLOWED" if c.allowed else "DENIED")
            marks.append(mark.center(len(h)))
        out.append((r.ljust(width) + " ".join(marks)).rstrip())
    return out
