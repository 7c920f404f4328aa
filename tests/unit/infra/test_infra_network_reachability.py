"""Who can reach whom, computed from the rendered NetworkPolicies (infra/reachability.py) on the
real dev and prod renders and on variants of them and of every cloud x mode: every flow the
pipeline needs is allowed, every other flow that touches a guarded pod is denied. Run with -s to
see each matrix."""

from __future__ import annotations

import copy

import pytest

from contract.spec import Spec
from infra import reachability as r
from infra.components.network_policies import policies
from infra.components.observability import prometheus_ingress
from infra.render import capture

from .cluster_variants import derive
from .infra_helpers import ROOT, make_spec

VARIANTS = {
    "dev": lambda: derive("dev"),
    "prod": lambda: derive("prod"),
    # One free GPU: the server scales into it with KEDA's prometheus scaler.
    "dev-server-scales": lambda: derive("dev", {"gpu_node_pool.node_count": 2}),
    "dev-keda-elsewhere": lambda: derive("dev", {"gpu_node_pool.node_count": 2,
                                                 "worker_pool.max_replicas": 4,
                                                 "cluster.keda_namespace": "autoscaling",
                                                 "observability.prometheus_namespace": "metrics"}),
    "prod-producers": lambda: derive("prod", {"queue.producer_namespaces": ["ingest"]}),
    "prod-s3": lambda: derive("prod", {"output_store.kind": "s3", "output_store.bucket": "outs"}),
    "prod-monolithic": lambda: derive("prod", {"deployment_mode": "monolithic", "worker_pool.replicas": 1,
                                                "worker_pool.max_replicas": 2}),
    # Migrating: both pools and the router (migration.monolithic_workers).
    "dev-migrating": lambda: derive("dev", {"gpu_node_pool.node_count": 2, "migration.monolithic_workers": 1}),
    "prod-migrating-s3": lambda: derive("prod", {"gpu_node_pool.node_count": 4, "migration.monolithic_workers": 2,
                                                  "output_store.kind": "s3", "output_store.bucket": "outs"}),
    "existing-split": lambda: make_spec("existing", "split"),
    "existing-monolithic": lambda: make_spec("existing", "monolithic"),
    "eks-split": lambda: make_spec("eks", "split"),
    "gke-monolithic": lambda: make_spec("gke", "monolithic"),
}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_policies_allow_exactly_the_needed_flows(name, capsys):
    spec: Spec = VARIANTS[name]()
    objects = capture(spec, ROOT).objects
    cells = r.matrix(spec, objects)
    with capsys.disabled():
        print(f"\n{name}: rows source, columns destination:port; Y allowed (needed), . denied")
        print("\n".join(r.render_matrix(cells)))
    assert r.unmet(spec, objects) == []
    allowed = {(c.src, c.dst) for c in cells if c.allowed}
    # The flows this issue is about, where the variant has them.
    if spec.cluster.keda_namespace != "keda" or name == "dev-server-scales":
        assert ("keda-operator", "prometheus") in allowed
        assert ("keda-operator", "redis") in allowed or not spec.worker_pool.max_replicas
    assert ("other-pod@default", "redis") not in allowed
    assert not any(c.allowed for c in cells if c.src == f"other-pod@{spec.namespace}"
                   and c.dst not in ("kube-dns", "node-local-dns"))


