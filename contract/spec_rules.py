"""Cross-field rules of the deployment spec.

Each rule names the field path it blames and the fix, because the person reading the message
is editing ``Pulumi.<stack>.yaml`` and needs to know which line to change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from contract.capacity import check_server_fits
from contract.enums import DeploymentMode, Engine, Target
from contract.sizing import gpu_servers, migrating
from contract.slo_window import (
    BURN_WINDOW_MAX_H,
    MIN_RETENTION_H,
    MIN_RETENTION_WITH_STORE_H,
    RETENTION_MARGIN_H,
    SLO_WINDOW_MAX_D,
)

if TYPE_CHECKING:  # the spec model runs these rules in its validator: a type, not an import
    from contract.spec import Spec


class SpecRuleError(ValueError):
    """A cross-field rule failed; ``path`` is the dotted field path to change."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        super().__init__(f"{path}: {message}")


def check_cross_field(spec: Spec) -> None:
    for rule in (
        _unique_server_names,
        _worker_server_exists,
        _limits_cover_requests,
        _gpu_pool_present,
        _tensor_parallel_fits_node,
        _gpus_suffice,
        _shared_gpu_budget,
        _oversubscription,
        _worker_needs_vision,
        _in_process_backend,
        _migration,
        _local_ports_distinct,
        _model_fits_gpu,
        _retention_covers_slo_windows,
        _alerts_reach_a_person,
    ):
        rule(spec)


def _unique_server_names(spec: Spec) -> None:
    seen: set[str] = set()
    for i, server in enumerate(spec.inference_servers):
        if server.name in seen:
            raise SpecRuleError(
                f"inference_servers[{i}].name",
                f"{server.name!r} is used twice; give each server a unique name",
            )
        seen.add(server.name)


def _worker_server_exists(spec: Spec) -> None:
    name = spec.worker_pool.server
    if name is not None and name not in spec.server_names:
        raise SpecRuleError(
            "worker_pool.server",
            f"{name!r} is not an inference server; choose one of {spec.server_names}",
        )


def _limits_cover_requests(spec: Spec) -> None:
    w = spec.worker_pool
    if w.cpu_limit_millicores < w.cpu_millicores:
        raise SpecRuleError(
            "worker_pool.cpu_limit_millicores",
            f"{w.cpu_limit_millicores} is below the request cpu_millicores={w.cpu_millicores}; "
            "raise the limit or lower the request",
        )
    if w.memory_limit_mib < w.memory_mib:
        raise SpecRuleError(
            "worker_pool.memory_limit_mib",
            f"{w.memory_limit_mib} is below the request memory_mib={w.memory_mib}; "
            "raise the limit or lower the request",
        )
    if w.max_replicas is not None and w.max_replicas < w.replicas:
        raise SpecRuleError(
            "worker_pool.max_replicas",
            f"{w.max_replicas} is below replicas={w.replicas}; raise max_replicas or remove it",
        )


def _in_process_backend(spec: Spec) -> None:
    if spec.deployment_mode is not DeploymentMode.monolithic:
        return
    backend = spec.worker_pool.in_process.backend.value
    if spec.target is Target.kubernetes and backend == "private-server":
        raise SpecRuleError(
            "worker_pool.in_process.backend",
            "'private-server' is the local stack's twin (an engine process per worker); a "
            "cluster deploys no private servers: use 'vlm-vllm-engine' (one GPU per worker)")
    if spec.worker_pool.backend.value != "vlm-http-client":
        raise SpecRuleError(
            "worker_pool.backend",
            f"{spec.worker_pool.backend.value!r} has no in-process engine in MinerU; "
            "deployment_mode 'monolithic' runs MinerU's VLM pipeline: set worker_pool.backend "
            "to 'vlm-http-client' (its requests then go to the in-process engine)")


def _migration(spec: Spec) -> None:
    n = spec.migration.monolithic_workers
    if n == 0:
        return
    if spec.target is not Target.kubernetes:
        raise SpecRuleError(
            "migration.monolithic_workers",
            f"{n}: the cluster's monolithic pool while migrating; the local stack runs its own with "
            "local.migration_monolithic_workers: set that instead (and migration.monolithic_workers 0)")
    if spec.deployment_mode is not DeploymentMode.split:
        raise SpecRuleError(
            "migration.monolithic_workers",
            f"{n} runs the monolithic pool beside the split one: set deployment_mode split (the "
            "split pool and its server stay), or migration.monolithic_workers 0 to stop migrating")
    backend = spec.worker_pool.in_process.backend.value
    if backend == "private-server":
        raise SpecRuleError(
            "worker_pool.in_process.backend",
            "'private-server' is the local stack's twin; the cluster's monolithic pool runs the model "
            "in each worker: use 'vlm-vllm-engine' (one GPU per worker)")


