"""InferenceServer: one vLLM (or simulator) Deployment per served model, hardened.

What the public charts get wrong and this component gets right: a startup probe whose budget
covers the model download and load; /dev/shm memory-backed with a size limit; no service-link
env vars (a Service named ``vllm`` injects VLLM_PORT, which crashes vLLM); a rollout that cannot
deadlock on a full GPU pool; secrets only by reference; a preStop drain shorter than the grace
period; Pulumi and the Deployment's progress deadline both wait at least the startup budget; a
model cache on a named StorageClass whose access mode matches the replicas that mount it; no
replica count that fights KEDA; non-root under the restricted Pod Security profile.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from contract import clusters, image_refs, naming, sizing
from contract.spec import Engine, InferenceServer, Spec
from infra.components.base import PATCH_FORCE, child, duration, metadata, quantity_gib, replicas_ignored
from infra.policy.rules import (
    GPU_HEADROOM_ANNOTATION,
    SPEC_PATH_ANNOTATION,
    STARTUP_BUDGET_ANNOTATION,
)
from infra.workloads import server_image, sim_command, vllm_args

CUSTOM_TIMEOUT_MARGIN_S = sizing.CUSTOM_TIMEOUT_MARGIN_S
# pulumi-kubernetes waits for a PVC to bind, which a WaitForFirstConsumer class does only once
# the Deployment's pod exists, and the Deployment waits for the PVC: the create await learned the
# bind mode in pulumi/pulumi-kubernetes#3130, the update await only in #4181. The consumer's own
# await proves the claim bound, so the claim is not awaited.
SKIP_AWAIT = {"pulumi.com/skipAwait": "true"}
# vLLM, torch.compile and Triton write caches under $HOME; the image's user may have no home
# and no passwd entry (torch's cache dir calls getpass.getuser(), which reads $USER first).
SERVER_HOME = "/tmp/home"


@dataclass(frozen=True)
class InferenceServerArgs:
    spec: Spec
    server: InferenceServer
    path: str  # field path of the server in the spec, for error messages
    storage_class: str | None = None  # the model cache's class (ReadWriteMany when shared)
    storage_min_gib: int = 1  # smallest volume that class provisions


def validate(args: InferenceServerArgs) -> None:
    spec, server, path = args.spec, args.server, args.path
    if server.engine is Engine.vllm:
        sizing.check_startup_budget(server, path)
    pool = spec.gpu_node_pool
    if pool and pool.gpu_sharing != "none" and server.tensor_parallel_size > 1:
        raise ValueError(
            f"{path}.tensor_parallel_size: {server.tensor_parallel_size} with "
            f"gpu_node_pool.gpu_sharing={pool.gpu_sharing!r}: a shared GPU slice is not a whole "
            "GPU, tensor parallelism over slices gives no memory; set tensor_parallel_size to 1 "
            "or gpu_sharing to 'none'"
        )


def probes(server: InferenceServer) -> dict:
    http = {"path": "/health", "port": naming.HTTP_PORT_NAME}
    return {
        "startup_probe": {
            "http_get": http, "period_seconds": sizing.STARTUP_PERIOD_S, "timeout_seconds": 5,
            "failure_threshold": sizing.startup_failure_threshold(server),
        },
        "readiness_probe": {
            "http_get": http, "period_seconds": 5, "timeout_seconds": 5, "failure_threshold": 3,
        },
        "liveness_probe": {
            "http_get": http, "period_seconds": 10, "timeout_seconds": 10, "failure_threshold": 6,
        },
    }


def pod_spec(spec: Spec, server: InferenceServer, cache_claim: str) -> dict:
    gpu = server.engine is Engine.vllm
    env: list[dict] = [{"name": "HF_HOME", "value": f"{naming.MODEL_CACHE_MOUNT}/hf"}]
    if server.api_key:
        env.append(naming.secret_env("VLLM_API_KEY", server.api_key))
    if server.hf_token and gpu:
        env.append(naming.secret_env("HF_TOKEN", server.hf_token))
    env += [{"name": "HOME", "value": SERVER_HOME}, {"name": "USER", "value": "vllm"},
            {"name": "VLLM_NO_USAGE_STATS", "value": "1"}]
    if gpu:
        env += naming.compile_cache_env()
    tp = server.tensor_parallel_size if gpu else 0
    memory = f"{sizing.server_memory_mib(server)}Mi"
    cpu = f"{sizing.server_cpu_millicores(server)}m"
    resources = {"requests": {"cpu": cpu, "memory": memory}, "limits": {"memory": memory}}
    if gpu:
        resources["requests"][naming.GPU_RESOURCE] = str(tp)
        resources["limits"][naming.GPU_RESOURCE] = str(tp)
    container: dict = {
        "name": "server",
        "image": image_refs.pull_ref(spec, server_image(server)),
        "ports": [{"name": naming.HTTP_PORT_NAME, "container_port": server.port}],
        "env": env,
        "resources": resources,
        "lifecycle": {"pre_stop": {"sleep": {"seconds": sizing.PRESTOP_SLEEP_S}}},
        "volume_mounts": [
            {"name": "dshm", "mount_path": "/dev/shm"},
            {"name": "model-cache", "mount_path": naming.MODEL_CACHE_MOUNT},
            {"name": "tmp", "mount_path": "/tmp"},
        ],
        "security_context": naming.container_security_context(),
        **probes(server),
    }
    if gpu:
        container["args"] = vllm_args(server)
    else:
        container["command"] = sim_command(server)
    pod: dict = {
        "enable_service_links": False,
        "automount_service_account_token": False,
        "security_context": naming.pod_security_context(),
        "termination_grace_period_seconds": sizing.grace_period_s(server),
        **({"image_pull_secrets": image_refs.pull_secrets(spec)} if image_refs.pull_secrets(spec) else {}),
        "containers": [container],
        "volumes": [
            {"name": "dshm", "empty_dir": {
                "medium": "Memory", "size_limit": quantity_gib(sizing.shm_gib(tp))}},
            {"name": "model-cache",
             "persistent_volume_claim": {"claim_name": cache_claim}},
            {"name": "tmp", "empty_dir": {}},
        ],
    }
    if gpu:
        pod["tolerations"] = naming.gpu_tolerations(spec)
        pod["node_selector"] = naming.gpu_node_selector(spec)
    return pod


def cache_claim_name(spec: Spec, server: InferenceServer, storage_min_gib: int = 1) -> str:
    """The access mode and the size are in the name: a PVC's accessModes cannot change and the
    API server refuses to shrink a claim, so a new replica count (ReadWriteOnce to ReadWriteMany)
    or a smaller model creates a new claim, the Deployment moves to it, and Pulumi deletes the
    old one afterwards, instead of failing on an immutable field. It is a cache: the new claim
    fills on the server's first start."""
    mode = "rwx" if sizing.cache_shared(spec, server) else "rwo"
    return f"{server.name}-model-cache-{mode}-{cache_size_gib(spec, server, storage_min_gib)}gi"


