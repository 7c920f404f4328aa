"""Would `pulumi up` come up on a real cluster? Checked on the real dev and prod renders and on
variants derived from them, each the way a cluster breaks: pods that never schedule, claims
that never bind, custom resources without their operator, per-zone counts, deadlines shorter
than a cold start, DNS and Redis reachability, Pod Security, version floors."""

from __future__ import annotations

import json
import shutil
from functools import cache
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from contract import clusters, sizing
from contract.cluster_fit import ClusterFitError, check_cluster_fit
from contract.spec_loader import load_stack
from dashboards.generate import render_dashboards
from infra.components import program
from infra.components.network_policies import policies
from infra.policy import rules
from infra.policy.cluster_rules import cluster_fit, namespace_pod_security, pod_security
from infra.render import Capture, capture
from slo.spec import load_spec as load_slo_spec
from splitstack.cli.infra import app as infra_app
from splitstack.cli.main import app as main_app

from .cluster_variants import BROKEN, derive
from .infra_helpers import ROOT

REAL = ["dev", "prod"]
CHART_OF_GROUP = {"monitoring.coreos.com": "kube-prometheus-stack", "keda.sh": "keda"}


@cache
def real_render(stack: str) -> Capture:
    return capture(load_stack(stack, ROOT), ROOT)


def of_kind(result: Capture, kind: str) -> list[dict]:
    return [o for o in result.objects if o["kind"] == kind]


def pods(result: Capture) -> list[tuple[dict, dict, dict]]:
    return [(o, *found) for o in result.objects if (found := rules.pod_template(o))]


# ---- the real stacks -------------------------------------------------------------------------

@pytest.mark.parametrize("stack", REAL)
def test_real_stack_fits_and_passes_every_policy(stack):
    result = real_render(stack)
    assert check_cluster_fit(result.spec) == []
    assert {k: v for k, v in rules.check_all(result.objects).items() if v} == {}


@pytest.mark.parametrize("stack", REAL)
def test_every_pod_fits_a_node_after_reservations_and_daemonsets(stack):
    """The dev server once asked for 4 CPUs on a 4-vCPU g6e.xlarge."""
    result = real_render(stack)
    pool = result.spec.gpu_node_pool
    inst = clusters.instance(pool.cloud.value, pool.instance_type)
    gpu_left = clusters.allocatable(inst) - clusters.daemonset_requests(pool.cloud.value) \
        - clusters.daemonset_requests("gpu_operator")
    gpu_pods = [(obj, pod) for obj, _, pod in pods(result) if rules.gpu_count(pod)]
    assert gpu_pods, "no GPU pod rendered"
    for obj, pod in gpu_pods:
        req = pod["containers"][0]["resources"]["requests"]
        cpu = int(req["cpu"].removesuffix("m"))
        assert cpu <= gpu_left.cpu_m, obj["metadata"]["name"]
        assert int(req["memory"].removesuffix("Mi")) <= gpu_left.memory_mib
        # vLLM's own floor: 2 x (2 + N) vCPUs for N GPUs.
        assert cpu >= 2000 * (2 + int(req[rules.GPU]))


@pytest.mark.parametrize("stack", REAL)
def test_every_claim_names_a_class_that_provides_its_access_mode(stack):
    """No PVC falls to a default class (a new EKS cluster has none; none is ReadWriteMany)."""
    result = real_render(stack)
    cloud = result.spec.gpu_node_pool.cloud.value
    facts = {f.name: f for f in clusters.storage(cloud).values()}
    created = {o["metadata"]["name"]: o for o in of_kind(result, "StorageClass")}
    claims = [o["spec"] for o in of_kind(result, "PersistentVolumeClaim")]
    claims += [t["spec"] for o in of_kind(result, "StatefulSet") for t in o["spec"]["volumeClaimTemplates"]]
    assert len(claims) >= 3
    for claim in claims:
        fact = facts[claim["storageClassName"]]
        assert set(claim["accessModes"]) <= set(fact.access_modes)
        assert fact.created_by_program == (claim["storageClassName"] in created)
        assert int(claim["resources"]["requests"]["storage"].removesuffix("Gi")) >= fact.min_gib
    if cloud == "eks":  # the EBS and EFS CSI add-ons behind gp3 and efs
        addons = {r.inputs["addonName"] for r in result.mocks.of_type("aws:eks/addon:Addon")}
        assert addons == {"eks-pod-identity-agent", "aws-ebs-csi-driver", "aws-efs-csi-driver"}
        assert created["efs"]["parameters"]["fileSystemId"]
    if cloud == "gke":
        (cluster,) = result.mocks.of_type("gcp:container/cluster:Cluster")
        assert cluster.inputs["addonsConfig"]["gcpFilestoreCsiDriverConfig"] == {"enabled": True}


