"""WorkerPool: the MinerU workers. CPU-only in split mode; one GPU each in monolithic mode.

Split: no GPU request, waits for the server before it turns ready, scales on the Redis stream's
lag with KEDA (the ScaledObject falls back to a fixed replica count if its scaler fails).
Monolithic (rollback): each worker gets a GPU and loads the model in-process, as before the split.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import pulumi
import pulumi_kubernetes as k8s

from contract import naming, sizing
from contract.migration import ENV_COHORT_STREAMS, TOPOLOGY_LABEL, cohort_stream
from contract.spec import InferenceServer, Queue, Spec, WorkerPool
from infra.components.base import PATCH_FORCE, child, metadata, quantity_gib, replicas_ignored
from infra.components.inference_server import custom_timeouts
from infra.policy.rules import SPEC_PATH_ANNOTATION, STARTUP_BUDGET_ANNOTATION

FALLBACK_FAILURES = 3  # failed scaler polls before KEDA holds the fallback replica count


class Autoscaler(str, Enum):
    keda = "keda"  # queue lag on the Redis stream (needs the KEDA operator)
    hpa = "hpa"  # CPU utilisation (no KEDA in the cluster)
    none = "none"


@dataclass(frozen=True)
class WorkerPoolArgs:
    """What the pool renders, from the spec (program.py's ``worker_pool_args`` builds it): the
    pool's own settings, the server its workers call, the queue they read, the image and the
    spec document they run with."""

    pool: WorkerPool  # replicas, resources, port, request timeout
    server: InferenceServer  # the server the workers call: its start-up budget paces theirs
    server_url: str
    queue: Queue
    redis_address: str  # the in-cluster Redis, for KEDA's scaler
    lag_threshold: int  # stream lag per worker KEDA scales on
    namespace: str
    stack: str  # the worker process reads its spec by stack name
    monolithic: bool  # each worker runs the model itself, on a GPU of its own
    image: str  # the worker image's pull reference
    wait_image: str | None  # the init container's (it waits for the server); None: monolithic, no server to wait for
    pull_secrets: list[dict]
    env: list[dict]  # the worker's environment (contract/naming.py worker_env)
    spec_document: str  # the resolved spec the workers read (SecretRefs only)
    gpu_tolerations: list[dict]  # monolithic: where the GPU nodes are
    gpu_node_selector: dict[str, str]
    cache_shared: bool  # monolithic: more than one worker mounts the model cache (ReadWriteMany)
    cache_gib: int  # monolithic: the model cache's size, at least what cache_class provisions
    monitor_labels: dict[str, str]  # what the Prometheus selects ServiceMonitors by
    scrape_interval_s: int
    output_claim: str | None = None  # PVC of the output store (kind=directory)
    autoscaler: Autoscaler = Autoscaler.keda  # derived until the spec has worker_pool.autoscaler
    cache_class: str | None = None  # monolithic: StorageClass of the workers' model cache
    # While migrating (migration.monolithic_workers): the cohort this pool is, "split" or
    # "monolithic"; its workers read that cohort's stream and its series carry the topology.
    cohort: str | None = None
    # The objects' name (default: worker, or worker-gpu in monolithic mode). The migration's
    # monolithic pool has its own (contract/migration.py), so no name is claimed by two Pulumi
    # resources when a cluster goes from deployment_mode monolithic to migrating or back.
    object_name: str | None = None


def validate(args: WorkerPoolArgs) -> None:
    w = args.pool
    if args.autoscaler is not Autoscaler.none and (w.max_replicas or w.replicas) > w.replicas:
        if w.replicas == 0 and args.autoscaler is Autoscaler.hpa:
            raise ValueError(
                "worker_pool.replicas: 0 with an HPA: an HPA cannot scale from zero; set "
                "replicas to at least 1 or scale on queue lag with KEDA"
            )


TOPOLOGY_POD_LABEL = "splitstack.dev/topology"  # the cohort of a pool's pods while migrating


def container(args: WorkerPoolArgs) -> dict:
    w = args.pool
    mono = args.monolithic
    resources: dict = {
        "requests": {"cpu": f"{w.cpu_millicores}m", "memory": f"{w.memory_mib}Mi"},
        "limits": {"cpu": f"{w.cpu_limit_millicores}m", "memory": f"{w.memory_limit_mib}Mi"},
    }
    if mono:
        resources["requests"][naming.GPU_RESOURCE] = "1"
        resources["limits"][naming.GPU_RESOURCE] = "1"
    mounts = [{"name": "outputs", "mount_path": naming.OUTPUTS_MOUNT},
              {"name": "spec", "mount_path": naming.WORKER_SPEC_MOUNT, "read_only": True}]
    if mono:
        mounts += [{"name": "dshm", "mount_path": "/dev/shm"},
                   {"name": "model-cache", "mount_path": naming.MODEL_CACHE_MOUNT}]
    http = {"port": naming.METRICS_PORT_NAME}
    probes: dict = {}
    if mono:  # the model loads in-process: the same startup budget as the server's
        probes["startup_probe"] = {
            "http_get": {**http, "path": "/healthz"}, "period_seconds": sizing.STARTUP_PERIOD_S,
            "timeout_seconds": 5,
            "failure_threshold": sizing.startup_failure_threshold(args.server)}
    return {
        **probes,
        "name": "worker",
        # Monolithic: the image with vLLM's engine (the CPU-only worker image would exit at once,
        # worker/inprocess.py's preflight).
        "image": args.image,
        "command": ["python", "-m", "splitstack.cli.worker_process", "--stack", args.stack],
        # While migrating the worker reads its cohort's stream (worker/config.py).
        "env": args.env + ([{"name": ENV_COHORT_STREAMS, "value": "1"}] if args.cohort else []),
        "ports": [{"name": naming.METRICS_PORT_NAME, "container_port": w.metrics_port}],
        "resources": resources,
        "volume_mounts": mounts,
        # /readyz is 200 only while the inference server lists the model and Redis answers
        # (worker/health.py): readiness stays gated on the server after start-up too.
        "readiness_probe": {"http_get": {**http, "path": "/readyz"}, "period_seconds": 5,
                            "failure_threshold": 3},
        "liveness_probe": {"http_get": {**http, "path": "/healthz"}, "period_seconds": 15,
                           "timeout_seconds": 5, "failure_threshold": 4},
        "security_context": naming.container_security_context(),
    }


def wait_for_server(args: WorkerPoolArgs) -> dict:
    """Init container: the worker starts only once the server answers /health."""
    url = f"{args.server_url}/health"
    return {
        "name": "wait-for-server",
        "image": args.wait_image,
        "command": ["sh", "-c", f"until wget -q -O /dev/null {url}; do sleep 5; done"],
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"},
                      "limits": {"cpu": "100m", "memory": "32Mi"}},
        "security_context": {**naming.container_security_context(read_only_root=True),
                             "run_as_user": naming.NOBODY_UID, "run_as_group": naming.NOBODY_UID},
    }


def cache_claim_name(args: WorkerPoolArgs, prefix: str = naming.MONOLITHIC_NAME) -> str:
    """Monolithic workers' model and compile cache: a claim that outlives the pods (a restart or
    a reschedule finds the weights and the compiled graphs). As for the server's cache, the
    access mode and the size are in the name: a new worker ceiling or model makes a new claim."""
    mode = "rwx" if args.cache_shared else "rwo"
    return f"{prefix}-model-cache-{mode}-{args.cache_gib}gi"


def pod_spec(args: WorkerPoolArgs, cache_claim: str | None, config_map: str) -> dict:
    outputs = ({"persistent_volume_claim": {"claim_name": args.output_claim}} if args.output_claim
               else {"empty_dir": {}})
    pod: dict = {
        "enable_service_links": False,
        "automount_service_account_token": False,
        "security_context": naming.pod_security_context(),
        "termination_grace_period_seconds": int(args.pool.request_timeout_s) + 30,
        **({"image_pull_secrets": args.pull_secrets} if args.pull_secrets else {}),
        "containers": [container(args)],
        "volumes": [{"name": "outputs", **outputs},
                    {"name": "spec", "config_map": {"name": config_map}}],
    }
    if args.monolithic:
        pod["tolerations"] = args.gpu_tolerations
        pod["node_selector"] = args.gpu_node_selector
        pod["volumes"] += [
            {"name": "dshm", "empty_dir": {"medium": "Memory",
                                           "size_limit": quantity_gib(sizing.shm_gib(1))}},
            {"name": "model-cache", "persistent_volume_claim": {"claim_name": cache_claim}},
        ]
    else:
        pod["init_containers"] = [wait_for_server(args)]
    return pod


def keda_spec(args: WorkerPoolArgs, name: str, auth: str | None) -> dict:
    w = args.pool
    q = args.queue
    # While migrating a pool's backlog is its cohort's stream (the router empties the jobs stream).
    stream = cohort_stream(q.stream, args.cohort) if args.cohort else q.stream
    meta = {"stream": stream, "consumerGroup": q.group,
            "lagCount": str(args.lag_threshold), "activationLagCount": "0"}
    trigger: dict = {"type": "redis-streams", "metadata": meta}
    if auth:
        trigger["authenticationRef"] = {"name": auth}
    if q.kind != "external":
        meta["address"] = args.redis_address
    return {
        "scaleTargetRef": {"name": name},
        "minReplicaCount": w.replicas,
        "maxReplicaCount": w.max_replicas or w.replicas,
        "fallback": {"failureThreshold": FALLBACK_FAILURES, "replicas": max(w.replicas, 1)},
        "triggers": [trigger],
    }


def spec_document(spec: Spec) -> str:
    """What the worker-spec ConfigMap holds: the resolved spec (SecretRefs only)."""
    return spec.model_dump_json(indent=2)


def monitor_endpoint(args: WorkerPoolArgs) -> dict:
    """The ServiceMonitor endpoint; while migrating every series of the pool gets the label
    ``topology`` (the local stack's scrape config sets the same label, stack/prometheus_config.py),
    which the cohort recording rules group by."""
    endpoint: dict = {"port": naming.METRICS_PORT_NAME, "path": "/metrics",
                      "interval": f"{args.scrape_interval_s}s"}
    if args.cohort:
        endpoint["relabelings"] = [{"action": "replace", "targetLabel": TOPOLOGY_LABEL,
                                    "replacement": args.cohort}]
    return endpoint


def template_annotations(args: WorkerPoolArgs) -> dict:
    # The worker reads its spec once, at start: a digest of it in the pod template makes any
    # change of the ConfigMap (concurrency, retries, timeouts...) roll the workers.
    out = {SPEC_PATH_ANNOTATION: "worker_pool",
           naming.WORKER_SPEC_DIGEST_ANNOTATION: naming.spec_digest(args.spec_document)}
    if args.monolithic:
        out[STARTUP_BUDGET_ANNOTATION] = str(args.server.startup_budget_s)
    return {"annotations": out}


def progress_deadline_s(args: WorkerPoolArgs) -> int:
    """Split workers stay unready until the server answers (init container, /readyz), so the
    first rollout lasts as long as the server's cold start: the default 600 s deadline would
    fail `pulumi up` while the model still loads."""
    return sizing.server_progress_deadline_s(args.server)


def trigger_auth_targets(queue: Queue) -> list[dict]:
    """What KEDA's redis-streams scaler reads from Secrets: the external Redis' address, or
    the in-cluster Redis' password (https://keda.sh/docs/2.19/scalers/redis-streams/)."""
    if queue.kind == "external":
        return [{"parameter": p, "name": ref.name, "key": ref.key}
                for p, ref in (("address", naming.EXTERNAL_REDIS_ADDRESS),
                               ("password", naming.EXTERNAL_REDIS_PASSWORD))]
    if queue.password is not None:
        return [{"parameter": "password", "name": queue.password.name,
                 "key": queue.password.key}]
    return []


class WorkerPoolComponent(pulumi.ComponentResource):
    def __init__(self, name: str, args: WorkerPoolArgs,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("splitstack:infra:WorkerPool", name, None, opts)
        validate(args)
        w = args.pool
        mono = args.monolithic
        dep_name = args.object_name or (naming.MONOLITHIC_NAME if mono else naming.WORKER_NAME)
        config_map = f"{dep_name}-spec" if args.object_name else naming.worker_spec_config_map(mono)
        ns = args.namespace
        sel = naming.worker_labels(mono)
        scales = args.autoscaler is not Autoscaler.none and (w.max_replicas or 0) > w.replicas
        # The worker reads the resolved spec (SecretRefs only, no secret values) from here.
        self.spec_config = k8s.core.v1.ConfigMap(
            f"{name}-spec",
            metadata=metadata(config_map, ns, sel),
            data={naming.WORKER_SPEC_KEY: args.spec_document},
            opts=child(self),
        )
        self.cache = None
        cache_claim = cache_claim_name(args, dep_name) if mono else None
        if cache_claim is not None:
            self.cache = k8s.core.v1.PersistentVolumeClaim(
                f"{name}-{cache_claim.removeprefix(dep_name + '-')}",
                # Bound once the first worker pod exists (WaitForFirstConsumer): not awaited.
                metadata=metadata(cache_claim, ns, sel, annotations={"pulumi.com/skipAwait": "true"}),
                spec={"access_modes": ["ReadWriteMany" if args.cache_shared else "ReadWriteOnce"],
                      "storage_class_name": args.cache_class,
                      "resources": {"requests": {"storage": f"{args.cache_gib}Gi"}}},
                opts=child(self),
            )
        self.deployment = k8s.apps.v1.Deployment(
            name,
            metadata=metadata(dep_name, ns, sel, annotations=dict(PATCH_FORCE)),
            spec={
                "replicas": w.replicas,  # with a scaler: its minimum, then ignored (base.py)
                "selector": {"match_labels": sel},
                "progress_deadline_seconds": progress_deadline_s(args),
                "strategy": ({"type": "RollingUpdate", "rolling_update": {"max_surge": 0,
                              "max_unavailable": 1}} if mono else {"type": "RollingUpdate"}),
                "template": {"metadata": {"labels": {**sel, **({TOPOLOGY_POD_LABEL: args.cohort}
                                                               if args.cohort else {})},
                                          **template_annotations(args)},
                             "spec": pod_spec(args, cache_claim, config_map)},
            },
            # Pulumi waits for the workers to be ready, which waits for the server's cold start.
            opts=child(self, depends_on=[self.spec_config, *([self.cache] if self.cache else [])],
                       ignore_changes=replicas_ignored(scales),
                       custom_timeouts=custom_timeouts(args.server)),
        )
        self.pdb = None
        if mono:
            # A drain takes one GPU worker at a time (it holds a GPU and the model): the rest
            # keep serving. maxUnavailable, so one worker alone does not block every drain.
            self.pdb = k8s.policy.v1.PodDisruptionBudget(
                f"{name}-pdb",
                metadata=metadata(dep_name, ns, sel),
                spec={"max_unavailable": 1, "selector": {"match_labels": sel}},
                opts=child(self),
            )
        self.service = k8s.core.v1.Service(
            f"{name}-metrics",
            metadata=metadata(dep_name, ns, {**sel, naming.JOB_LABEL: naming.JOB_WORKERS}),
            spec={"selector": sel, "cluster_ip": "None", "ports": [{
                "name": naming.METRICS_PORT_NAME, "port": w.metrics_port,
                "target_port": naming.METRICS_PORT_NAME}]},
            opts=child(self),
        )
        self.service_monitor = k8s.apiextensions.CustomResource(
            f"{name}-monitor",
            api_version="monitoring.coreos.com/v1", kind="ServiceMonitor",
            metadata=metadata(dep_name, ns, {**sel, **args.monitor_labels}),
            spec={"selector": {"matchLabels": sel}, "namespaceSelector": {"matchNames": [ns]},
                  "jobLabel": naming.JOB_LABEL,
                  "endpoints": [monitor_endpoint(args)]},
            opts=child(self),
        )
        self.scaler: pulumi.Resource | None = None
        if scales and args.autoscaler is Autoscaler.keda:
            auth = None
            targets = trigger_auth_targets(args.queue)
            if targets:
                auth = f"{dep_name}-redis"
                self.trigger_auth = k8s.apiextensions.CustomResource(
                    f"{name}-redis-auth",
                    api_version="keda.sh/v1alpha1", kind="TriggerAuthentication",
                    metadata=metadata(auth, ns, sel),
                    spec={"secretTargetRef": targets},
                    opts=child(self),
                )
            self.scaler = k8s.apiextensions.CustomResource(
                f"{name}-scaler",
                api_version="keda.sh/v1alpha1", kind="ScaledObject",
                metadata=metadata(dep_name, ns, sel),
                spec=keda_spec(args, dep_name, auth),
                opts=child(self, depends_on=[self.deployment]),
            )
        elif scales:
            self.scaler = k8s.autoscaling.v2.HorizontalPodAutoscaler(
                f"{name}-hpa",
                metadata=metadata(dep_name, ns, sel),
                spec={"scale_target_ref": {"api_version": "apps/v1", "kind": "Deployment",
                                           "name": dep_name},
                      "min_replicas": max(w.replicas, 1), "max_replicas": w.max_replicas,
                      "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
                          "type": "Utilization", "average_utilization": 70}}}]},
                opts=child(self, depends_on=[self.deployment]),
            )
        self.register_outputs({"deployment": self.deployment.metadata["name"]})
