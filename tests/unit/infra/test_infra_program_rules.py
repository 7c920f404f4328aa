"""Policy tests of the program: one per rule, for every cloud and deployment mode.

Each builds the real program under mocks and asserts inside ``apply`` (after every resource is
registered) both the rule's verdict and the concrete values that satisfy it, so a rule that
silently checks nothing cannot pass.
"""

from __future__ import annotations

import pulumi
import pytest

from contract import sizing
from infra.components.program import build
from infra.policy import rules

from .infra_helpers import CLOUD_MODES, ROOT, make_spec


def objects_of(mocks, kind: str) -> list[dict]:
    return [o for o in mocks.kubernetes_objects if o["kind"] == kind]


def gpu_workloads(mocks) -> list[dict]:
    return [o for o in mocks.kubernetes_objects if rules.is_gpu_workload(o)]


def all_clean(rule, objs) -> None:
    found = [v for o in objs for v in rule(o)]
    assert found == []


@pytest.mark.parametrize(("cloud", "mode"), CLOUD_MODES)
@pulumi.runtime.test
def test_probes_and_startup_budget(cloud, mode, mocks, after_build):
    spec = make_spec(cloud, mode)
    server = spec.inference_servers[0]
    deployment = build(spec, ROOT)

    def check():
        all_clean(rules.probes_and_budgets, mocks.kubernetes_objects)
        if mode == "monolithic":
            assert [o["metadata"]["name"] for o in gpu_workloads(mocks)] == ["worker-gpu"]
            return
        (dep,) = [o for o in objects_of(mocks, "Deployment") if o["metadata"]["name"] == server.name]
        c = dep["spec"]["template"]["spec"]["containers"][0]
        startup = c["startupProbe"]
        assert startup["httpGet"]["path"] == "/health"
        assert startup["periodSeconds"] * startup["failureThreshold"] >= server.startup_budget_s
        assert sizing.estimated_start_s(server) <= server.startup_budget_s
        assert c["readinessProbe"]["httpGet"]["path"] == "/health"
        assert c["livenessProbe"]["httpGet"]["path"] == "/health"
        grace = dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        assert grace > c["lifecycle"]["preStop"]["sleep"]["seconds"] + server.shutdown_timeout_s
        assert c["args"][c["args"].index("--shutdown-timeout") + 1] == str(server.shutdown_timeout_s)

    return after_build(deployment, check)