@pytest.mark.parametrize("stack", REAL)
def test_every_custom_resource_has_its_operator_installed(stack):
    """ServiceMonitors and PrometheusRules were once created with no Prometheus operator."""
    result = real_render(stack)
    charts = {r["chart"] for r in result.mocks.helm_releases}
    groups = {o["apiVersion"].split("/")[0] for o in result.objects if "." in o["apiVersion"].split("/")[0]
              and not o["apiVersion"].startswith(("apps/", "policy/", "networking.k8s.io/",
                                                  "storage.k8s.io/"))}
    # prod autoscales its workers with KEDA (worker_pool.max_replicas); dev has a fixed count
    assert groups == {"dev": {"monitoring.coreos.com"}, "prod": {"monitoring.coreos.com", "keda.sh"}}[stack]
    assert ("keda.sh" in groups) == (result.spec.worker_pool.max_replicas is not None)
    for group in groups:
        assert CHART_OF_GROUP[group] in charts
    version = result.spec.cluster.kubernetes_version
    for release in result.mocks.helm_releases:
        pinned = clusters.chart(release["chart"])
        assert release["version"] == pinned.version
        assert clusters.in_range(version, *pinned.kubernetes), release["chart"]


@pytest.mark.parametrize("stack", REAL)
def test_the_shipped_dashboards_are_shipped(stack):
    """The program once globbed dashboards/*.json while the generator writes dashboards/generated/."""
    result = real_render(stack)
    shipped = {o["metadata"]["annotations"]["splitstack.dev/source"]
               for o in of_kind(result, "ConfigMap") if "grafana_dashboard" in o["metadata"]["labels"]}
    generated = {f"dashboards/generated/{name}" for name in render_dashboards(load_slo_spec())}
    assert generated and shipped == generated


def test_prod_gke_counts_are_per_zone():
    """A regional pool with node_count 2 once meant 6 H100 nodes."""
    result = real_render("prod")
    spec = result.spec
    pools = {r.name.rsplit("-", 1)[1]: r.inputs for r in result.mocks.of_type("gcp:container/nodePool:NodePool")}
    zones = spec.gpu_node_pool.zones
    assert pools["gpu"]["nodeLocations"] == zones
    assert pools["gpu"]["nodeCount"] * len(zones) == spec.gpu_node_pool.node_count
    assert pools["cpu"]["nodeLocations"] == zones
    (cluster,) = result.mocks.of_type("gcp:container/cluster:Cluster")
    assert cluster.inputs["minMasterVersion"] == spec.cluster.kubernetes_version


def test_dev_eks_cluster_is_pinned_and_sized():
    result = real_render("dev")
    (cluster,) = result.mocks.of_type("eks:index:Cluster")
    assert cluster.inputs["version"] == result.spec.cluster.kubernetes_version
    groups = {r.name.rsplit("-", 1)[1]: r.inputs for r in result.mocks.of_type("eks:index:ManagedNodeGroup")}
    assert groups["gpu"]["instanceTypes"] == ["g6e.2xlarge"]
    assert groups["cpu"]["scalingConfig"]["desiredSize"] == 2  # workers + Redis + KEDA, one spare


@pytest.mark.parametrize("stack", REAL)
def test_deadlines_cover_the_cold_start(stack):
    """Deployments report ProgressDeadlineExceeded after 600 s by default; prod's qwen-vl may
    take 1800 s, and the workers wait for their server."""
    result = real_render(stack)
    spec = result.spec
    budget = {s.name: s.startup_budget_s for s in spec.inference_servers}
    deployments = of_kind(result, "Deployment")
    assert set(budget) <= {dep["metadata"]["name"] for dep in deployments}  # every server's Deployment is checked
    for dep in deployments:
        name = dep["metadata"]["name"]
        need = budget.get(name, spec.worker_server.startup_budget_s)
        assert dep["spec"]["progressDeadlineSeconds"] >= need, name
    for release in result.mocks.helm_releases:
        assert release["timeout"] >= 600


