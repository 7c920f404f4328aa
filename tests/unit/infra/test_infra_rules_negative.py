"""Each policy rule flags the mistake it exists for, with a message naming the fix."""

from __future__ import annotations

import copy

import pytest

from infra.policy import rules


def server_deployment() -> dict:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "vlm", "namespace": "ns"},
        "spec": {
            "replicas": 1, "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": {"app.kubernetes.io/name": "inference-server"}},
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": "inference-server"},
                             "annotations": {rules.STARTUP_BUDGET_ANNOTATION: "600"}},
                "spec": {
                    "enableServiceLinks": False,
                    "automountServiceAccountToken": False,
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 10001,
                                        "seccompProfile": {"type": "RuntimeDefault"}},
                    "terminationGracePeriodSeconds": 60,
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                     "effect": "NoSchedule"}],
                    "containers": [{
                        "name": "server", "image": "vllm/vllm-openai:v0.32.0",
                        "args": ["m", "--shutdown-timeout", "30"],
                        "env": [{"name": "VLLM_API_KEY", "valueFrom": {
                            "secretKeyRef": {"name": "s", "key": "k"}}}],
                        "resources": {"requests": {"nvidia.com/gpu": "1"},
                                      "limits": {"nvidia.com/gpu": "1"}},
                        "lifecycle": {"preStop": {"sleep": {"seconds": 10}}},
                        "startupProbe": {"httpGet": {"path": "/health", "port": "http"},
                                         "periodSeconds": 10, "failureThreshold": 60},
                        "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}},
                        "livenessProbe": {"httpGet": {"path": "/health", "port": "http"}},
                        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
                        "securityContext": {"allowPrivilegeEscalation": False,
                                            "capabilities": {"drop": ["ALL"]}},
                    }],
                    "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory",
                                                              "sizeLimit": "2Gi"}}],
                },
            },
        },
    }


def container(obj: dict) -> dict:
    return obj["spec"]["template"]["spec"]["containers"][0]


def test_good_server_passes_every_resource_rule():
    obj = server_deployment()
    assert {r.name: r.check(obj) for r in rules.RESOURCE_RULES} == {
        r.name: [] for r in rules.RESOURCE_RULES}


def test_startup_probe_shorter_than_budget():
    obj = server_deployment()
    container(obj)["startupProbe"]["failureThreshold"] = 30
    (msg,) = rules.probes_and_budgets(obj)
    assert "startupProbe allows 300 s" in msg and "< 600 s" in msg