def cache_size_gib(spec: Spec, server: InferenceServer, storage_min_gib: int) -> int:
    return max(sizing.model_cache_gib(server), storage_min_gib)


def template_annotations(spec: Spec, server: InferenceServer, path: str) -> dict[str, str]:
    """Derived numbers the policy pack checks the objects against."""
    surge = sizing.server_rollout(spec, server).max_surge > 0
    return {STARTUP_BUDGET_ANNOTATION: str(server.startup_budget_s),
            GPU_HEADROOM_ANNOTATION: "true" if surge else "false",
            SPEC_PATH_ANNOTATION: path}


def custom_timeouts(server: InferenceServer) -> pulumi.CustomTimeouts:
    """Pulumi waits for the Deployment to be ready: at least the startup budget, plus pulls."""
    budget = duration(server.startup_budget_s + CUSTOM_TIMEOUT_MARGIN_S)
    return pulumi.CustomTimeouts(create=budget, update=budget)


def storage_min_gib(cloud: str, class_name: str | None) -> int:
    facts = [f for f in clusters.storage(cloud).values() if f.name == class_name]
    return facts[0].min_gib if facts else 1


def strategy(spec: Spec, server: InferenceServer) -> dict:
    rollout = sizing.server_rollout(spec, server)
    if rollout.type == "Recreate":
        return {"type": "Recreate"}
    return {"type": "RollingUpdate", "rolling_update": {
        "max_surge": rollout.max_surge, "max_unavailable": rollout.max_unavailable}}