def _needs_gpus(spec: Spec) -> bool:
    if spec.target is not Target.kubernetes:
        return False
    if spec.deployment_mode is DeploymentMode.monolithic or migrating(spec):
        return True
    return any(s.engine is Engine.vllm and s.replicas > 0 for s in spec.inference_servers)


def _gpu_pool_present(spec: Spec) -> None:
    if _needs_gpus(spec) and spec.gpu_node_pool is None:
        raise SpecRuleError(
            "gpu_node_pool",
            "missing: target 'kubernetes' with a vllm server needs GPU nodes; add "
            "splitstack:gpu_node_pool with cloud, instance_type, accelerator and gpu_memory_gib",
        )


def _tensor_parallel_fits_node(spec: Spec) -> None:
    pool = spec.gpu_node_pool
    if pool is None or not _needs_gpus(spec):
        return
    for i, server in enumerate(spec.inference_servers):
        if server.tensor_parallel_size > pool.gpus_per_node:
            raise SpecRuleError(
                f"inference_servers[{i}].tensor_parallel_size",
                f"{server.tensor_parallel_size} exceeds gpu_node_pool.gpus_per_node="
                f"{pool.gpus_per_node}: one replica must fit one node; lower "
                "tensor_parallel_size or pick an instance type with more GPUs",
            )


def gpu_slots_needed(spec: Spec) -> int:
    """GPU slots (whole GPUs, or slices when shared) the spec asks for."""
    if spec.deployment_mode is DeploymentMode.monolithic:
        return spec.worker_pool.max_replicas or spec.worker_pool.replicas
    return sum(
        s.replicas * s.tensor_parallel_size
        for s in spec.inference_servers
        if s.engine is Engine.vllm
    ) + (spec.migration.monolithic_workers if migrating(spec) else 0)


def _gpus_suffice(spec: Spec) -> None:
    pool = spec.gpu_node_pool
    if pool is None or not _needs_gpus(spec):
        return
    slots = pool.total_gpus * (pool.slices_per_gpu if pool.gpu_sharing != "none" else 1)
    needed = gpu_slots_needed(spec)
    if needed > slots:
        what = (
            "worker_pool.replicas (monolithic: one GPU per worker)"
            if spec.deployment_mode.value == "monolithic"
            else "sum of replicas x tensor_parallel_size over vllm servers"
            + (" plus migration.monolithic_workers (one GPU each)" if migrating(spec) else "")
        )
        raise SpecRuleError(
            "gpu_node_pool.node_count",
            f"{what} needs {needed} GPU slots but the pool has {slots} "
            f"({pool.node_count} nodes x {pool.gpus_per_node} GPUs"
            + (f" x {pool.slices_per_gpu} slices" if pool.gpu_sharing != "none" else "")
            + "); add nodes, enable gpu_sharing, or need fewer GPUs",
        )


# vLLM's gpu_memory_utilization is a fraction of the whole GPU, not of a slice: processes that
# share one GPU can never reserve more than all of it together (the Pulumi program keeps a
# further margin for each process's CUDA context: contract.sizing.check_gpu_sharing).
SHARED_GPU_BUDGET = 1.0


def shared_gpu_pods(spec: Spec) -> list[tuple[float, int, str]]:
    """(gpu_memory_utilization, server index, who) of every GPU pod the spec asks for.

    Servers count at their replicas, workers (monolithic: each loads the worker server's
    model) at max_replicas, as contract.sizing.check_gpu_sharing counts them.
    """
    if spec.deployment_mode is DeploymentMode.monolithic:
        i = spec.server_names.index(spec.worker_server.name)
        count = spec.worker_pool.max_replicas or spec.worker_pool.replicas
        return [(spec.worker_server.gpu_memory_utilization, i, "worker_pool (monolithic)")] * count
    pods = []
    for server in gpu_servers(spec):
        i = spec.server_names.index(server.name)
        pods += [(server.gpu_memory_utilization, i, f"inference_servers[{i}] {server.name!r}")
                 ] * server.replicas
    if migrating(spec):  # the monolithic pool beside the split one
        i = spec.server_names.index(spec.worker_server.name)
        pods += [(spec.worker_server.gpu_memory_utilization, i, "migration.monolithic_workers")
                 ] * spec.migration.monolithic_workers
    return pods