def test_prod_workers_start_at_kedas_minimum():
    """The count stays in the Deployment (removing it resets a live one to 1); `pulumi up` ignores
    it while KEDA owns it (ignore_changes: proven against a real API server in
    tests/integration/cluster)."""
    result = real_render("prod")
    (scaler,) = of_kind(result, "ScaledObject")
    target = scaler["spec"]["scaleTargetRef"]["name"]
    (dep,) = [d for d in of_kind(result, "Deployment") if d["metadata"]["name"] == target]
    assert dep["spec"]["replicas"] == scaler["spec"]["minReplicaCount"]
    assert dep["metadata"]["annotations"]["pulumi.com/patchForce"] == "true"
    assert scaler["spec"]["minReplicaCount"] == result.spec.worker_pool.replicas
    (auth,) = of_kind(result, "TriggerAuthentication")
    assert auth["spec"]["secretTargetRef"][0]["parameter"] == "password"


@pytest.mark.parametrize("stack", REAL)
def test_network_reaches_dns_and_redis(stack):
    result = real_render(stack)
    (dns,) = [p for p in of_kind(result, "NetworkPolicy") if p["metadata"]["name"] == "allow-dns"]
    peers = dns["spec"]["egress"][0]["to"]
    assert {"ipBlock": {"cidr": "169.254.20.10/32"}} in peers  # NodeLocal DNSCache
    producers = derive(stack, {"queue.producer_namespaces": ["ingest"]})
    ingress = policies(producers)["redis-ingress"]["ingress"]
    assert any(p.get("namespace_selector", {}).get("match_labels") == {
        "kubernetes.io/metadata.name": "ingest"} for rule in ingress for p in rule["from"])


