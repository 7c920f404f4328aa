"""`pulumi preview`, `up`, the day-2 `up`s, `refresh` and `destroy` of the localk8s stack
(cloud existing, dev's topology) against a real API server, scheduler and controllers.

The tests of this file run in order on one stack, as an operator's day 1 and day 2 do; each
asserts on the objects the cluster holds, read from the API server. The Pulumi transcripts go to
the test's output (`pytest -rA` shows them).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from infra.automation import PulumiSession
from stack.cluster.cluster import LocalCluster
from testsupport.cluster import Cluster, edit_stack, session, variant

pytestmark = pytest.mark.integration
STACK = "localk8s"
NS = "splitstack-localk8s"
SERVER, WORKERS = "mineru-vlm", "worker"
SECRETS = {"splitstack-secrets:splitstack-api-key.api-key": "test-api-key",
           "splitstack-secrets:splitstack-hf-token.token": "hf_test",
           "splitstack-secrets:splitstack-redis-auth.password": "redis-test"}


class Engine:
    """The stack and what `pulumi` printed, step by step."""

    def __init__(self, s: PulumiSession) -> None:
        self.session = s
        self.stack = s.stack_handle()
        self.transcript: list[str] = []

    def _out(self, step: str) -> Any:
        self.transcript.append(f"\n$ pulumi {step} --stack {STACK}")
        return lambda line: self.transcript.append(line.rstrip("\n"))

    def preview(self, **kw: Any) -> Any:
        return self.stack.preview(on_output=self._out("preview" + (" --expect-no-changes" if
                                                                   kw.get("expect_no_changes") else "")),
                                  color="never", **kw)

    def up(self) -> Any:
        return self.stack.up(on_output=self._out("up --yes"), color="never")

    def refresh(self) -> Any:
        return self.stack.refresh(on_output=self._out("refresh --yes"), color="never")

    def destroy(self) -> Any:
        return self.stack.destroy(on_output=self._out("destroy --yes"), color="never")


@pytest.fixture(scope="module")
def engine(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    work: Path = tmp_path_factory.mktemp("pulumi")
    s = session(work, STACK, cluster)
    e = Engine(s)
    for key, value in SECRETS.items():
        s.set_secret(key, value)
    try:
        yield e
    finally:
        print("\n".join(e.transcript))
        if not getattr(e, "destroyed", False):
            try:
                e.destroy()
            except Exception as exc:  # noqa: BLE001 - teardown reports, the cluster goes anyway
                print(f"teardown destroy failed: {exc}")


@pytest.fixture(scope="module")
def kube(cluster: LocalCluster) -> Cluster:
    return Cluster(cluster, NS)


def pools_of(kube: Cluster, selector: str) -> set[str]:
    return {kube.node_pool(p.spec.node_name) for p in kube.pods(selector)}


def assert_bound_to_pools(kube: Cluster) -> None:
    """Every pod is bound by the scheduler, the server's on GPU nodes, the rest on CPU nodes."""
    pods = kube.pods()
    unbound = [p.metadata.name for p in pods if not p.spec.node_name]
    assert not unbound, f"pods the scheduler left Pending: {unbound}"
    for p in pods:
        pool = kube.node_pool(p.spec.node_name)
        component = p.metadata.labels.get("app.kubernetes.io/component", "")
        gpu = p.spec.containers[0].resources.requests.get("nvidia.com/gpu")
        assert pool == ("gpu" if gpu else "cpu"), (p.metadata.name, component, pool)