def _shared_gpu_budget(spec: Spec) -> None:
    """With GPU sharing, the pods that can land on one GPU must fit it together.

    The device plugin advertises slices_per_gpu interchangeable nvidia.com/gpu per GPU, so the
    scheduler may put ANY slices_per_gpu pods on one GPU: the worst case is the largest
    fractions together. Each model must also fit its own fraction (capacity calculator).
    """
    pool = spec.gpu_node_pool
    if pool is None or pool.gpu_sharing == "none" or pool.slices_per_gpu < 2 or not _needs_gpus(spec):
        return
    pods = shared_gpu_pods(spec)
    if len(pods) < 2:
        return
    worst = sorted(pods, key=lambda p: -p[0])[: pool.slices_per_gpu]
    total = sum(f for f, _, _ in worst)
    if total > SHARED_GPU_BUDGET + 1e-9:
        share = int(SHARED_GPU_BUDGET / len(worst) * 100) / 100
        raise SpecRuleError(
            f"inference_servers[{worst[0][1]}].gpu_memory_utilization",
            f"gpu_node_pool.gpu_sharing={pool.gpu_sharing!r} with slices_per_gpu="
            f"{pool.slices_per_gpu} lets Kubernetes put {len(worst)} of these pods on one "
            f"{pool.accelerator}: {', '.join(f'{who} {f:g}' for f, _, who in worst)} add up to "
            f"{total:.2f} of the GPU > {SHARED_GPU_BUDGET:g} (vLLM's gpu_memory_utilization is a "
            f"fraction of the whole GPU, not of a slice); lower gpu_memory_utilization so any "
            f"{len(worst)} add up to at most {SHARED_GPU_BUDGET:g} (e.g. {share:g} each), lower "
            "slices_per_gpu, or set gpu_sharing to 'none'",
        )
    for i in sorted({i for _, i, _ in pods}):
        server = spec.inference_servers[i]
        problem = check_server_fits(server, pool) if server.model.catalog_name else None
        if problem:
            raise SpecRuleError(
                f"inference_servers[{i}].gpu_memory_utilization",
                f"on a {pool.accelerator} shared {pool.slices_per_gpu} ways, {server.name!r} gets "
                f"gpu_memory_utilization {server.gpu_memory_utilization:g} of it and its model "
                f"must fit there: {problem}",
            )


def _oversubscription(spec: Spec) -> None:
    if spec.deployment_mode is not DeploymentMode.split:
        return
    w = spec.worker_pool
    server = spec.worker_server
    workers = w.max_replicas or w.replicas
    in_flight = workers * w.concurrency_per_worker
    slots = max(server.replicas, 1) * server.max_num_seqs
    if in_flight > slots * spec.max_oversubscription:
        raise SpecRuleError(
            "worker_pool.concurrency_per_worker",
            f"{workers} workers x {w.concurrency_per_worker} in-flight requests = {in_flight} "
            f"exceeds {spec.max_oversubscription:g} x the batch slots of server "
            f"{server.name!r} ({max(server.replicas, 1)} x max_num_seqs {server.max_num_seqs} = "
            f"{slots}); lower concurrency_per_worker to at most "
            f"{int(slots * spec.max_oversubscription // max(workers, 1))}, raise max_num_seqs, "
            "or raise max_oversubscription",
        )


def _worker_needs_vision(spec: Spec) -> None:
    server = spec.worker_server
    if spec.worker_pool.replicas == 0 or server.engine is Engine.sim or server.model.vision:
        return
    raise SpecRuleError(
        "worker_pool.server",
        f"the workers send page images, but server {server.name!r} serves the text-only model "
        f"{server.model.source!r}: vLLM answers 400; point the workers at a vision model "
        "(model.vision: true) or use engine 'sim', or set worker_pool.replicas to 0",
    )


