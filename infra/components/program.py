"""The whole Kubernetes deployment of a spec: what ``pulumi up`` creates.

``build`` is called by ``infra/__main__.py`` under the real engine and by ``infra.render`` and
the tests under mocks: one code path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s

from contract import image_refs, naming, sizing
from contract.cluster_fit import require_cluster_fit, storage_class
from contract.migration import MONOLITHIC, MONOLITHIC_POOL_DEPLOYMENT, SPLIT
from contract.outputs import store_root
from contract.spec import DeploymentMode, Spec, Target
from infra.artifacts import load_dashboards, load_rule_files
from infra.components.base import custom_resources_wait_for
from infra.components.gpu_node_pool import GpuNodePoolArgs, GpuNodePoolComponent
from infra.components.inference_server import (
    InferenceServerArgs,
    InferenceServerComponent,
    storage_min_gib,
)
from infra.components.migration import RouterArgs, RouterComponent, monolithic_pool_spec
from infra.components.network_policies import NetworkPoliciesArgs, NetworkPoliciesComponent
from infra.components.observability import ObservabilityArgs, ObservabilityComponent
from infra.components.output_store import OutputStoreArgs, OutputStoreComponent
from infra.components.platform_addons import PlatformAddonsArgs, PlatformAddonsComponent
from infra.components.queue import QueueArgs, QueueComponent
from infra.components.secrets import (
    SecretsArgs,
    SecretsComponent,
    output_store_refs,
    queue_ref,
    read_secret_values,
    server_refs,
    wait_for,
    worker_refs,
)
from infra.components.storage_classes import StorageClassesArgs, StorageClassesComponent
from infra.components.worker_pool import Autoscaler, WorkerPoolArgs, WorkerPoolComponent, spec_document

BENCH_SCENARIO = "chat-images"  # bench/scenarios: vision chat, what the workers send
BENCH_GATE = "phase1-server"  # bench/gates: the server alone, before workers


@dataclass
class Deployment:
    spec: Spec
    servers: list[InferenceServerComponent] = field(default_factory=list)
    workers: WorkerPoolComponent | None = None
    # While migrating (migration.monolithic_workers): the monolithic pool and the router.
    monolithic_workers: WorkerPoolComponent | None = None
    router: RouterComponent | None = None
    secrets: SecretsComponent | None = None
    outputs: dict[str, object] = field(default_factory=dict)
    roots: list[pulumi.Resource] = field(default_factory=list)

    def resources(self) -> list[pulumi.Resource]:
        """Every resource reachable from the components' attributes (tests wait on their URNs)."""
        seen: dict[int, pulumi.Resource] = {}

        def walk(value: object) -> None:
            if isinstance(value, pulumi.Resource):
                if id(value) in seen:
                    return
                seen[id(value)] = value
                for attr in vars(value).values():
                    walk(attr)
            elif isinstance(value, (list, tuple)):
                for item in value:
                    walk(item)

        walk(self.roots)
        return list(seen.values())


def check(spec: Spec) -> None:
    if spec.target is not Target.kubernetes:
        raise ValueError(
            f"target: {spec.target.value!r}; the Pulumi program deploys target 'kubernetes' "
            f"(stack {spec.stack!r} is run with `splitstack up --stack {spec.stack}`)")
    sizing.check_gpu_sharing(spec)
    # Before anything is created: would it schedule, bind, find its CRDs, fit the version?
    require_cluster_fit(spec)