def test_preview_then_up_creates_a_running_deployment(engine: Engine, kube: Cluster) -> None:
    preview = engine.preview()
    assert preview.change_summary.get("create", 0) > 30, preview.change_summary
    with pytest.raises(ApiException) as missing:
        kube.core.read_namespace(NS)
    assert missing.value.status == 404  # a preview changes nothing

    result = engine.up()
    assert result.summary.result == "succeeded"
    for name in (SERVER, WORKERS):
        kube.wait_available(name)
    assert kube.apps.read_namespaced_stateful_set("redis", NS).status.ready_replicas == 1
    assert_bound_to_pools(kube)
    assert pools_of(kube, f"app.kubernetes.io/instance={SERVER}") == {"gpu"}
    # The objects the cluster accepted: namespace enforcing restricted Pod Security, CRs, claims.
    ns = kube.core.read_namespace(NS)
    assert ns.metadata.labels["pod-security.kubernetes.io/enforce"] == "restricted"
    # ... and the API server's Pod Security admission enforces it: a root pod is refused there.
    with pytest.raises(ApiException) as refused:
        kube.core.create_namespaced_pod(NS, {"metadata": {"name": "root"}, "spec": {"containers": [
            {"name": "c", "image": "busybox", "securityContext": {"privileged": True}}]}})
    assert refused.value.status == 403 and "violates PodSecurity" in refused.value.body
    monitors = kube.custom.list_namespaced_custom_object("monitoring.coreos.com", "v1", NS, "servicemonitors")
    assert len(monitors["items"]) == 2
    rules = kube.custom.list_namespaced_custom_object("monitoring.coreos.com", "v1", NS, "prometheusrules")
    assert rules["items"]
    claims = {c.metadata.name: c.status.phase for c in kube.core.list_namespaced_persistent_volume_claim(NS).items}
    assert all(phase == "Bound" for phase in claims.values()), claims
    secret = kube.core.read_namespaced_secret("splitstack-api-key", NS)
    assert set(secret.data) == {"api-key"}

    engine.preview(expect_no_changes=True)


def test_refresh_right_after_up_is_clean(engine: Engine) -> None:
    result = engine.refresh()
    assert set(result.summary.resource_changes or {}) <= {"same"}, result.summary.resource_changes


def refresh_clean(engine: Engine) -> None:
    result = engine.refresh()
    assert set(result.summary.resource_changes or {}) <= {"same"}, result.summary.resource_changes


def worker_spec(kube: Cluster) -> dict:
    import json

    cm = kube.core.read_namespaced_config_map(f"{WORKERS}-spec", NS)
    return json.loads(next(iter(cm.data.values())))


def test_worker_settings_roll_the_workers(engine: Engine, kube: Cluster) -> None:
    before = {p.metadata.name for p in kube.pods(f"app.kubernetes.io/instance={WORKERS}")}
    edit_stack(engine.session, {"worker_pool.concurrency_per_worker": 8, "worker_pool.max_retries": 5})
    assert engine.up().summary.result == "succeeded"
    kube.wait_available(WORKERS)
    after = {p.metadata.name for p in kube.pods(f"app.kubernetes.io/instance={WORKERS}")}
    assert before.isdisjoint(after), "the workers kept running with the old settings"
    spec = worker_spec(kube)
    assert (spec["worker_pool"]["concurrency_per_worker"], spec["worker_pool"]["max_retries"]) == (8, 5)
    refresh_clean(engine)


class ReplicaWatch:
    """The Deployment's spec.replicas, polled while a `pulumi up` runs: the lowest it went."""

    def __init__(self, kube: Cluster, name: str) -> None:
        self.kube, self.name, self.seen = kube, name, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.seen.append(self.kube.deployment(self.name).spec.replicas)
            time.sleep(0.05)

    def __enter__(self) -> ReplicaWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def keda_hpa(kube: Cluster, minimum: int, maximum: int) -> None:
    """The HPA KEDA's operator makes for the ScaledObject (keda-hpa-<name>): KEDA itself does not
    run here, but the real controller manager's HPA controller scales the Deployment up to the
    HPA's minimum through the scale subresource, taking ownership of spec.replicas as it does
    under KEDA."""
    body = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": f"keda-hpa-{WORKERS}"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": WORKERS},
                     "minReplicas": minimum, "maxReplicas": maximum,
                     "metrics": [{"type": "External", "external": {
                         "metric": {"name": "s0-redis-streams-jobs"},
                         "target": {"type": "AverageValue", "averageValue": "4"}}}]}}
    client.AutoscalingV2Api(kube.core.api_client).create_namespaced_horizontal_pod_autoscaler(NS, body)