def test_missing_startup_probe_and_short_grace():
    obj = server_deployment()
    del container(obj)["startupProbe"]
    obj["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 40
    msgs = rules.probes_and_budgets(obj)
    assert any("no startupProbe" in m for m in msgs)
    assert any("terminationGracePeriodSeconds 40 <= preStop 10 s + --shutdown-timeout 30 s" in m
               for m in msgs)


@pytest.mark.parametrize("volume", [{"emptyDir": {}}, {"emptyDir": {"medium": "Memory"}}])
def test_shm_not_memory_backed_or_unbounded(volume):
    obj = server_deployment()
    obj["spec"]["template"]["spec"]["volumes"] = [{"name": "dshm", **volume}]
    (msg,) = rules.shm(obj)
    assert "must be an emptyDir with medium Memory and a sizeLimit" in msg


def test_service_links_default_is_flagged():
    obj = server_deployment()
    del obj["spec"]["template"]["spec"]["enableServiceLinks"]
    (msg,) = rules.service_links(obj)
    assert "VLLM_PORT" in msg


def test_surge_on_gpu_deployment_is_flagged_unless_headroom():
    obj = server_deployment()
    obj["spec"]["strategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}
    (msg,) = rules.rollout_strategy(obj)
    assert "deadlocks" in msg
    obj["spec"]["template"]["metadata"]["annotations"][rules.GPU_HEADROOM_ANNOTATION] = "true"
    assert rules.rollout_strategy(obj) == []


def test_gpu_on_worker_and_request_limit_mismatch():
    obj = server_deployment()
    obj["spec"]["template"]["metadata"]["labels"] = {"app.kubernetes.io/name": "worker"}
    container(obj)["resources"]["limits"]["nvidia.com/gpu"] = "2"
    msgs = rules.gpu_requests(obj)
    assert any("is not an inference server" in m for m in msgs)
    assert any("request 1 != limit 2" in m for m in msgs)


def test_tolerations_both_directions():
    obj = server_deployment()
    obj["spec"]["template"]["spec"]["tolerations"] = []
    assert "has no tolerations" in rules.tolerations(obj)[0]
    cpu = server_deployment()
    container(cpu)["resources"] = {}
    assert "without requesting a GPU" in rules.tolerations(cpu)[0]


@pytest.mark.parametrize("image", ["vllm/vllm-openai", "vllm/vllm-openai:latest",
                                   "localhost:5000/vllm"])
def test_unpinned_images(image):
    obj = server_deployment()
    container(obj)["image"] = image
    (msg,) = rules.no_latest(obj)
    assert "is not pinned" in msg


def test_pinned_by_digest_and_registry_port_ok():
    obj = server_deployment()
    container(obj)["image"] = "localhost:5000/vllm@sha256:" + "a" * 64
    assert rules.no_latest(obj) == []


def test_secret_literals_are_flagged():
    obj = server_deployment()
    container(obj)["env"] = [{"name": "HF_TOKEN", "value": "hf_abc"}]
    container(obj)["args"] += ["--api-key", "sk-123"]
    msgs = rules.secrets_by_reference(obj)
    assert any("env HF_TOKEN holds a literal value" in m for m in msgs)
    assert any("--api-key is given a literal value" in m for m in msgs)
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"},
              "stringData": {"k": "v"}}
    assert "outside Pulumi" in rules.secrets_by_reference(secret)[0]


def test_keda_query_on_wrong_label():
    obj = {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "s"},
           "spec": {"triggers": [
               {"type": "prometheus", "metadata": {"query": 'sum(vllm:num_requests_waiting{model="m"})'}},
               {"type": "redis-streams", "metadata": {"stream": "s"}}]}}
    msgs = rules.keda_triggers(obj)
    assert any("does not select model_name" in m for m in msgs)
    assert any("selects label 'model'" in m for m in msgs)
    assert any("lacks ['consumerGroup', 'lagCount']" in m for m in msgs)


def test_network_policy_coverage_needs_default_deny_and_ports():
    obj = server_deployment()
    container(obj)["ports"] = [{"name": "http", "containerPort": 8000}]
    msgs = rules.network_policy_coverage([obj])
    assert any("no default-deny NetworkPolicy" in m for m in msgs)
    assert any("container port 8000 is not opened" in m for m in msgs)
    deny = {"kind": "NetworkPolicy", "metadata": {"name": "d", "namespace": "ns"},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}}
    allow = {"kind": "NetworkPolicy", "metadata": {"name": "a", "namespace": "ns"},
             "spec": {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "inference-server"}},
                      "ingress": [{"ports": [{"port": 8000}]}]}}
    assert rules.network_policy_coverage([obj, deny, allow]) == []


def test_service_monitor_selector_port_and_job_label():
    svc = {"kind": "Service", "metadata": {"name": "s", "namespace": "ns",
                                           "labels": {"a": "1", "splitstack.dev/job": "j"}},
           "spec": {"ports": [{"name": "http", "port": 80}]}}
    sm = {"kind": "ServiceMonitor", "metadata": {"name": "m", "namespace": "ns"},
          "spec": {"selector": {"matchLabels": {"a": "1"}}, "jobLabel": "splitstack.dev/job",
                   "endpoints": [{"port": "http"}]}}
    assert rules.service_monitor_selectors([svc, sm]) == []
    wrong = copy.deepcopy(sm)
    wrong["spec"]["selector"]["matchLabels"] = {"a": "2"}
    assert "matches no Service's labels" in rules.service_monitor_selectors([svc, wrong])[0]
    port = copy.deepcopy(sm)
    port["spec"]["endpoints"] = [{"port": "metrics"}]
    assert "endpoint port 'metrics'" in rules.service_monitor_selectors([svc, port])[0]
    job = copy.deepcopy(svc)
    del job["metadata"]["labels"]["splitstack.dev/job"]
    assert "jobLabel" in rules.service_monitor_selectors([job, sm])[0]
