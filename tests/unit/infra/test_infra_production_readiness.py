"""What a first production deployment needs once the objects are accepted: Prometheus and
Alertmanager on volumes sized from the spec, monitors the cluster's Prometheus selects, caches
that survive a restart in both modes, a PDB for monolithic workers, the cloud's prerequisites,
and an `infra plan` that says all of it truthfully. On the real dev and prod renders and
variants derived from them."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from contract import clusters, naming
from contract.cluster_fit import check_cluster_fit, storage_needs
from contract.sizing import prometheus_storage
from contract.spec_loader import SpecError
from infra.components.clouds.gke import check_auth_plugin, required_apis
from infra.entry import preflight
from infra.plan import build_plan, render_plan, unselected_monitors
from infra.render import capture
from splitstack.cli.infra import app as infra_app

from .cluster_variants import derive
from .infra_helpers import BASE, ROOT, make_spec

GIB = 1024**3


def _kps_values(result) -> dict:
    (release,) = [r for r in result.mocks.helm_releases if r["chart"] == "kube-prometheus-stack"]
    return release["values"]


def _of(result, kind: str, name: str | None = None) -> list[dict]:
    return [o for o in result.objects if o["kind"] == kind
            and (name is None or o["metadata"]["name"] == name)]


# ---- Prometheus and Alertmanager keep their state ---------------------------------------------

@pytest.mark.parametrize(("stack", "size_gib", "storage_class"),
                         [("dev", 57, "gp3"), ("prod", 19, "standard-rwo")])
def test_prometheus_volume_is_sized_from_retention_series_and_scrape_interval(stack, size_gib,
                                                                             storage_class):
    spec = derive(stack)
    o = spec.observability
    # The formula written out here, apart from contract/sizing.py: blocks at 2 B a sample plus
    # 10 %, and three hours of WAL at 14 B a sample.
    samples_per_s = o.series / o.scrape_interval_s
    expected = (o.retention_h * 3600 * samples_per_s * 2 * 1.1 + 3 * 3600 * samples_per_s * 14) / GIB
    assert prometheus_storage(spec).size_gib == size_gib == -(-expected // 1)
    prom = _kps_values(capture(spec, ROOT))["prometheus"]["prometheusSpec"]
    claim = prom["storageSpec"]["volumeClaimTemplate"]["spec"]
    assert claim == {"storageClassName": storage_class, "accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": f"{size_gib}Gi"}}}
    assert prom["retention"] == "744h"
    assert prom["retentionSize"] == f"{int(size_gib * 0.9)}GB"  # below the volume


def test_alertmanager_state_is_on_a_volume_of_the_clouds_class():
    values = _kps_values(capture(derive("prod"), ROOT))
    claim = values["alertmanager"]["alertmanagerSpec"]["storage"]["volumeClaimTemplate"]["spec"]
    assert claim["storageClassName"] == "standard-rwo"
    assert claim["resources"]["requests"]["storage"] == "1Gi"
    assert "config" in values["alertmanager"]  # the generated routing is still there


def test_more_series_or_a_shorter_interval_grow_the_volume():
    base = prometheus_storage(derive("prod")).size_gib
    assert prometheus_storage(derive("prod", {"observability.series": 200_000})).size_gib > 3 * base
    assert prometheus_storage(derive("prod", {"observability.scrape_interval_s": 5})).size_gib > 2 * base


def test_an_existing_cluster_installing_the_stack_needs_a_block_class():
    spec = make_spec("existing", "split")
    assert not any("Prometheus TSDB" in who for who in storage_needs(spec)["block"])
    raw_spec = make_spec("existing", "split", observability=BASE["observability"],
                         cluster={"operators": ["keda", "nvidia-device-plugin"],
                                  "shared_storage_class": "nfs-rwx"})
    problems = [str(p) for p in check_cluster_fit(raw_spec)]
    assert any(p.startswith("cluster.storage_class") and "Prometheus TSDB" in p for p in problems)


# ---- monitors the Prometheus selects ----------------------------------------------------------

def test_monitor_labels_and_prometheus_address_come_from_the_spec():
    spec = make_spec("existing", "split", observability={
        "install_kube_prometheus_stack": False, "prometheus_namespace": "observability",
        "prometheus_url": "http://prom.observability.svc:9090/",
        "monitor_labels": {"prometheus": "platform"}})
    result = capture(spec, ROOT)
    monitors = _of(result, "ServiceMonitor") + _of(result, "PrometheusRule")
    assert monitors
    for m in monitors:
        assert m["metadata"]["labels"]["prometheus"] == "platform"
        assert "release" not in m["metadata"]["labels"]
    (scaler,) = [s for s in _of(result, "ScaledObject")
                 if s["spec"]["triggers"][0]["type"] == "prometheus"]
    assert scaler["spec"]["triggers"][0]["metadata"]["serverAddress"] == "http://prom.observability.svc:9090"
    (ingress,) = _of(result, "NetworkPolicy", "worker-ingress")
    peer = ingress["spec"]["ingress"][0]["from"][0]
    assert peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "observability"}
    text = render_plan(build_plan(spec, ROOT))
    assert "Prometheus: http://prom.observability.svc:9090 (your cluster's, in namespace observability)" in text
    assert "your Prometheus must select prometheus=platform" in text


def test_the_installed_prometheus_selects_what_the_program_labels():
    spec = derive("dev", {"observability.monitor_labels": {"team": "docs"}})
    plan = build_plan(spec, ROOT)
    assert plan.fits and unselected_monitors(plan) == []
    prom = _kps_values(plan.capture)["prometheus"]["prometheusSpec"]
    for key in ("serviceMonitorSelector", "podMonitorSelector", "ruleSelector"):
        assert prom[key] == {"matchLabels": {"team": "docs"}}
    # A selector that does not match (a chart default, a typo) is caught and refused.
    values = _kps_values(plan.capture)
    values["prometheus"]["prometheusSpec"]["ruleSelector"] = {"matchLabels": {"release": "x"}}
    assert unselected_monitors(plan) and all(m.startswith("PrometheusRule") for m in unselected_monitors(plan))


def test_monitor_labels_refuse_an_empty_mapping():
    with pytest.raises(SpecError, match=r"observability.monitor_labels: \{\} selects nothing"):
        derive("dev", {"observability.monitor_labels": {}})


# ---- caches that survive a restart, and a PDB for monolithic workers --------------------------

def test_server_compile_cache_is_on_the_model_cache_claim():
    result = capture(derive("dev"), ROOT)
    (dep,) = _of(result, "Deployment", "mineru-vlm")
    pod = dep["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["VLLM_CACHE_ROOT"] == "/models/vllm-cache"
    assert env["TRITON_CACHE_DIR"] == "/models/triton-cache"
    (cache,) = [v for v in pod["volumes"] if v["name"] == "model-cache"]
    assert "persistentVolumeClaim" in cache


@pytest.mark.parametrize(("changes", "mode", "claim_class"), [
    ({"worker_pool.replicas": 1, "worker_pool.max_replicas": 2}, "ReadWriteMany", "standard-rwx"),
    ({"worker_pool.replicas": 1}, "ReadWriteOnce", "standard-rwo")])
def test_monolithic_workers_get_a_pdb_and_a_lasting_cache(changes, mode, claim_class):
    spec = derive("prod", {"deployment_mode": "monolithic", **changes}, edit=lambda raw: raw[
        "worker_pool"].pop("max_replicas") if "worker_pool.max_replicas" not in changes else None)
    result = capture(spec, ROOT)
    (pdb,) = _of(result, "PodDisruptionBudget", "worker-gpu")
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": naming.worker_labels(True)}}
    (dep,) = _of(result, "Deployment", "worker-gpu")
    pod = dep["spec"]["template"]["spec"]
    (cache,) = [v for v in pod["volumes"] if v["name"] == "model-cache"]
    claim_name = cache["persistentVolumeClaim"]["claimName"]
    (pvc,) = _of(result, "PersistentVolumeClaim", claim_name)
    assert pvc["spec"]["accessModes"] == [mode] and pvc["spec"]["storageClassName"] == claim_class
    assert not any("ephemeral" in v for v in pod["volumes"])
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["HF_HOME"].startswith("/models/") and env["VLLM_CACHE_ROOT"].startswith("/models/")
    text = render_plan(build_plan(spec, ROOT))
    assert "refuses to start" not in text
    assert "loads opendatalab/MinerU2.5-2509-1.2B in-process with backend vlm-vllm-engine" in text
    assert f"PVC {claim_name}:" in text


# ---- prerequisites ---------------------------------------------------------------------------

def test_gke_enables_its_apis_and_checks_the_auth_plugin():
    result = capture(derive("prod"), ROOT)
    services = {r.inputs["service"] for r in result.mocks.of_type("gcp:projects/service:Service")}
    assert services == {"container.googleapis.com", "file.googleapis.com"}
    assert required_apis(False) == ["container.googleapis.com"]
    with pytest.raises(RuntimeError, match="gcloud components install gke-gcloud-auth-plugin"):
        check_auth_plugin(lambda _: None)
    check_auth_plugin(lambda name: f"/usr/bin/{name}")


def test_the_program_runs_its_clouds_own_preflight(tmp_path, monkeypatch):
    """infra/entry.py asks the cloud's program module (GKE: the auth plugin on PATH), not a
    branch of its own; clouds without a preflight pass."""
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RuntimeError, match="gke-gcloud-auth-plugin is not on PATH"):
        preflight(derive("prod"))
    preflight(derive("dev"))
    plugin = tmp_path / "gke-gcloud-auth-plugin"
    plugin.write_text("#!/bin/sh\n")
    plugin.chmod(0o755)
    preflight(derive("prod"))


@pytest.mark.parametrize("cloud", ["eks", "gke", "aks", "existing"])
def test_every_cloud_lists_its_prerequisites(cloud):
    items = clusters.prerequisites(cloud)
    assert items and all(i.what and i.how for i in items)


def test_an_unknown_cloud_has_no_prerequisites_to_fall_back_on():
    with pytest.raises(KeyError, match="no prerequisites for cloud 'nimbus'"):
        clusters.prerequisites("nimbus")


# ---- the plan --------------------------------------------------------------------------------

@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_plan_states_persistence_monitoring_prerequisites_and_network(stack):
    result = CliRunner().invoke(infra_app, ["plan", "--stack", stack])
    assert result.exit_code == 0, result.output
    out = result.output
    size = {"dev": "57Gi", "prod": "19Gi"}[stack]
    assert f"Prometheus TSDB: {size} ReadWriteOnce" in out and "744 h x 50,000 series" in out
    assert "Alertmanager state: 1Gi ReadWriteOnce" in out
    assert "checked: its serviceMonitorSelector, podMonitorSelector and ruleSelector select " \
           "release=kube-prometheus-stack" in out
    assert "every flow the stack needs is allowed" in out
    assert "by tag from the spec's repositories (images.registry unset)" in out
    assert "Prerequisites" in out
    assert "x aws:efs/mountTarget" not in out  # the mock's subnet count is not the account's
    if stack == "dev":
        assert "aws:efs/mountTarget:MountTarget: one per control-plane subnet" in out
    else:
        assert "file.googleapis.com" in out and "gke-gcloud-auth-plugin" in out
        assert "gcp:projects/service:Service" in out


def test_plan_shows_a_wrong_network_path():
    """The plan's network section is computed, not a fixed sentence: a policy that admits too
    much shows up as WRONG."""
    plan = build_plan(derive("dev"), ROOT)
    assert "WRONG" not in render_plan(plan)
    (redis,) = _of(plan.capture, "NetworkPolicy", "redis-ingress")
    redis["spec"]["ingress"].append({"ports": [{"protocol": "TCP", "port": 6379}]})
    text = render_plan(plan)
    assert "WRONG: other-pod@default -> redis TCP/6379: allowed but not needed" in text


# ---- EKS control-plane zones -----------------------------------------------------------------

def test_eks_control_plane_and_mount_targets_skip_zones_eks_refuses():
    from infra.components.clouds.eks import control_plane_zones

    result = capture(derive("dev"), ROOT)
    (call,) = [a for t, a in result.mocks.calls
               if t == "aws:index/getAvailabilityZones:getAvailabilityZones"]
    assert call["excludeZoneIds"] == ["use1-az3"]  # contract/clusters.yaml, us-east-1
    (cluster,) = result.mocks.of_type("eks:index:Cluster")
    subnets = set(cluster.inputs["subnetIds"])
    assert "subnet-mock-us-east-1e" not in subnets  # the mock account's name of use1-az3
    assert len(subnets) == 5
    targets = {r.inputs["subnetId"] for r in result.mocks.of_type("aws:efs/mountTarget:MountTarget")}
    assert targets == subnets
    supported = ["us-east-1a", "us-east-1b", "us-east-1c"]
    assert control_plane_zones([], supported, "us-east-1") == supported
    # One GPU zone: the node groups go there, the control plane still spans two or more.
    assert control_plane_zones(["us-east-1b"], supported, "us-east-1") == supported
    assert control_plane_zones(["us-east-1a", "us-east-1c"], supported, "us-east-1") == [
        "us-east-1a", "us-east-1c"]
    with pytest.raises(ValueError, match=r"us-east-1e not among the zones .* use1-az3"):
        control_plane_zones(["us-east-1e"], supported, "us-east-1")


def test_eks_gpu_nodes_stay_in_the_spec_zone():
    result = capture(derive("dev", {"gpu_node_pool.zones": ["us-east-1b"]}), ROOT)
    groups = {r.name: r.inputs for r in result.mocks.of_type("eks:index:ManagedNodeGroup")}
    gpu = next(v for k, v in groups.items() if k.endswith("-gpu"))
    assert gpu["subnetIds"] == ["subnet-mock-us-east-1b"]
    (cluster,) = result.mocks.of_type("eks:index:Cluster")
    assert len(cluster.inputs["subnetIds"]) == 5


# ---- Kubernetes versions against each cloud's support and every chart ------------------------

def test_a_version_past_standard_support_is_refused_unless_the_spec_accepts_it():
    # The infra tests fix "today" at 2026-11-27 (conftest.py).
    refused = [str(p) for p in check_cluster_fit(derive("dev", {"cluster.allow_extended_support": False}))]
    (problem,) = [p for p in refused if p.startswith("cluster.kubernetes_version")]
    assert "standard support for it ended 2026-07-29" in problem
    assert "set cluster.allow_extended_support: true" in problem
    assert "no version in standard support is in every pinned chart's range" in problem
    assert check_cluster_fit(derive("dev")) == []  # dev accepts it, and says why in its file
    unknown = [str(p) for p in check_cluster_fit(derive("dev", {"cluster.kubernetes_version": "1.28"}))]
    assert any("1.28 is not a version eks creates clusters at" in p for p in unknown)


@pytest.mark.parametrize("cloud", ["eks", "gke", "aks"])
def test_every_listed_version_is_checked_against_every_pinned_chart(cloud):
    from contract.cluster_fit import charts_refusing, version_table

    spec = make_spec(cloud, "split")
    table = version_table(spec)
    assert [v for v, _, _ in table] == sorted(clusters.standard_support_ends(cloud), key=clusters.minor)
    installed = ["gpu-operator", "keda", "kube-prometheus-stack", "prometheus-operator-crds"]
    if cloud == "gke":
        installed.remove("gpu-operator")  # GKE brings its own device plugin
    for version, _end, refusing in table:
        expected = [name for name in installed
                    if not clusters.in_range(version, *clusters.chart(name).kubernetes)]
        assert [r.split()[0] for r in refusing] == expected == [
            r.split()[0] for r in charts_refusing(spec, version)]
    # The default version is deployable on every cloud (inside every pinned chart's range).
    assert dict((v, r) for v, _, r in table)["1.33"] == []


def test_gke_joins_the_extended_channel_only_when_allowed():
    (cluster,) = capture(derive("prod"), ROOT).mocks.of_type("gcp:container/cluster:Cluster")
    assert cluster.inputs["releaseChannel"] == {"channel": "EXTENDED"}


def test_plan_lists_versions_with_support_and_charts():
    text = render_plan(build_plan(derive("dev"), ROOT))
    assert "  1.33: standard support ENDED 2026-07-29; charts: all support it <- this stack" in text
    assert "  1.35: standard support until 2027-03-27; refused by gpu-operator v25.3.4 (1.29-1.33), " \
           "keda 2.19.0 (1.32-1.34)" in text


# ---- AKS GPU nodes ---------------------------------------------------------------------------

def test_aks_gpu_pool_skips_the_aks_driver_and_the_operator_installs_it():
    spec = make_spec("aks", "split", gpu_node_pool={
        **make_spec("aks").gpu_node_pool.model_dump(mode="json"),
        "taints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]})
    result = capture(spec, ROOT)
    (pool,) = result.mocks.of_type("azure-native:containerservice:AgentPool")
    assert pool.inputs["gpuProfile"] == {"driver": "None"}
    (release,) = [r for r in result.mocks.helm_releases if r["chart"] == "gpu-operator"]
    values = release["values"]
    assert values["driver"] == {"enabled": True} and values["toolkit"] == {"enabled": True}
    nfd = values["node-feature-discovery"]["worker"]["tolerations"]
    assert {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"} in nfd
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in nfd
    assert values["daemonsets"]["tolerations"] == [
        {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]


def test_eks_keeps_the_ami_driver():
    result = capture(derive("dev"), ROOT)
    (release,) = [r for r in result.mocks.helm_releases if r["chart"] == "gpu-operator"]
    assert release["values"]["driver"] == {"enabled": False}
    assert release["values"]["toolkit"] == {"enabled": False}


# ---- images a cluster can pull ---------------------------------------------------------------

DIGEST = "sha256:" + "ab" * 32


def test_with_a_registry_every_pod_pulls_by_digest_with_the_pull_secret():
    from contract.image_refs import registry_ref, stack_images

    base = derive("prod", {"images.registry": "registry.example.com/splitstack"})
    digests = {registry_ref(base, i.source): DIGEST for i in stack_images(base)}
    assert sorted(digests) == [
        "registry.example.com/splitstack/busybox:1.36.1",
        "registry.example.com/splitstack/inference-server:v0.32.0",
        "registry.example.com/splitstack/redis:7.4.1-alpine",
        "registry.example.com/splitstack/worker:0.1.0"]
    spec = derive("prod", {"images.registry": "registry.example.com/splitstack",
                           "images.pull_secret": "regcred", "images.digests": digests})
    result = capture(spec, ROOT)
    text = render_plan(build_plan(spec, ROOT))
    assert "by digest from registry.example.com/splitstack (images/lock/prod.json), pull secret regcred" in text
    pods = [o["spec"]["template"]["spec"] for o in result.objects
            if o["kind"] in ("Deployment", "StatefulSet")]
    assert len(pods) == 4
    for pod in pods:
        assert pod["imagePullSecrets"] == [{"name": "regcred"}]
        for c in pod["containers"] + pod.get("initContainers", []):
            assert c["image"].startswith("registry.example.com/splitstack/") and c["image"].endswith("@" + DIGEST)


def test_a_registry_without_recorded_digests_is_refused_before_pulumi_up():
    spec = derive("dev", {"images.registry": "registry.example.com/splitstack"})
    (problem,) = [str(p) for p in check_cluster_fit(spec)]
    assert problem.startswith("images.digests: no digest recorded for registry.example.com/splitstack/")
    assert "splitstack images push --stack dev" in problem
    result = CliRunner().invoke(infra_app, ["plan", "--stack", "dev"])  # no registry: by tag, fits
    assert result.exit_code == 0 and "ghcr.io/splitstack/worker:0.1.0 (worker)" in result.output


@pytest.mark.parametrize(("field", "value", "message"), [
    ("images.registry", "https://registry.example.com", "no scheme"),
    ("images.registry", "Registry.Example.com/", "lowercase"),
    ("images.digests", {"r/x:1": "sha256:abc"}, "sha256:<64 hex digits>"),
])
def test_image_settings_refuse_bad_values(field, value, message):
    with pytest.raises(SpecError, match=rf"{re.escape(field)}: .*{re.escape(message)}"):
        derive("dev", {field: value})