def local_ports(spec: Spec) -> dict[str, int]:
    """Every loopback port the local stack binds, by component name."""
    ports = {"queue": spec.queue.port, "prometheus": spec.observability.prometheus_port,
             "alertmanager": spec.observability.alertmanager.port}
    for server in spec.inference_servers:
        ports[f"server:{server.name}"] = server.port
    for i in range(spec.worker_pool.replicas):
        ports[f"worker:{i}"] = spec.worker_pool.metrics_port + i
    if private_engines(spec):
        for i in range(spec.worker_pool.replicas):
            ports[f"engine:{i}"] = spec.local.private_engine_port + i
    return ports


def private_engines(spec: Spec) -> bool:
    """True when each worker calls an engine of its own over HTTP (monolithic mode's local twin)."""
    return (spec.deployment_mode is DeploymentMode.monolithic
            and spec.worker_pool.in_process.backend.value == "private-server")


def _local_ports_distinct(spec: Spec) -> None:
    if spec.target is not Target.local:
        return
    owner: dict[int, str] = {}
    for component, port in local_ports(spec).items():
        if port in owner:
            raise SpecRuleError(
                port_field(spec, component),
                f"port {port} is also used by {owner[port]}; give each local component its own "
                f"port (workers use worker_pool.metrics_port + 0..replicas-1, their private "
                f"engines local.private_engine_port + 0..replicas-1)",
            )
        owner[port] = component


def port_field(spec: Spec, component: str) -> str:
    if component == "queue":
        return "queue.port"
    if component == "prometheus":
        return "observability.prometheus_port"
    if component == "alertmanager":
        return "observability.alertmanager.port"
    if component.startswith("server:"):
        return f"inference_servers[{spec.server_names.index(component[7:])}].port"
    if component.startswith("engine:"):
        return "local.private_engine_port"
    return "worker_pool.metrics_port"


def _model_fits_gpu(spec: Spec) -> None:
    """Reject a server whose model cannot fit its GPUs (capacity calculator of runbooks/)."""
    pool = spec.gpu_node_pool
    if pool is None or not _needs_gpus(spec):
        return
    for i, server in enumerate(spec.inference_servers):
        if server.model.catalog_name is None:
            continue
        problem = check_server_fits(server, pool)
        if problem:
            raise SpecRuleError(f"inference_servers[{i}]", problem)


def _retention_covers_slo_windows(spec: Spec) -> None:
    """A 30-day SLO on 24 hours of data silently reports on one day: refuse it."""
    o = spec.observability
    need, why = MIN_RETENTION_H, (
        f"the alert rules and `slo report` read {SLO_WINDOW_MAX_D}-day SLO windows "
        f"({SLO_WINDOW_MAX_D} d + {RETENTION_MARGIN_H} h margin = {MIN_RETENTION_H} h)")
    if o.long_term_store_url:
        need, why = MIN_RETENTION_WITH_STORE_H, (
            f"with a long-term store the local Prometheus still evaluates the burn-rate alerts, whose "
            f"longest window is {BURN_WINDOW_MAX_H} h ({BURN_WINDOW_MAX_H} h + {RETENTION_MARGIN_H} h "
            f"margin = {MIN_RETENTION_WITH_STORE_H} h)")
    if o.retention_h < need:
        fix = f"set retention_h: {need} or more"
        if not o.long_term_store_url:
            fix += (f", or configure observability.long_term_store_url (then at least "
                    f"{MIN_RETENTION_WITH_STORE_H} h)")
        raise SpecRuleError("observability.retention_h",
                            f"{o.retention_h} h is shorter than the metrics history {why}; {fix}")


def _alerts_reach_a_person(spec: Spec) -> None:
    """A cluster stack whose Alertmanager this program installs must page someone, and must tell
    a dead man's switch that alerting works; the local stack may keep its alerts to itself."""
    o = spec.observability
    if spec.target is Target.local or not o.install_kube_prometheus_stack:
        return
    am = o.alertmanager
    for receiver, url_field in (("page", "page_webhook_url"), ("watchdog", "watchdog_webhook_url")):
        if getattr(am.receivers, receiver) or getattr(am, url_field) is not None:
            continue
        what = ("every page would be dropped" if receiver == "page" else
                "nothing would notice when Prometheus or Alertmanager stops working")
        raise SpecRuleError(
            f"observability.alertmanager.receivers.{receiver}",
            f"no integration: {what}. Add a webhook, slack, pagerduty or email integration "
            f"(credentials by SecretRef), e.g. {{kind: pagerduty, routing_key: {{name: ..., key: ..., env: ...}}}}",
        )