def test_autoscaling_on_and_off_keeps_the_workers(engine: Engine, kube: Cluster) -> None:
    edit_stack(engine.session, {"worker_pool.max_replicas": 4})
    with ReplicaWatch(kube, WORKERS) as watch:
        assert engine.up().summary.result == "succeeded"
    assert min(watch.seen) == 2, f"the worker count dipped: {sorted(set(watch.seen))}"
    scaled = kube.custom.get_namespaced_custom_object("keda.sh", "v1alpha1", NS, "scaledobjects", WORKERS)
    assert (scaled["spec"]["minReplicaCount"], scaled["spec"]["maxReplicaCount"]) == (2, 4)
    # The autoscaler takes the count (3), and a second `up` leaves it alone.
    keda_hpa(kube, 3, 4)
    deadline = time.monotonic() + 60
    while kube.deployment(WORKERS).spec.replicas != 3:
        assert time.monotonic() < deadline, "the HPA controller did not scale the workers"
        time.sleep(0.5)
    engine.preview(expect_no_changes=True)
    assert engine.up().summary.result == "succeeded"
    assert kube.deployment(WORKERS).spec.replicas == 3
    refresh_clean(engine)
    # Off again: the spec's count wins over the field manager that owned it, no conflict.
    kube.core.api_client  # noqa: B018 - keep the client alive across the HPA's deletion
    client.AutoscalingV2Api(kube.core.api_client).delete_namespaced_horizontal_pod_autoscaler(
        f"keda-hpa-{WORKERS}", NS)
    edit_stack(engine.session, {"worker_pool.max_replicas": None})
    assert engine.up().summary.result == "succeeded"
    assert kube.wait_available(WORKERS).spec.replicas == 2
    with pytest.raises(ApiException):
        kube.custom.get_namespaced_custom_object("keda.sh", "v1alpha1", NS, "scaledobjects", WORKERS)
    refresh_clean(engine)


def test_model_size_changes_both_ways(engine: Engine, kube: Cluster) -> None:
    def claims() -> set[str]:
        return {c.metadata.name for c in kube.core.list_namespaced_persistent_volume_claim(NS).items
                if c.metadata.name.startswith(SERVER) and c.metadata.deletion_timestamp is None}

    assert claims() == {f"{SERVER}-model-cache-rwo-9gi"}
    edit_stack(engine.session, {"inference_servers.0.model.size_gib": 16.6})
    assert engine.up().summary.result == "succeeded"
    kube.wait_available(SERVER)
    assert claims() == {f"{SERVER}-model-cache-rwo-30gi"}
    edit_stack(engine.session, {"inference_servers.0.model.size_gib": 2.5})
    assert engine.up().summary.result == "succeeded"  # a smaller model: a new, smaller claim
    dep = kube.wait_available(SERVER)
    assert claims() == {f"{SERVER}-model-cache-rwo-9gi"}
    mounted = {v.persistent_volume_claim.claim_name for v in dep.spec.template.spec.volumes
               if v.persistent_volume_claim}
    assert mounted == {f"{SERVER}-model-cache-rwo-9gi"}
    refresh_clean(engine)


def test_a_second_server_replica_on_a_new_gpu_node(engine: Engine, kube: Cluster,
                                                    cluster: LocalCluster) -> None:
    assert cluster.add_nodes(variant("dev", {"gpu_node_pool.node_count": 2})) == ["gpu-1"]
    edit_stack(engine.session, {"gpu_node_pool.node_count": 2, "inference_servers.0.replicas": 2})
    assert engine.up().summary.result == "succeeded"
    dep = kube.wait_available(SERVER)
    assert dep.spec.replicas == 2
    pods = kube.pods(f"app.kubernetes.io/instance={SERVER}")
    assert {p.spec.node_name for p in pods} == {"gpu-0", "gpu-1"}  # one GPU each
    # Two replicas share the cache: a ReadWriteMany claim, the old ReadWriteOnce one deleted.
    claims = {c.metadata.name: c.spec.access_modes for c in
              kube.core.list_namespaced_persistent_volume_claim(NS).items
              if c.metadata.name.startswith(SERVER) and c.metadata.deletion_timestamp is None}
    assert claims == {f"{SERVER}-model-cache-rwx-9gi": ["ReadWriteMany"]}
    refresh_clean(engine)


def wait_for(what: str, probe: Any, timeout_s: float = 60) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (value := probe()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout_s:g} s")
        time.sleep(0.5)
    return value


def assert_monolithic_pdb_and_cache(kube: Cluster) -> None:
    """The GPU workers' PDB selects them (the disruption controller counts both healthy and
    allows one eviction), and their model and compile cache is one bound claim that a
    replacement pod mounts again: a restart keeps the weights and the compiled graphs."""
    selector = "app.kubernetes.io/instance=worker-gpu"
    policy = client.PolicyV1Api(kube.core.api_client)

    def counted() -> Any:
        pdb = policy.read_namespaced_pod_disruption_budget("worker-gpu", NS)
        return pdb if pdb.status and pdb.status.current_healthy == 2 else None
    pdb = wait_for("PDB worker-gpu counting 2 healthy pods", counted)
    assert pdb.spec.max_unavailable == 1 and pdb.status.disruptions_allowed == 1

    def claims() -> set[str]:
        return {v.persistent_volume_claim.claim_name for p in kube.pods(selector)
                for v in p.spec.volumes if v.name == "model-cache"}
    (claim,) = claims()
    pvc = kube.core.read_namespaced_persistent_volume_claim(claim, NS)
    assert pvc.status.phase == "Bound" and pvc.spec.access_modes == ["ReadWriteMany"]
    before = {p.metadata.name for p in kube.pods(selector)}
    kube.core.delete_namespaced_pod(sorted(before)[0], NS)
    wait_for("a replacement worker-gpu pod", lambda: len(
        {p.metadata.name for p in kube.pods(selector)} - before) == 1 and kube.available("worker-gpu"))
    assert claims() == {claim}
    assert kube.core.read_namespaced_persistent_volume_claim(claim, NS).metadata.uid == pvc.metadata.uid