def build(spec: Spec, root: Path) -> Deployment:
    """Create every resource of ``spec``; ``root`` holds alerts/ and dashboards/."""
    check(spec)
    out = Deployment(spec)
    pool = GpuNodePoolComponent("gpu-pool", GpuNodePoolArgs(spec))
    k8s_opts = pulumi.ResourceOptions()
    if pool.kubeconfig is not None:
        provider = k8s.Provider("cluster", kubeconfig=pool.kubeconfig,
                                opts=pulumi.ResourceOptions(parent=pool))
        k8s_opts = pulumi.ResourceOptions(providers=[provider])
    addons = PlatformAddonsComponent("addons", PlatformAddonsArgs(spec), opts=k8s_opts)
    namespace = k8s.core.v1.Namespace(
        "namespace",
        metadata={"name": spec.namespace, "labels": naming.namespace_labels(spec)},
        opts=k8s_opts)
    cloud = spec.gpu_node_pool.cloud.value if spec.gpu_node_pool else "existing"
    storage = StorageClassesComponent(
        "storage", StorageClassesArgs(spec, pool.shared_file_system_id),
        opts=pulumi.ResourceOptions.merge(k8s_opts, pulumi.ResourceOptions(
            depends_on=pool.storage_ready)))
    opts = pulumi.ResourceOptions.merge(
        k8s_opts, pulumi.ResourceOptions(depends_on=[namespace, addons]))
    # Claims wait for their StorageClass and its CSI driver.
    storage_opts = pulumi.ResourceOptions.merge(
        opts, pulumi.ResourceOptions(depends_on=[storage, *pool.storage_ready]))
    dashboards = (load_dashboards(root / "dashboards")
                  if spec.observability.grafana_dashboards else [])
    # kube-prometheus-stack's Prometheus and Alertmanager claim volumes of the block class.
    observability = ObservabilityComponent("observability", ObservabilityArgs(
        spec, load_rule_files(root / "alerts"), dashboards), opts=storage_opts)
    policies = NetworkPoliciesComponent("network-policies", NetworkPoliciesArgs(spec), opts=opts)
    shared_fact = storage_class(spec, "shared").fact
    store = OutputStoreComponent("outputs", OutputStoreArgs(
        spec, storage.shared, storage_min_gib(cloud, storage.shared),
        expandable=shared_fact.expandable if shared_fact else True), opts=storage_opts)
    # Secrets whose values the stack holds (splitstack-secrets:, encrypted); the others must exist.
    values = read_secret_values(spec)
    secrets = SecretsComponent("secrets", SecretsArgs(spec, values), opts=opts) if values else None

    def secret_opts(refs: list, base: pulumi.ResourceOptions) -> pulumi.ResourceOptions:
        if secrets is None or not secrets.needed_by(refs):
            return base
        return pulumi.ResourceOptions.merge(base, pulumi.ResourceOptions(
            transformations=[wait_for(secrets.needed_by(refs))]))

    queue_refs = [r for r in [queue_ref(spec)] if r is not None]
    queue = QueueComponent("queue", QueueArgs(spec, storage.block),
                           opts=secret_opts(queue_refs, storage_opts))
    # ServiceMonitors need the operator's CRDs (kube-prometheus-stack's component installs them
    # when the program does), ScaledObjects KEDA's (the add-ons): each waits for its own.
    workload_opts = pulumi.ResourceOptions.merge(
        storage_opts, pulumi.ResourceOptions(depends_on=[observability], transformations=[
            custom_resources_wait_for({"monitoring.coreos.com": [observability],
                                       "keda.sh": [addons]})]))
    if spec.deployment_mode is DeploymentMode.split:
        for i, server in enumerate(spec.inference_servers):
            kind = "shared" if sizing.cache_shared(spec, server) else "block"
            cache_class = storage_class(spec, kind).name or ""
            out.servers.append(InferenceServerComponent(
                f"server-{server.name}",
                InferenceServerArgs(spec, server, f"inference_servers[{i}]", cache_class,
                                    storage_min_gib(cloud, cache_class)),
                opts=secret_opts(server_refs(server), workload_opts)))
    migrating = sizing.migrating(spec)
    worker_cache = storage.shared if sizing.worker_cache_shared(spec) else storage.block
    out.workers = WorkerPoolComponent(
        "workers", worker_pool_args(spec, output_claim=store.claim_name, cache_class=worker_cache,
                                    cache_min_gib=storage_min_gib(cloud, worker_cache),
                                    cohort=SPLIT if migrating else None),
        opts=secret_opts(worker_refs(spec), workload_opts))
    if migrating:
        # Both topologies at once: the monolithic pool as deployment_mode monolithic renders it,
        # and the router that feeds both cohorts by the split share (infra/components/migration.py).
        mono = monolithic_pool_spec(spec)
        mono_cache = storage.shared if sizing.worker_cache_shared(mono) else storage.block
        out.monolithic_workers = WorkerPoolComponent(
            "workers-monolithic", worker_pool_args(mono, output_claim=store.claim_name, cache_class=mono_cache,
                                                   cache_min_gib=storage_min_gib(cloud, mono_cache),
                                                   cohort=MONOLITHIC, object_name=MONOLITHIC_POOL_DEPLOYMENT),
            opts=secret_opts(worker_refs(mono), workload_opts))
        out.router = RouterComponent("router", RouterArgs(spec), opts=secret_opts(queue_refs, storage_opts))
    out.secrets = secrets
    out.outputs = stack_outputs(spec, observability.prometheus_url,
                                managed={name for name, _ in values})
    out.roots = [pool, addons, namespace, storage, observability, policies, queue, store,
                 *([secrets] if secrets else []), *out.servers, out.workers,
                 *([out.monolithic_workers, out.router] if out.monolithic_workers and out.router else [])]
    return out


def worker_pool_args(spec: Spec, *, output_claim: str | None = None, autoscaler: Autoscaler = Autoscaler.keda,
                     cache_class: str | None = None, cache_min_gib: int = 1, cohort: str | None = None,
                     object_name: str | None = None) -> WorkerPoolArgs:
    """What the worker pool renders, taken from ``spec``: its settings, the server its workers
    call, the queue, the image, and the spec document the workers read. ``cache_min_gib``: the
    smallest volume ``cache_class`` provisions (monolithic workers' model cache)."""
    server = spec.worker_server
    mono = spec.deployment_mode is DeploymentMode.monolithic
    return WorkerPoolArgs(
        pool=spec.worker_pool, server=server, server_url=naming.server_url(spec, server),
        queue=spec.queue, redis_address=naming.redis_address(spec),
        lag_threshold=sizing.worker_lag_threshold(spec), namespace=spec.namespace, stack=spec.stack,
        monolithic=mono, image=image_refs.pull_ref(spec, image_refs.worker_source(spec)),
        wait_image=None if mono else image_refs.pull_ref(spec, sizing.WAIT_IMAGE),  # only split workers wait
        pull_secrets=image_refs.pull_secrets(spec),
        env=naming.worker_env(spec, mono), spec_document=spec_document(spec),
        gpu_tolerations=naming.gpu_tolerations(spec), gpu_node_selector=naming.gpu_node_selector(spec),
        cache_shared=sizing.worker_cache_shared(spec),
        cache_gib=max(sizing.model_cache_gib(server), cache_min_gib),
        monitor_labels=naming.monitor_labels(spec), scrape_interval_s=spec.observability.scrape_interval_s,
        output_claim=output_claim, autoscaler=autoscaler, cache_class=cache_class, cohort=cohort,
        object_name=object_name)


