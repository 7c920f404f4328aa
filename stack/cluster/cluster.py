"""`splitstack cluster up|down|status`: the local cluster as one unit.

``up`` starts the control plane from an empty etcd (every `up` is a fresh cluster), waits until
each process is healthy, then creates what a managed cluster would already have: the CRDs of the
operators the program uses (KEDA, prometheus-operator; from their pinned modules, see
tools/build-go-tools.sh), the StorageClass kwok's volume stages provision for, and the nodes of
the shape stack (stack/cluster/nodes.py), and waits until every node is Ready.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from urllib3.exceptions import HTTPError as Urllib3Error

from contract.extras import require
from contract.spec import Spec
from stack.cluster.control_plane import ClusterLayout, Ports, components, write_kubeconfig, write_kwok_config
from stack.cluster.nodes import shaped_nodes
from stack.cluster.pki import ensure_pki
from stack.cluster.tools import GoTools, go_tools
from stack.component import SetupError
from stack.health import probe
from stack.paths import StackPaths
from stack.supervisor import Supervisor, sweep_strays, tail

STATE_DIR = ".state/cluster"
STORAGE_CLASS = "kwok-volume"  # the class kwok's volume stages provision (and delete) claims of


@dataclass
class ClusterStatus:
    running: bool
    kubeconfig: Path
    server: str
    components: dict[str, tuple[bool, str]] = field(default_factory=dict)
    nodes: list[tuple[str, bool, dict[str, str]]] = field(default_factory=list)


def _kubernetes() -> Any:
    return require("kubernetes", "cluster", "the local cluster")


def storage_class() -> dict:
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": STORAGE_CLASS,
                         "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
            "provisioner": "kwok.x-k8s.io/volume", "reclaimPolicy": "Delete",
            "volumeBindingMode": "Immediate", "allowVolumeExpansion": True}


class LocalCluster:
    def __init__(self, project_root: Path, state_dir: str = STATE_DIR, ports: Ports | None = None,
                 log: Callable[[str], None] = lambda _: None) -> None:
        self.root = project_root
        self.layout = ClusterLayout(StackPaths.at(state_dir, project_root), ports or Ports())
        self.supervisor = Supervisor(self.layout.paths)
        self.log = log

    @property
    def kubeconfig(self) -> Path:
        return self.layout.kubeconfig

    def api(self) -> Any:
        k = _kubernetes()
        return k.config.new_client_from_config(config_file=str(self.kubeconfig))

    # -- up / down ----------------------------------------------------------------------------
    def up(self, shape: Spec, timeout_s: float = 180) -> ClusterStatus:
        tools = go_tools(self.root)
        nodes = shaped_nodes(shape)  # refuse a shape before anything starts
        if self.supervisor.running():
            raise SetupError(f"the local cluster is already running ({self.layout.server}); "
                             "`splitstack cluster down` first")
        paths = self.layout.paths
        sweep_strays(paths.stack_id, grace_s=5, supervisord_log=paths.logs / "supervisord.log")
        shutil.rmtree(paths.data, ignore_errors=True)  # a fresh etcd: every `up` is a new cluster
        paths.make()
        ensure_pki(self.layout.pki.dir)
        write_kubeconfig(self.layout)
        write_kwok_config(self.layout, tools)
        comps = components(self.layout, tools)
        self.log(f"starting {', '.join(c.name for c in comps)} ({tools.versions['KUBERNETES_VERSION']})")
        self.supervisor.start(comps, {"PATH": "/usr/bin:/bin"})
        try:
            self._wait_healthy(comps, timeout_s)
            api = self.api()
            self._create_cluster_objects(api, tools)
            self._create_nodes(api, nodes, timeout_s)
        except BaseException:
            self.down()
            raise
        return self.status()

    def _wait_healthy(self, comps: list, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        pending = list(comps)
        while pending:
            info = self.supervisor.process_info()
            for c in list(pending):
                state = info.get(c.name, {}).get("statename")
                if state in ("FATAL", "EXITED", "BACKOFF"):
                    raise SetupError(f"cluster component {c.name} exited ({state}); its log "
                                     f"{self.layout.paths.log(c.name)}:\n{tail(self.layout.paths.log(c.name))}")
                if probe(c.health, 2.0)[0]:
                    pending.remove(c)
                    self.log(f"{c.name}: healthy")
            if pending and time.monotonic() > deadline:
                names = ", ".join(c.name for c in pending)
                raise SetupError(f"cluster components not healthy after {timeout_s:.0f} s: {names}; "
                                 f"logs in {self.layout.paths.logs}")
            time.sleep(0.5)

    def _create_cluster_objects(self, api: Any, tools: GoTools) -> None:
        k = _kubernetes()
        ext = k.client.ApiextensionsV1Api(api)
        names = []
        for path in sorted(tools.crds.glob("*.yaml")):
            body = yaml.safe_load(path.read_text())
            ext.create_custom_resource_definition(body)
            names.append(body["metadata"]["name"])
        deadline = time.monotonic() + 60
        for name in names:
            while True:
                crd = ext.read_custom_resource_definition(name)
                if any(c.type == "Established" and c.status == "True"
                       for c in (crd.status.conditions or [])):
                    break
                if time.monotonic() > deadline:
                    raise SetupError(f"CRD {name} not established in 60 s")
                time.sleep(0.3)
        self.log(f"CRDs: {', '.join(names)}")
        k.client.StorageV1Api(api).create_storage_class(storage_class())
        self.log(f"StorageClass {STORAGE_CLASS} (kwok's volume stages provision its claims)")

    def _create_nodes(self, api: Any, nodes: list[dict], timeout_s: float) -> None:
        core = _kubernetes().client.CoreV1Api(api)
        for node in nodes:
            core.create_node(node)
        deadline = time.monotonic() + timeout_s
        while True:
            ready = {n.metadata.name for n in core.list_node().items
                     if any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])}
            if all(n["metadata"]["name"] in ready for n in nodes):
                break
            if time.monotonic() > deadline:
                raise SetupError(f"nodes not Ready after {timeout_s:.0f} s: "
                                 f"{sorted({n['metadata']['name'] for n in nodes} - ready)}")
            time.sleep(0.5)
        self.log(f"nodes Ready: {', '.join(n['metadata']['name'] for n in nodes)}")

    def add_nodes(self, shape: Spec, timeout_s: float = 60) -> list[str]:
        """Create the nodes of ``shape`` the cluster lacks (a node pool scaled up)."""
        api = self.api()
        core = _kubernetes().client.CoreV1Api(api)
        have = {n.metadata.name for n in core.list_node().items}
        new = [n for n in shaped_nodes(shape) if n["metadata"]["name"] not in have]
        self._create_nodes(api, new, timeout_s)
        return [n["metadata"]["name"] for n in new]

    def reshape(self, shape: Spec, timeout_s: float = 60) -> list[str]:
        """Replace every node with the nodes of ``shape`` (pods on the old ones go with them)."""
        nodes = shaped_nodes(shape)
        api = self.api()
        core = _kubernetes().client.CoreV1Api(api)
        for n in core.list_node().items:
            core.delete_node(n.metadata.name)
        deadline = time.monotonic() + timeout_s
        while core.list_node().items:
            if time.monotonic() > deadline:
                raise SetupError(f"old nodes not gone after {timeout_s:.0f} s")
            time.sleep(0.3)
        self._create_nodes(api, nodes, timeout_s)
        return [n["metadata"]["name"] for n in nodes]

    def down(self) -> list[str]:
        """Stop every process of the cluster (and strays of a killed supervisord)."""
        paths = self.layout.paths
        stopped = [name for name in self.supervisor.process_info()]
        self.supervisor.shutdown(timeout_s=60)
        sweep_strays(paths.stack_id, grace_s=10, supervisord_log=paths.logs / "supervisord.log")
        return stopped

    # -- status -------------------------------------------------------------------------------
    def status(self) -> ClusterStatus:
        out = ClusterStatus(self.supervisor.running(), self.kubeconfig, self.layout.server)
        if not out.running:
            return out
        for c in components(self.layout, go_tools(self.root)):
            out.components[c.name] = probe(c.health, 2.0)
        try:
            core = _kubernetes().client.CoreV1Api(self.api())
            for n in core.list_node().items:
                ready = any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])
                out.nodes.append((n.metadata.name, ready, dict(n.status.allocatable or {})))
        except (_kubernetes().client.exceptions.ApiException, Urllib3Error, OSError) as exc:
            out.components["kube-apiserver"] = (False, f"cannot list nodes: {exc}")
        return out