def test_keda_in_its_spec_namespace_reaches_prometheus_and_redis():
    spec = VARIANTS["dev-keda-elsewhere"]()
    objects = capture(spec, ROOT).objects
    cells = {(c.src, c.dst): c for c in r.matrix(spec, objects)}
    assert cells[("keda-operator", "prometheus")].allowed
    assert cells[("keda-operator", "redis")].allowed
    (prom,) = [o for o in objects if o["kind"] == "NetworkPolicy"
               and o["metadata"]["name"] == "prometheus-ingress"]
    assert prom["metadata"]["namespace"] == "metrics"
    peers = [p["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
             for p in prom["spec"]["ingress"][0]["from"]]
    assert "autoscaling" in peers


def test_the_old_prometheus_policy_is_caught_denying_keda():
    """Before: prometheus-ingress admitted only monitoring and the stack's namespace. The
    computation must see KEDA's query blocked, so the test above is not vacuous."""
    spec = VARIANTS["dev-server-scales"]()
    objects = copy.deepcopy(capture(spec, ROOT).objects)
    (prom,) = [o for o in objects if o["kind"] == "NetworkPolicy"
               and o["metadata"]["name"] == "prometheus-ingress"]
    prom["spec"]["ingress"][0]["from"] = prom["spec"]["ingress"][0]["from"][:2]
    assert r.unmet(spec, objects) == ["keda-operator -> prometheus TCP/9090: needed but denied"]


def test_a_loose_policy_is_caught_allowing_too_much():
    spec = derive("prod")
    objects = copy.deepcopy(capture(spec, ROOT).objects)
    (redis,) = [o for o in objects if o["kind"] == "NetworkPolicy"
                and o["metadata"]["name"] == "redis-ingress"]
    redis["spec"]["ingress"].append({"ports": [{"protocol": "TCP", "port": 6379}]})  # from anyone
    wrong = r.unmet(spec, objects)
    assert "other-pod@default -> redis TCP/6379: allowed but not needed" in wrong
    assert "grafana -> redis TCP/6379: allowed but not needed" in wrong


def test_workers_reach_only_the_server_they_call():
    spec = derive("prod")
    body = policies(spec)
    assert [rule["from"] for rule in body["qwen-vl-ingress"]["ingress"]] == [
        [{"namespace_selector": {"match_labels": {"kubernetes.io/metadata.name": "monitoring"}},
          "pod_selector": {"match_labels": {"app.kubernetes.io/name": "prometheus"}}}]]
    (to_server,) = [e for e in body["worker-egress"]["egress"]
                    if any("pod_selector" in p for p in e["to"])
                    and e["ports"] == [{"protocol": "TCP", "port": 8000}]]
    assert to_server["to"] == [{"pod_selector": {"match_labels": {
        "app.kubernetes.io/name": "inference-server", "app.kubernetes.io/instance": "mineru-vlm",
        "app.kubernetes.io/part-of": "splitstack"}}}]


def test_keda_is_admitted_only_where_it_scales_something():
    dev = derive("dev")  # no worker max_replicas, no free GPU: no ScaledObject at all
    assert all("keda" not in str(rule) for rule in policies(dev)["redis-ingress"]["ingress"])
    assert all("keda" not in str(p) for p in prometheus_ingress(dev)["ingress"][0]["from"])


def test_evaluator_follows_networkpolicy_semantics():
    """namespaceSelector + podSelector in one peer is AND; an ipBlock's except holes; a pod no
    policy selects admits anything; ports without protocol mean TCP."""
    a = r.Endpoint("a", "ns1", {"app": "a"}, (("TCP", 80),), "10.0.0.1")
    b = r.Endpoint("b", "ns2", {"app": "b"}, (), "10.0.0.2")
    c = r.Endpoint("c", "ns2", {"app": "c"}, (), "10.0.0.3")
    net = r.Endpoint("net", None, {}, (("TCP", 443),), "203.0.113.10")
    pol = {"kind": "NetworkPolicy", "metadata": {"name": "p", "namespace": "ns1"}, "spec": {
        "podSelector": {"matchLabels": {"app": "a"}}, "policyTypes": ["Ingress", "Egress"],
        "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {
            "kubernetes.io/metadata.name": "ns2"}}, "podSelector": {"matchLabels": {"app": "b"}}}],
            "ports": [{"port": 80}]}],
        "egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["203.0.113.0/24"]}}]}]}}
    assert r.reachable([pol], b, a, ("TCP", 80))
    assert not r.reachable([pol], c, a, ("TCP", 80))
    assert not r.reachable([pol], b, a, ("UDP", 80))
    assert not r.reachable([pol], a, net, ("TCP", 443))  # in the except
    assert r.reachable([pol], b, c, ("TCP", 80))  # ns2 has no policy
    with pytest.raises(r.UnsupportedPolicy, match="matchExpressions"):
        r.reachable([{**pol, "spec": {**pol["spec"], "podSelector": {
            "matchExpressions": [{"key": "app", "operator": "Exists"}]}}}], b, a, ("TCP", 80))
