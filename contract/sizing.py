"""Numbers the Kubernetes objects need that the spec derives rather than states.

Pure functions of the spec (no pulumi import) so that the Pulumi components, the Compose
renderer, the policy pack and the tests all compute them the same way. Each constant says where
it comes from; fields the spec may grow later are marked "derived until the spec has ...".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from contract.enums import DeploymentMode, Engine, Target

if TYPE_CHECKING:  # the spec model validates with these functions: types only
    from contract.spec import InferenceServer, Spec

# Startup estimate. A cold start downloads the weights from the Hugging Face Hub into the cache
# PVC, reads them into GPU memory, then vLLM profiles memory and captures CUDA graphs.
DOWNLOAD_MIB_PER_S = 50.0  # conservative sustained HF Hub download rate from a cloud VM
LOAD_S_PER_GIB = 2.0  # safetensors read from a network disk (PVC) at ~500 MiB/s
ENGINE_INIT_S = 120.0  # torch.compile + CUDA graph capture + memory profiling on first start
STARTUP_PERIOD_S = 10  # startup probe period: one /health try every 10 s

# Shutdown: the endpoint controller and kube-proxy need a few seconds to stop sending traffic
# to a terminating pod; the preStop sleep covers that before vLLM starts draining.
PRESTOP_SLEEP_S = 10
GRACE_MARGIN_S = 15  # after the drain: process exit, NCCL teardown

# Host resources of a server pod when the spec leaves inference_servers[].cpu_millicores and
# memory_mib unset.
SHM_GIB_PER_GPU = 2  # NCCL and the multiprocessing executor use /dev/shm; Docker's 64 MiB is not enough
# vLLM runs an API server, an engine core (a busy loop) and one worker per GPU, and asks for at
# least 2 + N physical cores, i.e. 2 x (2 + N) vCPUs where a vCPU is a hyperthread, as on every
# cloud VM: https://docs.vllm.ai/en/latest/configuration/optimization/#cpu-resources-for-gpu-deployments
SERVER_VCPU_PER_PROCESS = 2
SERVER_BASE_PROCESSES = 2
SIM_CPU_MILLICORES = 1000  # the simulator: one asyncio process
SIM_MEMORY_MIB = 2048
SERVER_MEMORY_FLOOR_GIB = 16
SERVER_MEMORY_PER_WEIGHT_GIB = 2.0  # weights pass through host memory while loading
MODEL_CACHE_HEADROOM = 1.5  # HF cache keeps blobs + snapshots metadata; leave room for a revision
MODEL_CACHE_EXTRA_GIB = 5

# Scaling (derived until the spec has worker_pool.scale_lag_per_replica and server max_replicas).
LAG_PER_JOB_SLOT = 2  # undelivered jobs per worker job slot that justify one more worker
SERVER_WAITING_FRACTION = 0.25  # waiting requests per replica, as a share of max_num_seqs

# Redis: jobs are small references to PDFs, not the PDFs themselves.
# The migration's router (worker/router.py): one Lua script per document, no payload work.
ROUTER_CPU_MILLICORES = 100
ROUTER_MEMORY_MIB = 128
ROUTER_CPU_LIMIT_MILLICORES = 500
ROUTER_MEMORY_LIMIT_MIB = 256
REDIS_CPU_MILLICORES = 100
REDIS_MEMORY_MIB = 1024
REDIS_DATA_GIB = 5
# maxmemory below the container limit: an AOF rewrite forks, and the child's copy-on-write pages
# count against the same cgroup (https://redis.io/docs/latest/operate/oss_and_stack/management/admin/
# "Redis can use up to 2 times the memory normally used" while rewriting), so keep a quarter free;
# with noeviction a full Redis refuses writes instead of being OOM-killed with the queue in it.
REDIS_MAXMEMORY_FRACTION = 0.75

# Images pinned by tag (the spec only pins the server and worker images).
REDIS_IMAGE = "redis:7.4.1-alpine"
WAIT_IMAGE = "busybox:1.36.1"
PROMETHEUS_IMAGE = "prom/prometheus:v2.53.2"
ALERTMANAGER_IMAGE = "prom/alertmanager:v0.25.0"  # the version of Debian's prometheus-alertmanager


def model_downloads(server: InferenceServer) -> bool:
    """A Hub repo id ('org/name') is downloaded at start; a path or 'tiny' is already on disk."""
    source = server.model.source
    return "/" in source and not source.startswith(("/", "./", "../"))


def estimated_start_s(server: InferenceServer) -> int:
    size = server.model.size_gib
    download = size * 1024 / DOWNLOAD_MIB_PER_S if model_downloads(server) else 0.0
    return math.ceil(download + size * LOAD_S_PER_GIB + ENGINE_INIT_S)


def check_startup_budget(server: InferenceServer, path: str) -> None:
    need = estimated_start_s(server)
    if server.startup_budget_s < need:
        raise ValueError(
            f"{path}.startup_budget_s: {server.startup_budget_s} s is below the estimated cold "
            f"start of {need} s for {server.model.size_gib:g} GiB of weights (download at "
            f"{DOWNLOAD_MIB_PER_S:g} MiB/s + load + {ENGINE_INIT_S:g} s engine init); the "
            f"startup probe would kill the pod mid-load: raise startup_budget_s to at least {need}"
        )


def startup_failure_threshold(server: InferenceServer) -> int:
    return math.ceil(server.startup_budget_s / STARTUP_PERIOD_S)


def grace_period_s(server: InferenceServer) -> int:
    return PRESTOP_SLEEP_S + server.shutdown_timeout_s + GRACE_MARGIN_S


def shm_gib(gpus: int) -> int:
    return SHM_GIB_PER_GPU * max(gpus, 1)


def server_memory_gib(server: InferenceServer) -> int:
    weights = math.ceil(server.model.size_gib * SERVER_MEMORY_PER_WEIGHT_GIB)
    return max(SERVER_MEMORY_FLOOR_GIB, weights) + shm_gib(server.tensor_parallel_size)


def server_cpu_millicores(server: InferenceServer) -> int:
    """CPU request of one replica: the spec's, else vLLM's 2 x (2 + N) vCPUs (1 for the sim)."""
    if server.cpu_millicores is not None:
        return server.cpu_millicores
    if server.engine is Engine.sim:
        return SIM_CPU_MILLICORES
    return 1000 * SERVER_VCPU_PER_PROCESS * (SERVER_BASE_PROCESSES + server.tensor_parallel_size)


def server_memory_mib(server: InferenceServer) -> int:
    """Memory request (= limit) of one replica, /dev/shm included."""
    if server.memory_mib is not None:
        return server.memory_mib
    if server.engine is Engine.sim:
        return SIM_MEMORY_MIB
    return server_memory_gib(server) * 1024


def redis_maxmemory_mib() -> int:
    return int(REDIS_MEMORY_MIB * REDIS_MAXMEMORY_FRACTION)


def model_cache_gib(server: InferenceServer) -> int:
    return math.ceil(server.model.size_gib * MODEL_CACHE_HEADROOM + MODEL_CACHE_EXTRA_GIB)


def gpu_slots(spec: Spec) -> int:
    pool = spec.gpu_node_pool
    if pool is None:
        return 0
    return pool.total_gpus * (pool.slices_per_gpu if pool.gpu_sharing != "none" else 1)


def gpu_servers(spec: Spec) -> list[InferenceServer]:
    """Servers that run as GPU Deployments (monolithic mode runs none: workers hold the model)."""
    if spec.deployment_mode is DeploymentMode.monolithic:
        return []
    return [s for s in spec.inference_servers if s.engine is Engine.vllm]


def gpu_slots_used(spec: Spec) -> int:
    if spec.deployment_mode is DeploymentMode.monolithic:
        return spec.worker_pool.max_replicas or spec.worker_pool.replicas
    return sum(s.replicas * s.tensor_parallel_size for s in gpu_servers(spec)) + (
        spec.migration.monolithic_workers if migrating(spec) else 0)  # the monolithic pool's GPUs


def server_max_replicas(spec: Spec, server: InferenceServer) -> int:
    """Replicas a server may scale to: it grows into GPUs of the pool nobody asked for.

    Free slots go to servers in spec order; a server with no free slots does not autoscale.
    """
    free = gpu_slots(spec) - gpu_slots_used(spec)
    for s in gpu_servers(spec):
        extra = max(free, 0) // s.tensor_parallel_size if s.replicas > 0 else 0
        if s.name == server.name:
            return s.replicas + extra
        free -= extra * s.tensor_parallel_size
    return server.replicas


def unclaimed_gpu_slots(spec: Spec) -> int:
    """Free GPU slots that no server's scaler grows into."""
    free = gpu_slots(spec) - gpu_slots_used(spec)
    for s in gpu_servers(spec):
        free -= (server_max_replicas(spec, s) - s.replicas) * s.tensor_parallel_size
    return max(free, 0)


