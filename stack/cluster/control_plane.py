"""The local cluster's processes: etcd, kube-apiserver, kube-controller-manager, kube-scheduler
and kwok, on loopback, under the local stack's supervisord (stack/supervisor.py), each with a
health check. The API server serves TLS with the cluster's own CA and runs the admission plugins a
managed cluster has (its defaults, Pod Security among them, plus NodeRestriction)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from stack.cluster.nodes import MANAGED_LABEL, MANAGED_VALUE
from stack.cluster.pki import Pki
from stack.cluster.tools import GoTools
from stack.component import Component, HealthCheck
from stack.paths import StackPaths

HOST = "127.0.0.1"
SERVICE_CIDR = "10.96.0.0/16"  # pki.SERVICE_IP is its first address
POD_CIDR = "10.244.0.1/16"  # kwok's pod IPs: objects only, nothing listens on them
CONTEXT = "splitstack-local"
# The admission plugins on by default in Kubernetes 1.34 (NamespaceLifecycle, LimitRanger,
# ServiceAccount, PodSecurity, Priority, DefaultTolerationSeconds, DefaultStorageClass,
# StorageObjectInUseProtection, PersistentVolumeClaimResize, RuntimeClass, the certificate
# plugins, DefaultIngressClass, MutatingAdmissionWebhook, ValidatingAdmissionPolicy,
# ValidatingAdmissionWebhook, ResourceQuota), plus what managed clusters add on top.
EXTRA_ADMISSION = "NodeRestriction"
NODE_MONITOR_GRACE_S = 20  # a node whose heartbeats stop is NotReady after this (default 50 s)


@dataclass(frozen=True)
class Ports:
    etcd: int = 23790
    etcd_peer: int = 23800
    etcd_metrics: int = 23791
    apiserver: int = 26443
    controller_manager: int = 20257
    scheduler: int = 20259
    kwok: int = 20247


@dataclass(frozen=True)
class ClusterLayout:
    paths: StackPaths
    ports: Ports

    @property
    def pki(self) -> Pki:
        return Pki(self.paths.root / "pki")

    @property
    def kubeconfig(self) -> Path:
        return self.paths.root / "kubeconfig"

    @property
    def kwok_config(self) -> Path:
        return self.paths.config / "kwok.yaml"

    @property
    def server(self) -> str:
        return f"https://{HOST}:{self.ports.apiserver}"


def write_kubeconfig(layout: ClusterLayout) -> Path:
    """An admin kubeconfig (certificate files by path; 0600)."""
    pki = layout.pki
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": CONTEXT,
        "clusters": [{"name": CONTEXT, "cluster": {
            "server": layout.server, "certificate-authority": str(pki.ca_crt)}}],
        "users": [{"name": CONTEXT, "user": {
            "client-certificate": str(pki.admin_crt), "client-key": str(pki.admin_key)}}],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": CONTEXT}}],
    }
    path = layout.kubeconfig
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path


def write_kwok_config(layout: ClusterLayout, tools: GoTools) -> Path:
    """kwok's configuration: the stages of its module (tools/build-go-tools.sh copies them)."""
    path = layout.kwok_config
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(tools.kwok_stages.read_text())  # no KwokConfiguration: its defaults hold
    return path


def components(layout: ClusterLayout, tools: GoTools) -> list[Component]:
    p, pki, kube = layout.ports, layout.pki, str(layout.kubeconfig)
    etcd_url = f"http://{HOST}:{p.etcd}"
    peer_url = f"http://{HOST}:{p.etcd_peer}"
    etcd = [
        tools.path("etcd"), "--name=node0", f"--data-dir={layout.paths.data / 'etcd'}",
        f"--listen-client-urls={etcd_url}", f"--advertise-client-urls={etcd_url}",
        f"--listen-peer-urls={peer_url}", f"--initial-advertise-peer-urls={peer_url}",
        f"--initial-cluster=node0={peer_url}", "--auto-compaction-retention=1",
        "--quota-backend-bytes=2147483648", "--log-level=warn",
        f"--listen-metrics-urls=http://{HOST}:{p.etcd_metrics}",
    ]
    apiserver = [
        tools.path("kube-apiserver"), f"--etcd-servers={etcd_url}", "--etcd-prefix=/registry",
        f"--bind-address={HOST}", f"--advertise-address={HOST}", f"--secure-port={p.apiserver}",
        f"--tls-cert-file={pki.server_crt}", f"--tls-private-key-file={pki.server_key}",
        f"--client-ca-file={pki.ca_crt}",
        f"--service-account-key-file={pki.sa_pub}", f"--service-account-signing-key-file={pki.sa_key}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-cluster-ip-range={SERVICE_CIDR}", "--authorization-mode=Node,RBAC",
        f"--enable-admission-plugins={EXTRA_ADMISSION}", "--allow-privileged=true",
        # The API server's own Service endpoints would be 127.0.0.1, which Endpoints refuse.
        "--endpoint-reconciler-type=none",
        f"--kubelet-certificate-authority={pki.ca_crt}", "--v=0",
    ]
    controller_manager = [
        tools.path("kube-controller-manager"), f"--kubeconfig={kube}",
        f"--authentication-kubeconfig={kube}", f"--authorization-kubeconfig={kube}",
        f"--bind-address={HOST}", f"--secure-port={p.controller_manager}", "--leader-elect=false",
        f"--root-ca-file={pki.ca_crt}", f"--service-account-private-key-file={pki.sa_key}",
        f"--cluster-signing-cert-file={pki.ca_crt}", f"--cluster-signing-key-file={pki.ca_key}",
        f"--node-monitor-grace-period={NODE_MONITOR_GRACE_S}s", "--v=0",
    ]
    scheduler = [
        tools.path("kube-scheduler"), f"--kubeconfig={kube}",
        f"--authentication-kubeconfig={kube}", f"--authorization-kubeconfig={kube}",
        f"--bind-address={HOST}", f"--secure-port={p.scheduler}", "--leader-elect=false", "--v=0",
    ]
    kwok = [
        tools.path("kwok"), f"--kubeconfig={kube}", f"--config={layout.kwok_config}",
        f"--manage-nodes-with-label-selector={MANAGED_LABEL}={MANAGED_VALUE}",
        f"--server-address={HOST}:{p.kwok}", f"--node-ip={HOST}", f"--cidr={POD_CIDR}",
        "--node-lease-duration-seconds=40",
    ]
    https = lambda port, path, ca: HealthCheck("http", f"https://{HOST}:{port}{path}", ca_file=ca)  # noqa: E731
    return [
        Component("etcd", "cluster", etcd, HealthCheck("http", f"{etcd_url}/health"), etcd_url,
                  p.etcd, priority=10),
        Component("kube-apiserver", "cluster", apiserver,
                  https(p.apiserver, "/readyz", str(pki.ca_crt)), layout.server, p.apiserver,
                  priority=20),
        Component("kube-controller-manager", "cluster", controller_manager,
                  https(p.controller_manager, "/healthz", "none"),
                  f"https://{HOST}:{p.controller_manager}", p.controller_manager, priority=30),
        Component("kube-scheduler", "cluster", scheduler, https(p.scheduler, "/healthz", "none"),
                  f"https://{HOST}:{p.scheduler}", p.scheduler, priority=30),
        Component("kwok", "cluster", kwok, HealthCheck("http", f"http://{HOST}:{p.kwok}/healthz"),
                  f"http://{HOST}:{p.kwok}", p.kwok, priority=40),
    ]
