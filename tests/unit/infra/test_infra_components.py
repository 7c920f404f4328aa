"""Validation at construction, derived numbers, GPU sharing and the cloud node pools."""

from __future__ import annotations

import json

import pulumi
import pytest
import yaml

from contract import sizing
from contract.spec_loader import parse_spec
from infra.components.inference_server import InferenceServerArgs, validate
from infra.components.platform_addons import gpu_operator_values, needs_gpu_operator, sharing_config
from infra.components.program import build

from .infra_helpers import CLOUD_MODES, ROOT, make_raw, make_spec


def test_startup_budget_below_estimate_is_refused():
    raw = make_raw("existing")
    raw["inference_servers"][0].update(startup_budget_s=120)
    raw["inference_servers"][0]["model"]["size_gib"] = 16.6
    spec = parse_spec(raw)
    need = sizing.estimated_start_s(spec.inference_servers[0])
    with pytest.raises(ValueError, match=rf"inference_servers\[0\].startup_budget_s: 120 s is below "
                                         rf"the estimated cold start of {need} s.*at least {need}"):
        validate(InferenceServerArgs(spec, spec.inference_servers[0], "inference_servers[0]"))


def test_estimate_counts_download_only_for_hub_models():
    spec = make_spec()
    hub = spec.inference_servers[0]
    local = hub.model_copy(update={"model": hub.model.model_copy(update={"source": "/models/x"})})
    download_s = 2.5 * 1024 / sizing.DOWNLOAD_MIB_PER_S
    assert abs(sizing.estimated_start_s(hub) - sizing.estimated_start_s(local) - download_s) <= 1


def test_tensor_parallel_over_shared_gpus_is_refused():
    raw = make_raw("existing")
    raw["gpu_node_pool"].update(gpus_per_node=2, gpu_sharing="time-slicing", slices_per_gpu=2)
    raw["inference_servers"][0]["tensor_parallel_size"] = 2
    spec = parse_spec(raw)
    with pytest.raises(ValueError, match="tensor_parallel_size: 2 with gpu_node_pool.gpu_sharing"):
        validate(InferenceServerArgs(spec, spec.inference_servers[0], "inference_servers[0]"))


def test_shared_gpu_fractions_must_add_up():
    raw = make_raw("existing")
    raw["gpu_node_pool"].update(node_count=1, gpu_sharing="time-slicing", slices_per_gpu=2)
    raw["inference_servers"][0]["replicas"] = 2
    spec = parse_spec(raw)
    with pytest.raises(ValueError, match=r"slices_per_gpu: 2 pods may share one nvidia-l40s and "
                                         r"their gpu_memory_utilization adds up to 1.00"):
        sizing.check_gpu_sharing(spec)