@dataclass(frozen=True)
class Rollout:
    """Deployment strategy of a GPU workload."""

    type: str  # "Recreate" or "RollingUpdate"
    max_surge: int = 0
    max_unavailable: int = 1
    reason: str = ""


def server_rollout(spec: Spec, server: InferenceServer) -> Rollout:
    """Surge only when a spare replica's GPUs exist and the model cache can follow it.

    With every GPU slot taken, a surge pod stays Pending forever and the rollout deadlocks;
    a ReadWriteOnce cache (one replica) cannot attach on a second node either.
    """
    # Free GPUs a scaler may take (server_max_replicas) are no headroom: KEDA can fill them
    # while the surge pod waits, and the rollout stalls past its progress deadline.
    free = unclaimed_gpu_slots(spec)
    if free >= server.tensor_parallel_size and server.replicas > 1:
        return Rollout("RollingUpdate", 1, 0, "a spare replica's GPUs are free")
    if server.replicas <= 1:
        return Rollout("Recreate", 0, 1, "one replica: its GPUs and ReadWriteOnce cache are reused")
    return Rollout("RollingUpdate", 0, 1, "replicas x GPUs fill the pool: replace one at a time")


def cache_shared(spec: Spec, server: InferenceServer) -> bool:
    """More than one replica can run at once (spec replicas, or a scaler into free GPUs): their
    nodes can share one cache only through a ReadWriteMany class."""
    return server_max_replicas(spec, server) > 1