def test_monolithic_and_back(engine: Engine, kube: Cluster) -> None:
    """The switch in both directions, as `runbook rollback` and docs/infra.md spell it: a first
    `pulumi up` scales the GPU pods of the old mode to 0 (the queue keeps the documents), a second
    one switches. In one step the new mode's GPU pods would be created (and awaited) while the old
    ones still hold every GPU: Pending until Pulumi's timeout (found by this test)."""
    edit_stack(engine.session, {"inference_servers.0.replicas": 0, "worker_pool.replicas": 0})
    assert engine.up().summary.result == "succeeded"
    assert kube.wait_available(SERVER).spec.replicas == 0
    edit_stack(engine.session, {"deployment_mode": "monolithic", "worker_pool.replicas": 2,
                                "inference_servers.0.replicas": 1})
    assert engine.up().summary.result == "succeeded"
    gpu_workers = kube.wait_available("worker-gpu")
    assert gpu_workers.spec.replicas == 2
    assert pools_of(kube, "app.kubernetes.io/instance=worker-gpu") == {"gpu"}
    assert_monolithic_pdb_and_cache(kube)
    for gone in (SERVER, WORKERS):
        with pytest.raises(ApiException):
            kube.deployment(gone)
    assert_bound_to_pools(kube)
    refresh_clean(engine)

    edit_stack(engine.session, {"worker_pool.replicas": 0})
    assert engine.up().summary.result == "succeeded"
    edit_stack(engine.session, {"deployment_mode": "split", "worker_pool.replicas": 2})
    assert engine.up().summary.result == "succeeded"
    kube.wait_available(SERVER)
    kube.wait_available(WORKERS)
    with pytest.raises(ApiException):
        kube.deployment("worker-gpu")
    assert_bound_to_pools(kube)
    refresh_clean(engine)
    engine.preview(expect_no_changes=True)


def test_a_smaller_output_store_is_refused_and_nothing_changes(engine: Engine, kube: Cluster) -> None:
    """A volume cannot shrink: the API server refuses the claim, in the preview's server-side dry
    run and in the update (the Automation API's `up` skips the preview), and nothing else of the
    update is applied: the outputs keep their volume."""
    from pulumi.automation import CommandError

    before = engine.session.stack_file.read_text()
    edit_stack(engine.session, {"output_store.size_gib": 10})
    with pytest.raises(CommandError, match="can not be less than"):
        engine.preview()
    with pytest.raises(CommandError, match="can not be less than") as failed:
        engine.up()
    assert "1 errored" in str(failed.value) or "2 errored" in str(failed.value), failed.value
    claim = kube.core.read_namespaced_persistent_volume_claim("splitstack-outputs", NS)
    assert claim.spec.resources.requests["storage"] == "20Gi"
    # The failed update recorded the refused size in Pulumi's state: the size put back, one `up`
    # re-applies what the cluster already has, and the stack is clean again.
    engine.session.stack_file.write_text(before)
    assert engine.up().summary.result == "succeeded"
    engine.preview(expect_no_changes=True)


def test_destroy_leaves_nothing(engine: Engine, kube: Cluster) -> None:
    result = engine.destroy()
    engine.destroyed = True  # type: ignore[attr-defined]
    assert result.summary.result == "succeeded"
    deadline = time.monotonic() + 60
    while True:
        try:
            kube.core.read_namespace(NS)
        except ApiException as exc:
            assert exc.status == 404
            break
        assert time.monotonic() < deadline, "the namespace is still there"
        time.sleep(0.5)
    left = [v.metadata.name for v in kube.core.list_persistent_volume().items
            if v.spec.claim_ref and v.spec.claim_ref.namespace == NS]
    assert not left, f"volumes of {NS} left behind: {left}"
