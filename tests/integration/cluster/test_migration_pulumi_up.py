"""Starting and ending the migration with `pulumi up` on the localk8s stack against a real API
server, scheduler and controllers (kwok nodes: nothing runs in the pods): from deployment_mode
monolithic to migrating (the old `worker-gpu` goes, `worker-monolithic` and the router come, no
object changes Pulumi owner, so no AlreadyExists), then migration.monolithic_workers 0 (split:
the monolithic pool and the router are deleted, the split workers stay). Three GPU nodes: the
new pool's GPU is free while the old one's pod still runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes.client.exceptions import ApiException

from stack.cluster.cluster import LocalCluster
from testsupport.cluster import Cluster, edit_stack, session, variant

pytestmark = pytest.mark.integration
STACK = "localk8s"
SECRETS = {"splitstack-secrets:splitstack-api-key.api-key": "test-api-key",
           "splitstack-secrets:splitstack-hf-token.token": "hf_test",
           "splitstack-secrets:splitstack-redis-auth.password": "redis-test"}


@pytest.fixture(scope="module")
def stack(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    spec = variant(STACK, {"gpu_node_pool.node_count": 3})
    cluster.reshape(variant("dev", {"gpu_node_pool.node_count": 3}))  # dev's EKS nodes, localk8s's shape
    s = session(tmp_path_factory.mktemp("pulumi"), STACK, cluster)
    for key, value in SECRETS.items():
        s.set_secret(key, value)
    handle = s.stack_handle()
    transcript: list[str] = []
    try:
        yield s, handle, transcript, Cluster(cluster, spec.namespace)
    finally:
        print("\n".join(transcript))
        try:
            handle.destroy(on_output=transcript.append, color="never")
        except Exception as exc:  # noqa: BLE001 - teardown reports, the cluster goes anyway
            print(f"teardown destroy failed: {exc}")


def exists(kube: Cluster, name: str) -> bool:
    try:
        kube.deployment(name)
    except ApiException as exc:
        assert exc.status == 404
        return False
    return True


def test_monolithic_to_migrating_to_split(stack: tuple, tmp_path: Path) -> None:
    s, handle, transcript, kube = stack
    edit_stack(s, {"gpu_node_pool.node_count": 3, "deployment_mode": "monolithic", "worker_pool.replicas": 1})
    assert handle.up(on_output=transcript.append, color="never").summary.result == "succeeded"
    kube.wait_available("worker-gpu")
    assert not exists(kube, "router")

    edit_stack(s, {"deployment_mode": "split", "worker_pool.replicas": 2, "migration.monolithic_workers": 1})
    assert handle.up(on_output=transcript.append, color="never").summary.result == "succeeded"
    for name in ("mineru-vlm", "worker", "worker-monolithic", "router"):
        kube.wait_available(name)
    assert not exists(kube, "worker-gpu")  # monolithic mode's pool, deleted once the new ones ran
    gpu_pods = {p.metadata.labels["app.kubernetes.io/instance"] for p in kube.pods()
                if (p.spec.containers[0].resources.requests or {}).get("nvidia.com/gpu")}
    assert gpu_pods == {"mineru-vlm", "worker-gpu"}  # the server and the monolithic pool's worker
    router = kube.deployment("router").spec.template.spec.containers[0]
    assert router.command[:3] == ["python", "-m", "worker.router"]

    edit_stack(s, {"migration.monolithic_workers": 0})
    assert handle.up(on_output=transcript.append, color="never").summary.result == "succeeded"
    kube.wait_available("worker")
    assert not exists(kube, "worker-monolithic") and not exists(kube, "router")
    env = {e.name for e in kube.deployment("worker").spec.template.spec.containers[0].env}
    assert "SPLITSTACK_MIGRATION_COHORTS" not in env  # back on the jobs stream