def worker_cache_shared(spec: Spec) -> bool:
    """Monolithic: more than one worker (its ceiling) mounts the one model cache, which then
    needs a ReadWriteMany class; one worker keeps a ReadWriteOnce disk."""
    w = spec.worker_pool
    return max(w.max_replicas or 0, w.replicas) > 1


def cache_access_mode(spec: Spec, server: InferenceServer) -> str:
    return "ReadWriteMany" if cache_shared(spec, server) else "ReadWriteOnce"


def server_progress_deadline_s(server: InferenceServer) -> int:
    """Deployment progressDeadlineSeconds: the default 600 s reports ProgressDeadlineExceeded
    (and pulumi-kubernetes fails the update) while a 15-30 min cold start is still loading."""
    return server.startup_budget_s + CUSTOM_TIMEOUT_MARGIN_S


# Pulumi's wait for a Deployment (customTimeouts) and the Deployment's own progress deadline
# cover the startup budget plus this: image pull and scheduling on a fresh node come on top.
CUSTOM_TIMEOUT_MARGIN_S = 300


def worker_lag_threshold(spec: Spec) -> int:
    return spec.worker_pool.jobs_per_worker * LAG_PER_JOB_SLOT


def server_waiting_threshold(server: InferenceServer) -> int:
    return max(1, math.ceil(server.max_num_seqs * SERVER_WAITING_FRACTION))


# Several vLLM processes on one GPU each reserve gpu_memory_utilization x the GPU's memory and
# each also holds a CUDA context (~0.5 GiB) outside it: keep the sum under this share.
SHARED_GPU_MAX_UTILIZATION = 0.95


def migrating(spec: Spec) -> bool:
    """The cluster runs both pools and the router (migration.monolithic_workers > 0, target
    kubernetes; the local stack migrates with local.migration_monolithic_workers)."""
    return spec.target is Target.kubernetes and spec.migration.monolithic_workers > 0