def test_time_slicing_config_for_the_gpu_operator():
    raw = make_raw("eks")
    raw["gpu_node_pool"].update(gpu_sharing="time-slicing", slices_per_gpu=4)
    spec = parse_spec(raw)
    assert needs_gpu_operator(spec)
    assert yaml.safe_load(sharing_config(spec)) == {"version": "v1", "sharing": {"timeSlicing": {
        "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}}
    values = gpu_operator_values(spec)
    assert values["devicePlugin"] == {"config": {"name": "splitstack-gpu-sharing", "default": "any"}}
    assert values["driver"] == {"enabled": False}  # the EKS NVIDIA AMI has the driver


def test_gke_and_plain_existing_need_no_operator():
    assert not needs_gpu_operator(make_spec("gke"))
    assert not needs_gpu_operator(make_spec("existing"))
    assert needs_gpu_operator(make_spec("aks"))


def test_rollout_never_surges_into_gpus_a_scaler_takes():
    raw = make_raw("existing")
    raw["gpu_node_pool"]["node_count"] = 3
    raw["inference_servers"][0]["replicas"] = 2
    raw["inference_servers"][0]["max_num_seqs"] = 64
    spec = parse_spec(raw)
    server = spec.inference_servers[0]
    # The free GPU belongs to the server's KEDA scaler: a surge pod would wait for it forever.
    assert sizing.server_max_replicas(spec, server) == 3
    assert sizing.unclaimed_gpu_slots(spec) == 0
    rollout = sizing.server_rollout(spec, server)
    assert (rollout.type, rollout.max_surge, rollout.max_unavailable) == ("RollingUpdate", 0, 1)
    raw["gpu_node_pool"]["node_count"] = 2
    full = parse_spec(raw)
    rollout = sizing.server_rollout(full, full.inference_servers[0])
    assert (rollout.type, rollout.max_surge) == ("RollingUpdate", 0)


@pytest.mark.parametrize(("cloud", "mode"), [p for p in CLOUD_MODES if p.values[0] != "existing"
                                             and p.values[1] == "split"])
@pulumi.runtime.test
def test_cloud_gpu_pool_is_tainted_and_labelled(cloud, mode, mocks, after_build):
    spec = make_spec(cloud, mode)
    deployment = build(spec, ROOT)

    def check():
        if cloud == "eks":
            (gpu,) = [r for r in mocks.of_type("eks:index:ManagedNodeGroup") if r.name.endswith("-gpu")]
            assert gpu.inputs["amiType"] == "AL2023_x86_64_NVIDIA"
            assert gpu.inputs["taints"] == [
                {"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"}]
            assert gpu.inputs["labels"]["splitstack.dev/gpu-pool"] == "true"
            (cluster,) = mocks.of_type("eks:index:Cluster")
            assert cluster.inputs["vpcCniOptions"]["enableNetworkPolicy"] is True
        elif cloud == "gke":
            (gpu,) = [r for r in mocks.of_type("gcp:container/nodePool:NodePool")
                      if r.name.endswith("-gpu")]
            acc = gpu.inputs["nodeConfig"]["guestAccelerators"][0]
            assert acc["type"] == "nvidia-h100-80gb" and acc["count"] == 1
            assert acc["gpuDriverInstallationConfig"] == {"gpuDriverVersion": "LATEST"}
            (cluster,) = mocks.of_type("gcp:container/cluster:Cluster")
            assert cluster.inputs["datapathProvider"] == "ADVANCED_DATAPATH"
        else:
            (gpu,) = mocks.of_type("azure-native:containerservice:AgentPool")
            assert gpu.inputs["nodeTaints"] == ["nvidia.com/gpu=present:NoSchedule"]
            assert gpu.inputs["vmSize"] == "Standard_NC24ads_A100_v4"
            (cluster,) = mocks.of_type("azure-native:containerservice:ManagedCluster")
            assert cluster.inputs["networkProfile"]["networkPolicy"] == "cilium"
        assert len(mocks.of_type("pulumi:providers:kubernetes")) == 1

    return after_build(deployment, check)


@pytest.mark.parametrize(("cloud", "mode"), [p for p in CLOUD_MODES if p.values[0] == "gke"
                                             and p.values[1] == "split"])
@pulumi.runtime.test
def test_gke_shares_gpus_natively(cloud, mode, mocks, after_build):
    raw = make_raw(cloud, mode)
    raw["gpu_node_pool"].update(gpu_sharing="mps", slices_per_gpu=2)
    raw["inference_servers"][0]["gpu_memory_utilization"] = 0.45
    deployment = build(parse_spec(raw), ROOT)

    def check():
        (gpu,) = [r for r in mocks.of_type("gcp:container/nodePool:NodePool")
                  if r.name.endswith("-gpu")]
        assert gpu.inputs["nodeConfig"]["guestAccelerators"][0]["gpuSharingConfig"] == {
            "gpuSharingStrategy": "MPS", "maxSharedClientsPerGpu": 2}
        assert not mocks.helm_releases or all(
            r["chart"] != "gpu-operator" for r in mocks.helm_releases)

    return after_build(deployment, check)


def test_missing_cloud_sdk_names_the_extra(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_gcp(name, *args, **kwargs):
        if name.startswith("pulumi_gcp"):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_gcp)
    from infra.components.clouds import gke

    with pytest.raises(ImportError, match=r"pip install -e '.\[infra-gke\]'"):
        gke.create(None, "x", make_spec("gke"))


def test_local_target_is_refused():
    from contract.spec_loader import load_stack
    from infra.components.program import check

    with pytest.raises(ValueError, match="splitstack up --stack local"):
        check(load_stack("local"))


def test_outputs_name_urls_and_commands():
    from contract.spec_loader import load_stack
    from infra.components.program import stack_outputs

    spec = load_stack("prod")
    out = stack_outputs(spec, "http://prom")
    assert out["server_url"] == "http://mineru-vlm.splitstack.svc.cluster.local:8000"
    assert set(out["server_urls"]) == {"mineru-vlm", "qwen-vl"}
    assert out["port_forward"]["prometheus"].endswith("svc/kube-prometheus-stack-prometheus 9090:9090")
    assert "--model mineru-vlm" in out["commands"]["bench"]
    assert out["commands"]["create_secrets"] == [
        'kubectl -n splitstack create secret generic splitstack-api-key '
        '--from-literal=api-key="$SPLITSTACK_API_KEY"',
        'kubectl -n splitstack create secret generic splitstack-hf-token '
        '--from-literal=token="$HF_TOKEN"',
        'kubectl -n splitstack create secret generic splitstack-redis-auth '
        '--from-literal=password="$SPLITSTACK_REDIS_PASSWORD"']
    mono = stack_outputs(make_spec("existing", "monolithic"), "http://prom")
    assert mono["server_url"] is None and mono["server_urls"] == {}
    assert mono["commands"]["logs_workers"].endswith("deploy/worker-gpu -f")


def _project(tmp_path, rules_text: str, dashboard_text: str):
    (tmp_path / "alerts" / "generated").mkdir(parents=True)
    (tmp_path / "alerts" / "mine.rules.yml").write_text(rules_text)
    (tmp_path / "dashboards").mkdir()
    (tmp_path / "dashboards" / "pipeline.json").write_text(dashboard_text)
    return tmp_path


RULES = "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: up == 0\n    for: 1m\n"


def test_dashboards_become_sidecar_configmaps(tmp_path, mocks):
    root = _project(tmp_path, RULES, '{"title": "Pipeline", "panels": []}')

    @pulumi.runtime.test
    def run():
        build(make_spec("existing", "split"), root)

    run()
    (cm,) = [o for o in mocks.kubernetes_objects
             if o["kind"] == "ConfigMap" and "grafana_dashboard" in o["metadata"]["labels"]]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["data"] == {"splitstack-dashboard-pipeline.json": '{"title": "Pipeline", "panels": []}'}
    (rule,) = [o for o in mocks.kubernetes_objects if o["kind"] == "PrometheusRule"]
    assert rule["metadata"]["name"] == "splitstack-mine"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rule["spec"]["groups"][0]["rules"][0]["alert"] == "A"
    assert rule["metadata"]["annotations"]["splitstack.dev/source"] == "alerts/mine.rules.yml"


def test_bad_rule_and_dashboard_files_are_named(tmp_path):
    from infra.artifacts import load_dashboards, load_rule_files

    root = _project(tmp_path, "rules: []\n", "{not json")
    with pytest.raises(ValueError, match=r"mine.rules.yml: no 'groups:' list"):
        load_rule_files(root / "alerts")
    with pytest.raises(ValueError, match=r"pipeline.json: not valid JSON"):
        load_dashboards(root / "dashboards")


def test_hpa_fallback_when_keda_is_absent(mocks):
    from infra.components.program import worker_pool_args
    from infra.components.worker_pool import Autoscaler, WorkerPoolComponent
    from infra.policy.manifests import validate_object

    spec = make_spec("existing", "split")

    @pulumi.runtime.test
    def run():
        WorkerPoolComponent("workers", worker_pool_args(spec, autoscaler=Autoscaler.hpa))

    run()
    (hpa,) = [o for o in mocks.kubernetes_objects if o["kind"] == "HorizontalPodAutoscaler"]
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                             "name": "worker"}
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (1, 2)
    assert not [o for o in mocks.kubernetes_objects if o["kind"] == "ScaledObject"]
    assert validate_object(hpa, "1.30.0") == []
    (dep,) = [o for o in mocks.kubernetes_objects if o["kind"] == "Deployment"]
    assert dep["spec"]["replicas"] == 1  # the HPA's minimum; ignored by `pulumi up` from then on


def test_hpa_cannot_scale_from_zero():
    from infra.components.program import worker_pool_args
    from infra.components.worker_pool import Autoscaler
    from infra.components.worker_pool import validate as validate_pool

    raw = make_raw("existing")
    raw["worker_pool"].update(replicas=0, max_replicas=2)
    with pytest.raises(ValueError, match="an HPA cannot scale from zero"):
        validate_pool(worker_pool_args(parse_spec(raw), autoscaler=Autoscaler.hpa))


def test_worker_pod_runs_the_worker_with_its_own_contract(mocks):
    """The pod runs `python -m splitstack.cli.worker_process` on the resolved spec, with the env names and health
    endpoints the worker itself reads and serves (worker/config.py, worker/health.py)."""
    from contract.worker_env import ENV_METRICS_PORT, ENV_SERVER_URL, ENV_SPEC_FILE

    spec = make_spec("existing", "split")

    @pulumi.runtime.test
    def run():
        build(spec, ROOT)

    run()
    (dep,) = [o for o in mocks.kubernetes_objects
              if o["kind"] == "Deployment" and o["metadata"]["name"] == "worker"]
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["command"] == ["python", "-m", "splitstack.cli.worker_process", "--stack", spec.stack]
    env = {e["name"]: e for e in c["env"]}
    assert env[ENV_METRICS_PORT]["value"] == str(spec.worker_pool.metrics_port)
    assert env[ENV_SERVER_URL]["value"].endswith(f":{spec.worker_server.port}")
    key = spec.worker_server.api_key
    assert key is not None  # the split spec's server takes a key: the worker reads it from the Secret
    assert env[key.env]["valueFrom"]["secretKeyRef"] == {"name": key.name, "key": key.key}
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    spec_path = env[ENV_SPEC_FILE]["value"]
    (cm,) = [o for o in mocks.kubernetes_objects
             if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "worker-spec"]
    resolved = json.loads(cm["data"][spec_path.rsplit("/", 1)[1]])
    assert resolved["stack"] == spec.stack and "secure" not in cm["data"][spec_path.rsplit("/", 1)[1]]
    mounted = {m["mountPath"] for m in c["volumeMounts"]}
    assert spec_path.rsplit("/", 1)[0] in mounted


def test_external_redis_gives_keda_the_keys_create_secrets_writes(mocks):
    """KEDA's redis-streams scaler takes address and password, never a URL: the
    TriggerAuthentication reads keys of Secret splitstack-redis that `create_secrets` writes."""
    from infra.components.program import secret_commands, worker_pool_args
    from infra.components.worker_pool import Autoscaler, WorkerPoolComponent

    spec = make_spec("existing", "split", queue={"kind": "external"},
                     worker_pool={"replicas": 1, "max_replicas": 3})

    @pulumi.runtime.test
    def run():
        WorkerPoolComponent("workers", worker_pool_args(spec, autoscaler=Autoscaler.keda))

    run()
    (auth,) = [o for o in mocks.kubernetes_objects if o["kind"] == "TriggerAuthentication"]
    refs = {(r["parameter"], r["name"], r["key"]) for r in auth["spec"]["secretTargetRef"]}
    assert refs == {("address", "splitstack-redis", "address"), ("password", "splitstack-redis", "password")}
    (line,) = [c for c in secret_commands(spec) if "splitstack-redis " in c]
    for key in ("url", "address", "password"):
        assert f"--from-literal={key}=" in line


def test_the_worker_pool_takes_its_settings_not_the_whole_spec():
    """program.py reads the spec once for the pool (worker_pool_args): the pool's own settings, the
    server it calls, the queue, its image and environment, and the document its workers read."""
    import dataclasses

    from infra.components.program import worker_pool_args
    from infra.components.worker_pool import WorkerPoolArgs, cache_claim_name

    assert "spec" not in {f.name for f in dataclasses.fields(WorkerPoolArgs)}
    spec = make_spec("existing", "monolithic")
    args = worker_pool_args(spec, cache_class="fast-rwo", cache_min_gib=100)
    assert (args.pool, args.server, args.queue) == (spec.worker_pool, spec.worker_server, spec.queue)
    assert args.monolithic and args.server_url.endswith(f":{spec.worker_server.port}")
    assert json.loads(args.spec_document)["stack"] == spec.stack
    # the model cache is at least what the class provisions, and its size is in the claim's name
    assert args.cache_gib == max(sizing.model_cache_gib(spec.worker_server), 100) == 100
    assert cache_claim_name(args, "worker-gpu").endswith("-100gi")