def stack_outputs(spec: Spec, prometheus_url: pulumi.Output[str],
                  managed: set[str] | None = None) -> dict[str, object]:
    ns = spec.namespace
    server = spec.worker_server
    mono = spec.deployment_mode is DeploymentMode.monolithic
    servers = {} if mono else {s.name: naming.server_url(spec, s) for s in spec.inference_servers}
    prom_service = prometheus_service(spec)
    forward = {
        s.name: f"kubectl -n {ns} port-forward svc/{s.name} {s.port}:{s.port}"
        for s in ([] if mono else spec.inference_servers)
    }
    forward["prometheus"] = (f"kubectl -n {naming.prometheus_namespace(spec)} port-forward "
                             f"svc/{prom_service} 9090:9090")
    migrating = sizing.migrating(spec) and spec.queue.kind == "in-cluster"
    if migrating:  # `runbook migrate` moves the split share in this Redis (docs/migration.md)
        forward["redis"] = f"kubectl -n {ns} port-forward svc/{naming.REDIS_NAME} {spec.queue.port}:{spec.queue.port}"
    key_env = server.api_key.env if server.api_key else None
    target = (f"--url http://127.0.0.1:{server.port} --model {server.model.name}"
              + (f" --api-key-env {key_env}" if key_env else ""))
    pool = spec.gpu_node_pool
    return {
        "namespace": ns,
        "deployment_mode": spec.deployment_mode.value,
        "server_url": None if mono else naming.server_url(spec, server),
        "server_urls": servers,
        "served_model": server.model.name,
        "output_store": store_root(spec),
        "prometheus_url": prometheus_url,
        "port_forward": forward,
        "commands": {
            # After the port-forwards above: the bench and runbooks against this deployment.
            "bench": f"bench run {BENCH_SCENARIO} {target} --max-model-len {server.max_model_len}",
            "bench_gate": f"bench gate --gate {BENCH_GATE} {target}",
            "runbook_capacity_fit": (
                f"runbook capacity-plan fit --model {server.model.catalog_name or server.model.source}"
                f" --gpu {pool.accelerator if pool else ''}"
                f" --gpu-memory-utilization {server.gpu_memory_utilization:g}"
                f" --max-model-len {server.max_model_len}"
                f" --tensor-parallel-size {server.tensor_parallel_size}"),
            # Secrets without a splitstack-secrets: value: create them out of band, from the env.
            "create_secrets": secret_commands(spec, managed),
            **({"runbook_migrate": (f"runbook migrate --to 10 --stack {spec.stack} --redis-url "
                                    f"redis://127.0.0.1:{spec.queue.port}")} if migrating else {}),
            "logs_server": f"kubectl -n {ns} logs deploy/{server.name} -f",
            "logs_workers": (f"kubectl -n {ns} logs deploy/"
                             f"{naming.MONOLITHIC_NAME if mono else naming.WORKER_NAME} -f"),
        },
    }


def secret_commands(spec: Spec, managed: set[str] | None = None) -> list[str]:
    """`kubectl create secret` for each Secret the program does not create (``managed``)."""
    refs: dict[tuple[str, str], str] = {}
    for s in spec.inference_servers:
        for ref in (s.api_key, s.hf_token):
            if ref is not None:
                refs.setdefault((ref.name, ref.key), ref.env)
    if spec.queue.kind == "external":
        # One Secret, three keys: the workers read the URL, KEDA's scaler the address and password.
        for r in (naming.EXTERNAL_REDIS_SECRET, naming.EXTERNAL_REDIS_ADDRESS,
                  naming.EXTERNAL_REDIS_PASSWORD):
            refs[(r.name, r.key)] = r.env
    elif spec.queue.password is not None:
        refs[(spec.queue.password.name, spec.queue.password.key)] = spec.queue.password.env
    for ref in output_store_refs(spec):
        refs.setdefault((ref.name, ref.key), ref.env)
    by_name: dict[str, list[str]] = {}
    for (name, key), env in sorted(refs.items()):
        by_name.setdefault(name, []).append(f'--from-literal={key}="${env}"')
    return [f"kubectl -n {spec.namespace} create secret generic {name} {' '.join(args)}"
            for name, args in by_name.items() if name not in (managed or set())]


def prometheus_service(spec: Spec) -> str:
    return naming.prometheus_url(spec).split("//")[1].split(".")[0]