def check_gpu_sharing(spec: Spec) -> None:
    """With GPU sharing, the pods that can land on one GPU must fit its memory together.

    Each replica's own fit (weights + KV cache within its fraction) is the capacity
    calculator's job (spec rule _model_fits_gpu); this checks the fractions add up.
    """
    pool = spec.gpu_node_pool
    if pool is None or pool.gpu_sharing == "none":
        return
    if spec.deployment_mode is DeploymentMode.monolithic:
        server = spec.worker_server
        fractions = [(server.gpu_memory_utilization, "worker_pool (monolithic)")] * (
            spec.worker_pool.max_replicas or spec.worker_pool.replicas)
    else:
        fractions = [(s.gpu_memory_utilization, f"inference_servers[{i}] {s.name!r}")
                     for i, s in enumerate(spec.inference_servers)
                     if s.engine is Engine.vllm for _ in range(s.replicas)]
        if migrating(spec):  # the monolithic pool beside the split one
            fractions += [(spec.worker_server.gpu_memory_utilization, "migration.monolithic_workers")
                          ] * spec.migration.monolithic_workers
    worst = sorted(fractions, reverse=True)[: pool.slices_per_gpu]
    total = sum(f for f, _ in worst)
    if total > SHARED_GPU_MAX_UTILIZATION:
        who = ", ".join(f"{name} {f:g}" for f, name in worst)
        raise ValueError(
            f"gpu_node_pool.slices_per_gpu: {pool.slices_per_gpu} pods may share one "
            f"{pool.accelerator} and their gpu_memory_utilization adds up to {total:.2f} "
            f"({who}) > {SHARED_GPU_MAX_UTILIZATION}: vLLM would fail to allocate; lower "
            "gpu_memory_utilization so the sum fits, or lower slices_per_gpu"
        )


# Prometheus' volume. Prometheus' storage guide states the rough formula needed_disk_space =
# retention_time_seconds x ingested_samples_per_second x bytes_per_sample, with 1-2 bytes per
# sample after compression (https://prometheus.io/docs/prometheus/latest/storage/#operational-aspects).
# Samples per second = series / scrape interval. On top of the blocks: the write-ahead log keeps
# at least two hours of raw samples (about 13 bytes each uncompressed: a series-id and timestamp
# varint and an 8-byte value), and compaction writes a new block before deleting the ones it
# merges (a block spans at most 10% of the retention), so 10% more.
PROMETHEUS_BYTES_PER_SAMPLE = 2.0  # the pessimistic end of the guide's 1-2 bytes
PROMETHEUS_WAL_HOURS = 3  # two hours of raw data, plus the segment being written
PROMETHEUS_WAL_BYTES_PER_SAMPLE = 14.0
PROMETHEUS_COMPACTION_HEADROOM = 1.1
# --storage.tsdb.retention.size below the volume, so Prometheus drops its oldest block before
# the disk fills (the size limit counts the blocks, the WAL and the head chunks).
PROMETHEUS_RETENTION_SIZE_FRACTION = 0.9
GIB = 1024**3


@dataclass(frozen=True)
class PrometheusStorage:
    samples_per_s: float
    blocks_bytes: float
    wal_bytes: float
    size_gib: int  # the PVC request
    retention_size_gb: int  # prometheusSpec.retentionSize, Prometheus' GB (powers of 2)

    def formula(self, spec: Spec) -> str:
        o = spec.observability
        return (f"{o.retention_h} h x {o.series:,} series / {o.scrape_interval_s} s x "
                f"{PROMETHEUS_BYTES_PER_SAMPLE:g} B x {PROMETHEUS_COMPACTION_HEADROOM:g} "
                f"+ WAL {PROMETHEUS_WAL_HOURS} h x {PROMETHEUS_WAL_BYTES_PER_SAMPLE:g} B = "
                f"{(self.blocks_bytes * PROMETHEUS_COMPACTION_HEADROOM + self.wal_bytes) / GIB:.1f} GiB")


def prometheus_storage(spec: Spec, min_gib: int = 1) -> PrometheusStorage:
    """The volume of the Prometheus the program installs, from observability.retention_h,
    scrape_interval_s and series; at least ``min_gib`` (the storage class's smallest)."""
    o = spec.observability
    rate = o.series / o.scrape_interval_s
    blocks = o.retention_h * 3600 * rate * PROMETHEUS_BYTES_PER_SAMPLE
    wal = PROMETHEUS_WAL_HOURS * 3600 * rate * PROMETHEUS_WAL_BYTES_PER_SAMPLE
    size = max(math.ceil((blocks * PROMETHEUS_COMPACTION_HEADROOM + wal) / GIB), min_gib)
    return PrometheusStorage(rate, blocks, wal, size,
                             max(int(size * PROMETHEUS_RETENTION_SIZE_FRACTION), 1))
