"""The local Kubernetes cluster and the Pulumi engine for end-to-end tests (tests/integration/cluster).

A cluster on free loopback ports and a private state dir (a developer's own `splitstack cluster up`
keeps running beside it); a Pulumi session whose work dir holds its own copy of the stack file,
which tests edit for their day-2 changes. Everything the tests assert on is read from the API
server, not from Pulumi's outputs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from contract.spec import Spec
from contract.spec_loader import load_stack, parse_spec, project_root
from infra.automation import PulumiSession
from stack.cluster.cluster import LocalCluster
from stack.cluster.control_plane import Ports
from stack.cluster.nodes import POOL_LABEL
from stack.cluster.tools import go_tools
from stack.component import SetupError
from testsupport.procs import free_port

ROOT = project_root(Path(__file__))


def variant(stack: str, changes: dict[str, Any]) -> Spec:
    """Stack ``stack``'s spec with dotted fields changed (``inference_servers.0.replicas``)."""
    raw = load_stack(stack, ROOT).model_dump(mode="json", exclude_none=True)
    for dotted, value in changes.items():
        node = raw
        *parts, last = dotted.split(".")
        for part in parts:
            node = node[int(part)] if part.isdigit() else node[part]
        node[last] = value
    return parse_spec(raw, f"{stack} variant {changes}")


def free_ports() -> Ports:
    """Seven distinct ports free right now (each component listens on its own)."""
    ports: list[int] = []
    while len(ports) < 7:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return Ports(*ports)


@contextmanager
def running_cluster(state_dir: Path, shape: Spec | str = "dev", tries: int = 3) -> Iterator[LocalCluster]:
    """A cluster on free ports. A port free when picked can be taken by a neighbour test before the
    component binds it: then `up` (which stops what it started) is tried again on fresh ports."""
    spec = load_stack(shape, ROOT) if isinstance(shape, str) else shape
    for attempt in range(tries):
        cluster = LocalCluster(ROOT, state_dir=str(state_dir), ports=free_ports())
        try:
            cluster.up(spec)
            break
        except SetupError as exc:
            if "address already in use" not in str(exc) or attempt == tries - 1:
                raise
    try:
        yield cluster
    finally:
        cluster.down()


def session(work_dir: Path, stack: str, cluster: LocalCluster) -> PulumiSession:
    s = PulumiSession(stack, ROOT, work_dir, go_tools(ROOT), cluster.kubeconfig)
    s.prepare()
    return s


def edit_stack(s: PulumiSession, change: dict[str, Any]) -> None:
    """Set ``splitstack:`` config keys of the session's stack file (dotted: 'worker_pool.replicas')."""
    doc = yaml.safe_load(s.stack_file.read_text())
    config = doc["config"]
    for dotted, value in change.items():
        top, *rest = dotted.split(".")
        key = f"splitstack:{top}"
        if not rest:
            config[key] = value
            continue
        node = config.setdefault(key, {})
        for part in rest[:-1]:
            node = node.setdefault(part, {}) if not part.isdigit() else node[int(part)]
        last = rest[-1]
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value
    s.stack_file.write_text(yaml.safe_dump(doc, sort_keys=False))


class Cluster:
    """What the tests read from the API server."""

    def __init__(self, cluster: LocalCluster, namespace: str) -> None:
        api = cluster.api()
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.ns = namespace

    def deployment(self, name: str) -> Any:
        return self.apps.read_namespaced_deployment(name, self.ns)

    def pods(self, selector: str = "") -> list[Any]:
        return [p for p in self.core.list_namespaced_pod(self.ns, label_selector=selector).items
                if p.metadata.deletion_timestamp is None]

    def node_pool(self, node_name: str) -> str:
        return self.core.read_node(node_name).metadata.labels.get(POOL_LABEL, "")

    def available(self, name: str) -> bool:
        d = self.deployment(name)
        want = d.spec.replicas or 0
        st = d.status
        return ((st.observed_generation or 0) >= d.metadata.generation
                and (st.updated_replicas or 0) == want and (st.available_replicas or 0) == want
                and (st.replicas or 0) == want)

    def wait_available(self, name: str, timeout_s: float = 60) -> Any:
        deadline = time.monotonic() + timeout_s
        while not self.available(name):
            if time.monotonic() > deadline:
                raise TimeoutError(f"deployment {self.ns}/{name} not available in {timeout_s:g} s: "
                                   f"{self.deployment(name).status}")
            time.sleep(0.5)
        return self.deployment(name)