@pytest.mark.parametrize("stack", REAL)
def test_pods_are_restricted_and_redis_asks_for_a_password(stack):
    result = real_render(stack)
    (ns,) = [n for n in of_kind(result, "Namespace") if n["metadata"]["name"] == result.spec.namespace]
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    for obj, _, pod in pods(result):
        assert pod_security(obj) == [], obj["metadata"]["name"]
        assert pod["securityContext"]["runAsNonRoot"] is True
    (redis,) = of_kind(result, "StatefulSet")
    c = redis["spec"]["template"]["spec"]["containers"][0]
    args = c["args"]
    assert args[args.index("--requirepass") + 1] == "$(REDIS_PASSWORD)"
    maxmemory = int(args[args.index("--maxmemory") + 1].removesuffix("mb"))
    assert maxmemory < int(c["resources"]["limits"]["memory"].removesuffix("Mi"))
    workers = [d for d in of_kind(result, "Deployment") if d["metadata"]["name"] == "worker"]
    env = {e["name"]: e for e in workers[0]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["SPLITSTACK_REDIS_URL"]["value"].startswith("redis://:$(SPLITSTACK_REDIS_PASSWORD)@")
    names = [e for e in env]
    assert names.index("SPLITSTACK_REDIS_PASSWORD") < names.index("SPLITSTACK_REDIS_URL")


# ---- broken variants of the real stacks ------------------------------------------------------

@pytest.mark.parametrize("variant", BROKEN, ids=[v.id for v in BROKEN])
def test_broken_variant_is_refused_before_pulumi_up(variant):
    spec = variant.spec()
    problems = check_cluster_fit(spec)
    assert any(p.path == variant.path and variant.says in p.message for p in problems), problems
    with pytest.raises(ClusterFitError, match=variant.path.replace("[", r"\[").replace("]", r"\]")):
        program.check(spec)


GATE_OFF = ["dev-small-instance-cpu", "prod-regional-gke", "existing-without-operators",
            "existing-2-replicas-rwo-only"]


@pytest.mark.parametrize("variant", [v for v in BROKEN if v.id in GATE_OFF], ids=GATE_OFF)
def test_the_policy_pack_refuses_what_the_program_would_create(variant, monkeypatch):
    """With the program's own gate off, the CrossGuard cluster-fit policy still refuses the
    objects (it reads the resolved spec back from the worker-spec ConfigMap)."""
    monkeypatch.setattr(program, "require_cluster_fit", lambda spec: None)
    result = capture(variant.spec(), ROOT)
    found = cluster_fit(result.objects)
    assert any(v.startswith(variant.path) for v in found), found
    if variant.id == "existing-2-replicas-rwo-only":
        # The object-level checks too: a claim without a class.
        assert any("no storageClassName" in v for v in found), found
    if variant.id == "dev-small-instance-cpu":
        assert any("Deployment splitstack-dev/mineru-vlm: requests 6000m CPU" in v for v in found)


def test_a_readwriteonce_cache_under_two_replicas_is_flagged():
    result = real_render("dev")
    objs = json.loads(json.dumps(result.objects))
    dep = next(o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == "mineru-vlm")
    dep["spec"]["replicas"] = 2
    found = cluster_fit(objs)
    assert any("up to 2 pods mount the ReadWriteOnce claim 'mineru-vlm-model-cache-rwo-9gi'" in v
               for v in found), found


def test_pod_security_and_namespace_rules_flag_a_root_pod():
    result = real_render("dev")
    objs = json.loads(json.dumps(result.objects))
    dep = next(o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == "worker")
    pod = dep["spec"]["template"]["spec"]
    pod.pop("securityContext")
    pod["containers"][0]["securityContext"] = {"runAsUser": 0}
    found = pod_security(dep)
    assert any("runAsNonRoot is not true" in v for v in found)
    assert any("capabilities.drop lacks ALL" in v for v in found)
    assert any("no seccompProfile RuntimeDefault" in v for v in found)
    ns = next(o for o in objs if o["kind"] == "Namespace" and o["metadata"]["name"] == "splitstack-dev")
    ns["metadata"]["labels"].pop("pod-security.kubernetes.io/enforce")
    assert namespace_pod_security(objs) == [
        "Namespace splitstack-dev: no pod-security.kubernetes.io/enforce: restricted label; Pod "
        "Security admission would admit a root or privileged pod there"]


# ---- the node arithmetic, against the formulas the clouds publish ---------------------------

def test_allocatable_follows_each_clouds_published_reservations():
    g6e = clusters.instance("eks", "g6e.xlarge")  # 4 vCPU, 32 GiB, 58 pods
    assert clusters.reserved(g6e) == clusters.Resources(60 + 10 + 10, 11 * 58 + 255 + 100, 0)
    e2 = clusters.instance("gke", "e2-standard-8")  # 8 vCPU, 32 GiB
    gke_mem = (0.25 * 4 + 0.20 * 4 + 0.10 * 8 + 0.06 * 16) * 1024
    assert clusters.reserved(e2) == clusters.Resources(60 + 10 + 10 + 10, int(gke_mem) + 1 + 100, 0)
    d8 = clusters.instance("aks", "Standard_D8s_v5")  # 8 cores: 180m; min(20 MB x 250 + 50 MB, 25%)
    aks_mem = (20 * 250 + 50) * 1e6 / 2**20
    assert clusters.reserved(d8) == clusters.Resources(180, int(aks_mem) + 1 + 100, 0)


def test_server_cpu_follows_vllms_two_plus_n_cores():
    spec = load_stack("prod", ROOT)
    server = spec.inference_servers[0]
    assert sizing.server_cpu_millicores(server) == 2 * (2 + server.tensor_parallel_size) * 1000
    assert sizing.server_cpu_millicores(server.model_copy(update={"cpu_millicores": 3000})) == 3000


# ---- the command lines ---------------------------------------------------------------------

def test_plan_states_nodes_per_zone_gpus_pods_storage_and_images():
    result = CliRunner().invoke(infra_app, ["plan", "--stack", "prod"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "gpu pool: a3-highgpu-1g x 2 = 2 x nvidia-h100-80gb" in out
    assert "1 node(s) in EACH of us-central1-a, us-central1-c = 2" in out
    assert "node 1 (us-central1-a): 1 x inference_servers[1] 'qwen-vl'" in out
    assert "PVC splitstack-outputs: 1024Gi ReadWriteMany on standard-rwx" in out
    assert "ghcr.io/splitstack/inference-server:v0.32.0 (mineru-vlm, qwen-vl)" in out


def _variant_root(tmp_path: Path, name: str, spec_raw: dict) -> Path:
    shutil.copy(ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    config = {f"splitstack:{k}": v for k, v in spec_raw.items() if k != "stack"}
    (tmp_path / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump({"config": config}))
    return tmp_path


def test_spec_validate_and_plan_refuse_a_variant_naming_the_field(tmp_path, monkeypatch):
    variant = next(v for v in BROKEN if v.id == "prod-regional-gke")
    raw = json.loads(variant.spec().model_dump_json(exclude_defaults=True))
    monkeypatch.setenv("SPLITSTACK_ROOT", str(_variant_root(tmp_path, "regional", raw)))
    result = CliRunner().invoke(main_app, ["spec", "validate", "regional"])
    assert result.exit_code == 1
    assert "gpu_node_pool.zones: empty with the regional location 'us-central1'" in result.output
    result = CliRunner().invoke(infra_app, ["plan", "--stack", "regional"])
    assert result.exit_code == 2
    assert "REFUSED: stack 'regional' does not fit its cluster" in result.output
    assert "2 node(s) in EACH zone the regional cluster picks (3 in most regions): 6 nodes" \
        in result.output
