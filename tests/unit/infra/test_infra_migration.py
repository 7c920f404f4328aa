"""The program while migrating (migration.monolithic_workers, docs/migration.md): the monolithic
pool as deployment_mode monolithic renders it, the split pool and its server, and the router; each
pool on its cohort's stream with its topology label; objects valid for Kubernetes 1.30..newest and
their CRDs, accepted by the policy pack, network policies exact."""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pytest

from contract.migration import ENV_COHORT_STREAMS, cohort_stream
from contract.spec import Spec
from contract.spec_loader import SpecError, parse_spec
from infra import reachability as r
from infra.policy.manifests import validate_all
from infra.policy.rules import check_all
from infra.render import capture

from .infra_helpers import ROOT, make_raw


def migrating_spec(workers: int = 2, nodes: int = 3, **queue: Any) -> Spec:
    raw = make_raw("existing", "split")
    raw["gpu_node_pool"]["node_count"] = nodes
    raw["migration"] = {"monolithic_workers": workers}
    if queue:
        raw["queue"] = queue
    return parse_spec(raw)


def by(objects: list[dict], kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def container(dep: dict) -> dict:
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    return c


def env(c: dict) -> dict[str, dict]:
    return {e["name"]: e for e in c.get("env") or []}


@pytest.fixture(scope="module")
def rendered() -> tuple[Spec, list[dict]]:
    spec = migrating_spec()
    return spec, capture(spec, ROOT).objects


def test_both_pools_the_server_and_the_router_are_rendered(rendered):
    spec, objects = rendered
    deps = by(objects, "Deployment")
    assert {"mineru-vlm", "worker", "worker-monolithic", "router"} <= set(deps)
    split, mono = container(deps["worker"]), container(deps["worker-monolithic"])
    # the monolithic pool as monolithic mode renders it: one GPU each, its cache and PDB, N fixed
    assert mono["resources"]["limits"]["nvidia.com/gpu"] == "1" and "nvidia.com/gpu" not in split["resources"]["limits"]
    assert deps["worker-monolithic"]["spec"]["replicas"] == 2 and "startupProbe" in mono
    assert "worker-monolithic" in by(objects, "PodDisruptionBudget")
    assert any(n.startswith("worker-monolithic-model-cache-") for n in by(objects, "PersistentVolumeClaim"))
    # pods labelled as monolithic mode's (policies and rules select them alike), objects named apart
    assert deps["worker-monolithic"]["spec"]["selector"]["matchLabels"]["app.kubernetes.io/instance"] == "worker-gpu"
    # the split pool keeps calling its server; both read their cohort's stream
    assert env(split)["SPLITSTACK_SERVER_URL"]["value"].startswith("http://mineru-vlm.")
    assert env(split)[ENV_COHORT_STREAMS]["value"] == env(mono)[ENV_COHORT_STREAMS]["value"] == "1"
    for name, topology in (("worker", "split"), ("worker-monolithic", "monolithic")):
        assert deps[name]["spec"]["template"]["metadata"]["labels"]["splitstack.dev/topology"] == topology
    # each pool's own spec says its mode (the worker picks its cohort's stream from it)
    cms = by(objects, "ConfigMap")
    assert json.loads(cms["worker-monolithic-spec"]["data"]["spec.json"])["deployment_mode"] == "monolithic"
    volumes = {v["name"]: v for v in deps["worker-monolithic"]["spec"]["template"]["spec"]["volumes"]}
    assert volumes["spec"]["configMap"]["name"] == "worker-monolithic-spec"
    assert json.loads(cms["worker-spec"]["data"]["spec.json"])["deployment_mode"] == "split"


def test_router_reads_the_jobs_stream_with_the_workers_group(rendered):
    spec, objects = rendered
    router = by(objects, "Deployment")["router"]
    c = container(router)
    q = spec.queue
    assert c["command"][:3] == ["python", "-m", "worker.router"]
    args = dict(zip(c["command"][3::2], c["command"][4::2]))
    assert args["--stream"] == q.stream and args["--group"] == q.group
    assert args["--redis-url"] == f"$({q.url_env})"  # expanded by the kubelet from the env below
    e = env(c)
    assert q.password is not None
    assert e[q.password.env]["valueFrom"]["secretKeyRef"] == {"name": q.password.name, "key": q.password.key}
    assert e[q.url_env]["value"] == f"redis://:$({q.password.env})@redis.{spec.namespace}.svc.cluster.local:6379/0"
    assert list(e).index(q.password.env) < list(e).index(q.url_env)  # $(VAR) needs it defined first
    assert c["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["image"].startswith(spec.worker_pool.image)  # the CPU worker image (it holds worker/)


def test_scalers_and_monitors_are_per_cohort(rendered):
    spec, objects = rendered
    scaled = by(objects, "ScaledObject")
    (trigger,) = scaled["worker"]["spec"]["triggers"]
    assert trigger["metadata"]["stream"] == cohort_stream(spec.queue.stream, "split")
    assert "worker-monolithic" not in scaled  # the monolithic pool has N fixed workers (N GPUs)
    monitors = by(objects, "ServiceMonitor")
    for name, topology in (("worker", "split"), ("worker-monolithic", "monolithic")):
        (endpoint,) = monitors[name]["spec"]["endpoints"]
        assert endpoint["relabelings"] == [{"action": "replace", "targetLabel": "topology",
                                            "replacement": topology}]


def test_objects_validate_and_the_policy_pack_accepts_them(rendered):
    spec, objects = rendered
    assert validate_all(objects) == []
    assert {k: v for k, v in check_all(objects).items() if v} == {}


@pytest.mark.parametrize("queue", [{}, {"kind": "external"}], ids=["in-cluster", "external"])
def test_network_policies_are_exact_and_the_router_reaches_redis(queue):
    spec = migrating_spec(**queue)
    objects = capture(spec, ROOT).objects
    assert r.unmet(spec, objects) == []
    cells = {(c.src, c.dst): c.allowed for c in r.matrix(spec, objects)}
    assert not cells[("router", "mineru-vlm")] and not cells[("worker-monolithic", "mineru-vlm")]
    assert cells[("worker-monolithic", "internet")]  # the model download (HTTPS); the queue too when external
    if not queue:
        assert cells[("router", "redis")] and cells[("worker-monolithic", "redis")] and cells[("worker", "redis")]
        assert not cells[("router", "internet")]


def test_outputs_say_how_to_reach_the_share():
    from infra.components.program import stack_outputs

    out = stack_outputs(migrating_spec(), "http://prom")
    assert out["port_forward"]["redis"] == "kubectl -n splitstack-test port-forward svc/redis 6379:6379"
    assert out["commands"]["runbook_migrate"] == (
        "runbook migrate --to 10 --stack test --redis-url redis://127.0.0.1:6379")
    plain = stack_outputs(parse_spec(make_raw("existing", "split")), "http://prom")
    assert "redis" not in plain["port_forward"] and "runbook_migrate" not in plain["commands"]


def test_not_migrating_renders_none_of_it():
    objects = capture(parse_spec(make_raw("existing", "split")), ROOT).objects
    assert not {"worker-monolithic", "router"} & set(by(objects, "Deployment"))
    assert ENV_COHORT_STREAMS not in env(container(by(objects, "Deployment")["worker"]))


def test_migration_spec_rules_name_the_fix():
    with pytest.raises(SpecError, match="plus migration.monolithic_workers .* needs 4 GPU slots but the pool has 3"):
        migrating_spec(workers=3, nodes=3)
    raw = make_raw("existing", "monolithic")
    raw["migration"] = {"monolithic_workers": 1}
    with pytest.raises(SpecError, match="migration.monolithic_workers: 1 runs the monolithic pool beside the split "
                                        "one: set deployment_mode split"):
        parse_spec(raw)
    raw = make_raw("existing", "split")
    raw.update(target="local", migration={"monolithic_workers": 1})
    raw.pop("gpu_node_pool")
    with pytest.raises(SpecError, match="the local stack runs its own with "
                                        "local.migration_monolithic_workers: set that instead"):
        parse_spec(raw)


def owners(spec: Spec) -> dict[tuple[str, str, str], str]:
    """(type, namespace, object name) -> the Pulumi resource name that owns the object."""
    out = {}
    for reg in capture(spec, ROOT).mocks.resources:
        meta = reg.inputs.get("metadata") if reg.type.startswith("kubernetes:") else None
        if isinstance(meta, dict) and meta.get("name"):
            out[(reg.type, str(meta.get("namespace", "")), str(meta["name"]))] = reg.name
    return out


@pytest.mark.parametrize("mode", ["split", "monolithic"])
def test_starting_or_ending_the_migration_moves_no_object_to_another_resource(mode):
    """One `pulumi up` from either mode to migrating (and back) never has an object that one
    Pulumi resource deletes while another creates it (AlreadyExists, or an upsert that the old
    resource's delete then removes): every object both renders hold keeps its resource."""
    raw = make_raw("existing", mode)
    raw["gpu_node_pool"]["node_count"] = 3
    before, after = owners(parse_spec(raw)), owners(migrating_spec())
    moved = {k: (before[k], after[k]) for k in before.keys() & after.keys() if before[k] != after[k]}
    assert moved == {}
    assert len(before.keys() & after.keys()) > 10  # the namespace, Redis, policies... are shared


@pulumi.runtime.test
def test_the_policy_pack_accepts_the_migrating_program(mocks, after_build):
    """The CrossGuard pack's own validators (`pulumi preview --policy-pack infra/policy`), with the
    custom timeouts the program gives both GPU Deployments (the server and the monolithic pool)."""
    from infra.components.inference_server import custom_timeouts
    from infra.components.program import build

    from .test_infra_policy_pack import run_resource_policies, run_stack_policies

    spec = migrating_spec()
    deployment = build(spec, ROOT)
    timeouts = custom_timeouts(spec.worker_server)

    def check():
        regs = mocks.resources
        assert {r.name for r in regs if r.type == "kubernetes:apps/v1:Deployment"} >= {
            "server-mineru-vlm", "workers", "workers-monolithic", "router"}
        assert run_resource_policies(regs, {"server-mineru-vlm": timeouts, "workers-monolithic": timeouts}) == []
        assert run_stack_policies(regs) == []

    return after_build(deployment, check)
