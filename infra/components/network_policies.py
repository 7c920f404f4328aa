"""NetworkPolicies: default deny, then only the flows the pipeline needs.

Allowed: DNS for everyone (kube-dns pods, and NodeLocal DNSCache's link-local address);
workers -> the port of the server they call (worker_pool.server); workers, KEDA (when it
scales the workers; cluster.keda_namespace) and the producers' namespaces -> Redis; Prometheus
(observability.prometheus_namespace) -> the metrics ports; servers (and monolithic workers) ->
HTTPS for the model download; workers -> HTTPS when outputs go to a bucket. While migrating
(migration.monolithic_workers) both pools get their mode's flows, and the router -> Redis.
Nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from contract import naming, sizing
from contract.cluster_fit import workers_scaled
from contract.spec import DeploymentMode, Spec
from infra.components.base import child, metadata
from infra.components.migration import router_labels

HTTPS = {"protocol": "TCP", "port": 443}
# The model download and bucket uploads go to the internet, never to private ranges.
PUBLIC_INTERNET = {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"]}
# NodeLocal DNSCache answers on a link-local address on every node (GKE and the upstream
# manifest use 169.254.20.10), not from the kube-dns pods: with it on, a pod-selector-only DNS
# rule blocks every lookup (https://kubernetes.io/docs/tasks/administer-cluster/nodelocaldns/).
NODE_LOCAL_DNS = "169.254.20.10/32"


def _ns(name: str) -> dict:
    return {"namespace_selector": {"match_labels": {"kubernetes.io/metadata.name": name}}}


def _pods(labels: dict[str, str]) -> dict:
    return {"pod_selector": {"match_labels": labels}}


def _tcp(port: int) -> dict:
    return {"protocol": "TCP", "port": port}


def policies(spec: Spec) -> dict[str, dict]:
    """name -> NetworkPolicy spec (snake_case dicts)."""
    mono = spec.deployment_mode is DeploymentMode.monolithic
    migrating = sizing.migrating(spec)
    workers = naming.worker_labels(mono)
    # Pods that read and ack the queue: the workers (both pools while migrating) and the router.
    queue_clients = [_pods(workers)] + ([_pods(naming.worker_labels(True)), _pods(router_labels())]
                                        if migrating else [])
    prometheus = {**_ns(naming.prometheus_namespace(spec)),
                  "pod_selector": {"match_labels": dict(naming.PROMETHEUS_POD_LABELS)}}
    out: dict[str, dict] = {
        "default-deny": {"pod_selector": {}, "policy_types": ["Ingress", "Egress"]},
        "allow-dns": {
            "pod_selector": {}, "policy_types": ["Egress"],
            "egress": [{"to": [{**_ns("kube-system"),
                                "pod_selector": {"match_labels": {"k8s-app": "kube-dns"}}},
                               {"ip_block": {"cidr": NODE_LOCAL_DNS}}],
                        "ports": [{"protocol": "UDP", "port": 53}, _tcp(53)]}],
        },
    }
    called = None if mono else spec.worker_server  # the one server the workers call
    for server in [] if mono else spec.inference_servers:
        sel = naming.server_labels(server)
        ingress = [{"from": [prometheus], "ports": [_tcp(server.port)]}]
        if server is called:
            ingress.insert(0, {"from": [_pods(workers)], "ports": [_tcp(server.port)]})
        out[f"{server.name}-ingress"] = {
            "pod_selector": {"match_labels": sel}, "policy_types": ["Ingress"], "ingress": ingress}
        if server in sizing.gpu_servers(spec):  # a simulator downloads nothing
            out[f"{server.name}-egress"] = {
                "pod_selector": {"match_labels": sel}, "policy_types": ["Egress"],
                "egress": [{"to": [{"ip_block": PUBLIC_INTERNET}], "ports": [HTTPS]}],
            }
    if spec.queue.kind == "external":
        queue_egress = {"to": [{"ip_block": {"cidr": "0.0.0.0/0"}}], "ports": [_tcp(spec.queue.port)]}
    else:
        queue_egress = {"to": [_pods(naming.redis_labels())], "ports": [_tcp(spec.queue.port)]}
    worker_egress: list[dict] = []
    if mono or spec.output_store.kind == "s3":
        worker_egress.append({"to": [{"ip_block": PUBLIC_INTERNET}], "ports": [HTTPS]})
    if called is not None:
        worker_egress.append({"to": [_pods(naming.server_labels(called))],
                              "ports": [_tcp(called.port)]})
    worker_egress.append(queue_egress)
    if spec.queue.kind != "external":
        out["redis-ingress"] = {
            "pod_selector": {"match_labels": naming.redis_labels()}, "policy_types": ["Ingress"],
            "ingress": [{"from": queue_clients, "ports": [_tcp(spec.queue.port)]},
                        # KEDA's operator reads the stream's lag to scale the workers.
                        *([{"from": [_ns(naming.keda_namespace(spec))],
                            "ports": [_tcp(spec.queue.port)]}] if workers_scaled(spec) else []),
                        # Whoever enqueues PDFs: the bench or an application, maybe elsewhere.
                        *([{"from": [_ns(n) for n in spec.queue.producer_namespaces],
                            "ports": [_tcp(spec.queue.port)]}]
                          if spec.queue.producer_namespaces else [])],
        }
    out["worker-ingress"] = {
        "pod_selector": {"match_labels": workers}, "policy_types": ["Ingress"],
        "ingress": [{"from": [prometheus], "ports": [_tcp(spec.worker_pool.metrics_port)]}],
    }
    out["worker-egress"] = {
        "pod_selector": {"match_labels": workers}, "policy_types": ["Egress"],
        "egress": worker_egress,
    }
    if migrating:
        # The monolithic pool: its mode's flows (the model download, the queue), no server.
        mono_workers = naming.worker_labels(True)
        out["worker-gpu-ingress"] = {
            "pod_selector": {"match_labels": mono_workers}, "policy_types": ["Ingress"],
            "ingress": [{"from": [prometheus], "ports": [_tcp(spec.worker_pool.metrics_port)]}],
        }
        out["worker-gpu-egress"] = {
            "pod_selector": {"match_labels": mono_workers}, "policy_types": ["Egress"],
            "egress": [{"to": [{"ip_block": PUBLIC_INTERNET}], "ports": [HTTPS]}, queue_egress],
        }
        out["router-egress"] = {
            "pod_selector": {"match_labels": router_labels()}, "policy_types": ["Egress"],
            "egress": [queue_egress],
        }
    return out


@dataclass(frozen=True)
class NetworkPoliciesArgs:
    spec: Spec


class NetworkPoliciesComponent(pulumi.ComponentResource):
    def __init__(self, name: str, args: NetworkPoliciesArgs,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("splitstack:infra:NetworkPolicies", name, None, opts)
        ns = args.spec.namespace
        self.policies = [
            k8s.networking.v1.NetworkPolicy(
                f"{name}-{policy}",
                metadata=metadata(policy, ns, naming.labels("network-policy", policy)),
                spec=body,
                opts=child(self),
            )
            for policy, body in policies(args.spec).items()
        ]
        self.register_outputs({"count": len(self.policies)})