class InferenceServerComponent(pulumi.ComponentResource):
    """Deployment, Service, model-cache PVC, PDB, ServiceMonitor (and a KEDA scaler into free GPUs)."""

    def __init__(self, name: str, args: InferenceServerArgs,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("splitstack:infra:InferenceServer", name, None, opts)
        validate(args)
        spec, server = args.spec, args.server
        ns = spec.namespace
        sel = naming.server_labels(server)

        claim = cache_claim_name(spec, server, args.storage_min_gib)
        size = cache_size_gib(spec, server, args.storage_min_gib)
        self.cache = k8s.core.v1.PersistentVolumeClaim(
            f"{name}-{claim.removeprefix(server.name + '-')}",
            metadata=metadata(claim, ns, sel, annotations=dict(SKIP_AWAIT)),
            spec={"access_modes": [sizing.cache_access_mode(spec, server)],
                  "storage_class_name": args.storage_class,
                  "resources": {"requests": {"storage": f"{size}Gi"}}},
            opts=child(self),
        )
        max_replicas = sizing.server_max_replicas(spec, server)
        scaled = server.engine is Engine.vllm and max_replicas > server.replicas
        self.deployment = k8s.apps.v1.Deployment(
            name,
            metadata=metadata(server.name, ns, sel, annotations=dict(PATCH_FORCE)),
            spec={
                # With a ScaledObject: KEDA's minimum, then ignored (infra/components/base.py).
                "replicas": server.replicas,
                "progress_deadline_seconds": sizing.server_progress_deadline_s(server),
                "selector": {"match_labels": sel},
                "strategy": strategy(spec, server),
                "template": {"metadata": {"labels": sel, "annotations": template_annotations(
                                 spec, server, args.path)},
                             "spec": pod_spec(spec, server, claim)},
            },
            opts=child(self, depends_on=[self.cache], custom_timeouts=custom_timeouts(server),
                       ignore_changes=replicas_ignored(scaled)),
        )
        self.service = k8s.core.v1.Service(
            f"{name}-svc",
            metadata=metadata(server.name, ns, {**sel, naming.JOB_LABEL: naming.JOB_SERVER}),
            spec={"selector": sel, "ports": [{
                "name": naming.HTTP_PORT_NAME, "port": server.port,
                "target_port": naming.HTTP_PORT_NAME}]},
            opts=child(self),
        )
        self.pdb = k8s.policy.v1.PodDisruptionBudget(
            f"{name}-pdb",
            metadata=metadata(server.name, ns, sel),
            # maxUnavailable, not minAvailable: with one replica minAvailable=1 blocks every drain.
            spec={"max_unavailable": 1, "selector": {"match_labels": sel}},
            opts=child(self),
        )
        self.service_monitor = k8s.apiextensions.CustomResource(
            f"{name}-monitor",
            api_version="monitoring.coreos.com/v1", kind="ServiceMonitor",
            metadata=metadata(server.name, ns, {**sel, **naming.monitor_labels(spec)}),
            spec={"selector": {"matchLabels": sel}, "namespaceSelector": {"matchNames": [ns]},
                  "jobLabel": naming.JOB_LABEL,
                  "endpoints": [{"port": naming.HTTP_PORT_NAME, "path": "/metrics",
                                 "interval": f"{spec.observability.scrape_interval_s}s"}]},
            opts=child(self),
        )
        self.scaled_object = None
        if scaled:
            self.scaled_object = k8s.apiextensions.CustomResource(
                f"{name}-scaler",
                api_version="keda.sh/v1alpha1", kind="ScaledObject",
                metadata=metadata(server.name, ns, sel),
                spec=server_scaler_spec(spec, server, max_replicas),
                opts=child(self, depends_on=[self.deployment]),
            )
        self.url = pulumi.Output.from_input(naming.server_url(spec, server))
        self.register_outputs({"url": self.url, "deployment": self.deployment.metadata["name"]})


def server_scaler_spec(spec: Spec, server: InferenceServer, max_replicas: int) -> dict:
    # vLLM labels its metrics model_name (not model): a query on the wrong label matches nothing
    # and the scaler never fires.
    query = (f'sum(vllm:num_requests_waiting{{model_name="{server.model.name}",'
             f'namespace="{spec.namespace}"}})')
    return {
        "scaleTargetRef": {"name": server.name},
        "minReplicaCount": server.replicas,
        "maxReplicaCount": max_replicas,
        "cooldownPeriod": server.startup_budget_s,
        "triggers": [{"type": "prometheus", "metadata": {
            "serverAddress": naming.prometheus_url(spec), "query": query,
            "threshold": str(sizing.server_waiting_threshold(server))}}],
    }