@pytest.mark.parametrize(("cloud", "mode"), CLOUD_MODES)
@pulumi.runtime.test
def test_shm_memory_backed_with_limit(cloud, mode, mocks, after_build):
    spec = make_spec(cloud, mode)
    deployment = build(spec, ROOT)

    def check():
        gpu = gpu_workloads(mocks)
        assert gpu, "no GPU workload rendered"
        all_clean(rules.shm, mocks.kubernetes_objects)
        for o in gpu:
            vols = {v["name"]: v for v in o["spec"]["template"]["spec"]["volumes"]}
            assert vols["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "2Gi"}

    return after_build(deployment, check)


@pytest.mark.parametrize(("cloud", "mode"), CLOUD_MODES)
@pulumi.runtime.test
def test_service_links_disabled_everywhere(cloud, mode, mocks, after_build):
    deployment = build(make_spec(cloud, mode), ROOT)

    def check():
        pods = [o for o in mocks.kubernetes_objects if rules.pod_template(o)]
        assert {o["kind"] for o in pods} == {"Deployment", "StatefulSet"}
        all_clean(rules.service_links, pods)
        assert all(rules.pod_template(o)[1]["enableServiceLinks"] is False for o in pods)

    return after_build(deployment, check)


@pytest.mark.parametrize(("cloud", "mode"), CLOUD_MODES)
@pulumi.runtime.test
def test_rollout_never_surges_onto_missing_gpus(cloud, mode, mocks, after_build):
    deployment = build(make_spec(cloud, mode), ROOT)

    def check():
        all_clean(rules.rollout_strategy, mocks.kubernetes_objects)
        for o in gpu_workloads(mocks):
            strategy = o["spec"]["strategy"]
            # One server replica: Recreate; monolithic workers: surge 0.
            assert strategy == ({"type": "Recreate"} if mode == "split" else
                                {"type": "RollingUpdate",
                                 "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}})

    return after_build(deployment, check)


@pytest.mark.parametrize(("cloud", "mode"), CLOUD_MODES)
@pulumi.runtime.test
def test_gpu_requests_only_on_servers(cloud, mode, mocks, after_build):
    spec = make_spec(cloud, mode)
    deployment = build(spec, ROOT)

    def check():
        all_clean(rules.gpu_requests, mocks.kubernetes_objects)
        gpu = {o["metadata"]["name"]: rules.gpu_count(rules.pod_template(o)[1])
               for o in gpu_workloads(mocks)}
        tp = spec.inference_servers[0].tensor_parallel_size
        assert gpu == ({"mineru-vlm": tp} if mode == "split" else {"worker-gpu": 1})
        cpu_only = [o for o in mocks.kubernetes_objects
                    if rules.pod_template(o) and o["metadata"]["name"] in ("worker", "redis")]
        # split: the CPU worker pool and Redis; monolithic: only Redis (the workers hold the GPU)
        assert {o["metadata"]["name"] for o in cpu_only} == ({"worker", "redis"} if mode == "split" else {"redis"})
        assert all(rules.gpu_count(rules.pod_template(o)[1]) == 0 for o in cpu_only)

    return after_build(deployment, check)


@pytest.mark.parametrize(("cloud", "mode"), CLOUD_MODES)
@pulumi.runtime.test
def test_tolerations_and_node_selector(cloud, mode, mocks, after_build):
    spec = make_spec(cloud, mode)
    deployment = build(spec, ROOT)

    def check():
        all_clean(rules.tolerations, mocks.kubernetes_objects)
        for o in gpu_workloads(mocks):
            pod = rules.pod_template(o)[1]
            assert {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present",
                    "effect": "NoSchedule"} in pod["tolerations"]
            expected = dict(spec.gpu_node_pool.labels)
            if cloud != "existing":
                expected["splitstack.dev/gpu-pool"] = "true"
            assert pod["nodeSelector"] == expected

    return after_build(deployment, check)


@pytest.mark.parametrize(("cloud", "mode"), CLOUD_MODES)
@pulumi.runtime.test
def test_no_latest_images(cloud, mode, mocks, after_build):
    deployment = build(make_spec(cloud, mode), ROOT)

    def check():
        all_clean(rules.no_latest, mocks.kubernetes_objects)
        images = {c["image"] for o in mocks.kubernetes_objects if rules.pod_template(o)
                  for c in rules.containers(rules.pod_template(o)[1])}
        assert ("ghcr.io/splitstack/inference-server:v0.32.0" in images) == (mode == "split")
        # Monolithic workers run the image with vLLM's engine (images/worker-gpu)
        worker = "ghcr.io/splitstack/worker" + ("-gpu" if mode == "monolithic" else "") + ":0.1.0"
        assert worker in images, images

    return after_build(deployment, check)


@pytest.mark.parametrize(("cloud", "mode"), CLOUD_MODES)
@pulumi.runtime.test
def test_secrets_only_by_reference(cloud, mode, mocks, after_build):
    spec = make_spec(cloud, mode)
    deployment = build(spec, ROOT)

    def check():
        objs = mocks.kubernetes_objects
        all_clean(rules.secrets_by_reference, objs)
        assert not [o for o in objs if o["kind"] == "Secret"]
        refs = {(e["name"], e["valueFrom"]["secretKeyRef"]["name"])
                for o in objs if rules.pod_template(o)
                for c in rules.containers(rules.pod_template(o)[1])
                for e in c.get("env", []) if "valueFrom" in e}
        expected = ({("VLLM_API_KEY", "splitstack-api-key"), ("HF_TOKEN", "splitstack-hf-token"),
                     ("SPLITSTACK_API_KEY", "splitstack-api-key")} if mode == "split"
                    else {("HF_TOKEN", "splitstack-hf-token")})
        # Redis' AUTH password: Redis itself, its probe's redis-cli, and the workers' URL.
        expected |= {("REDIS_PASSWORD", "splitstack-redis-auth"),
                     ("REDISCLI_AUTH", "splitstack-redis-auth"),
                     ("SPLITSTACK_REDIS_PASSWORD", "splitstack-redis-auth")}
        assert refs == expected

    return after_build(deployment, check)


@pytest.mark.parametrize(("cloud", "mode"), CLOUD_MODES)
@pulumi.runtime.test
def test_network_policy_coverage(cloud, mode, mocks, after_build):
    spec = make_spec(cloud, mode)
    deployment = build(spec, ROOT)

    def check():
        objs = mocks.kubernetes_objects
        assert rules.network_policy_coverage(objs) == []
        names = {o["metadata"]["name"] for o in objects_of(mocks, "NetworkPolicy")}
        expected = {"default-deny", "allow-dns", "redis-ingress", "worker-ingress", "worker-egress"}
        if mode == "split":
            expected |= {"mineru-vlm-ingress", "mineru-vlm-egress"}
        if spec.observability.install_kube_prometheus_stack:
            # The Prometheus the program installs: its port (lifecycle API included) only from
            # the monitoring namespace and the stack's own; no admin API.
            expected |= {"prometheus-ingress"}
            prom = next(o for o in objects_of(mocks, "NetworkPolicy") if o["metadata"]["name"] == "prometheus-ingress")
            assert prom["metadata"]["namespace"] == "monitoring"
        assert names == expected
        # Removing the worker-ingress policy must leave the metrics port uncovered.
        without = [o for o in objs if o["metadata"]["name"] != "worker-ingress"]
        assert any("9400" in v for v in rules.network_policy_coverage(without))

    return after_build(deployment, check)


@pytest.mark.parametrize(("cloud", "mode"), CLOUD_MODES)
@pulumi.runtime.test
def test_service_monitors_select_service_labels(cloud, mode, mocks, after_build):
    deployment = build(make_spec(cloud, mode), ROOT)

    def check():
        objs = mocks.kubernetes_objects
        assert rules.service_monitor_selectors(objs) == []
        monitors = objects_of(mocks, "ServiceMonitor")
        assert len(monitors) == (2 if mode == "split" else 1)
        services = objects_of(mocks, "Service")
        for sm in monitors:
            sel = sm["spec"]["selector"]["matchLabels"]
            assert [s for s in services if sel.items() <= s["metadata"]["labels"].items()]
            assert sm["spec"]["jobLabel"] == "splitstack.dev/job"

    return after_build(deployment, check)


@pytest.mark.parametrize(("cloud", "mode"), CLOUD_MODES)
@pulumi.runtime.test
def test_keda_scales_on_queue_lag_and_model_name(cloud, mode, mocks, after_build):
    spec = make_spec(cloud, mode)
    deployment = build(spec, ROOT)

    def check():
        scalers = {o["metadata"]["name"]: o for o in objects_of(mocks, "ScaledObject")}
        all_clean(rules.keda_triggers, scalers.values())
        workers = scalers["worker-gpu" if mode == "monolithic" else "worker"]["spec"]
        (lag,) = workers["triggers"]
        assert lag["type"] == "redis-streams"
        assert lag["metadata"]["stream"] == spec.queue.stream
        assert lag["metadata"]["consumerGroup"] == spec.queue.group
        assert lag["metadata"]["lagCount"] == str(sizing.worker_lag_threshold(spec))
        assert workers["fallback"] == {"failureThreshold": 3, "replicas": 1}
        if mode == "split":  # one free GPU: the server scales into it on vLLM's queue
            server = scalers["mineru-vlm"]["spec"]
            assert server["maxReplicaCount"] == 2
            assert 'model_name="mineru-vlm"' in server["triggers"][0]["metadata"]["query"]
        else:
            assert "mineru-vlm" not in scalers

    return after_build(deployment, check)
