"""InferenceServer: one vLLM (or simulator) Deployment per served model, hardened.

What the public charts get wrong and this component gets right: a startup probe whose budget
covers the model download and load; /dev/shm memory-backed with a size limit; no service-link
env vars (a Service named ``vllm`` injects VLLM_PORT, which crashes vLLM); a rollout that cannot
deadlock on a full GPU pool; secrets only by reference; a preStop drain shorter than the grace
period; Pulumi waits at least the startup budget.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from contract import naming, sizing
from contract.spec import Engine, InferenceServer, Spec
from infra.components.base import child, duration, metadata, quantity_gib
from infra.policy.rules import GPU_HEADROOM_ANNOTATION, STARTUP_BUDGET_ANNOTATION
from infra.workloads import server_image, sim_command, vllm_args

CUSTOM_TIMEOUT_MARGIN_S = 300  # image pull and scheduling on a fresh node come on top


@dataclass(frozen=True)
class InferenceServerArgs:
    spec: Spec
    server: InferenceServer
    path: str  # field path of the server in the spec, for error messages


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


def pod_spec(spec: Spec, server: InferenceServer) -> dict:
    gpu = server.engine is Engine.vllm
    env: list[dict] = [{"name": "HF_HOME", "value": f"{naming.MODEL_CACHE_MOUNT}/hf"}]
    if server.api_key:
        env.append(naming.secret_env("VLLM_API_KEY", server.api_key))
    if server.hf_token and gpu:
        env.append(naming.secret_env("HF_TOKEN", server.hf_token))
    tp = server.tensor_parallel_size if gpu else 0
    memory = quantity_gib(sizing.server_memory_gib(server) if gpu else 2)
    cpu = str(sizing.SERVER_CPU_PER_GPU * tp) if gpu else "1"
    resources = {"requests": {"cpu": cpu, "memory": memory}, "limits": {"memory": memory}}
    if gpu:
        resources["requests"][naming.GPU_RESOURCE] = str(tp)
        resources["limits"][naming.GPU_RESOURCE] = str(tp)
    container: dict = {
        "name": "server",
        "image": server_image(server),
        "ports": [{"name": naming.HTTP_PORT_NAME, "container_port": server.port}],
        "env": env,
        "resources": resources,
        "lifecycle": {"pre_stop": {"sleep": {"seconds": sizing.PRESTOP_SLEEP_S}}},
        "volume_mounts": [
            {"name": "dshm", "mount_path": "/dev/shm"},
            {"name": "model-cache", "mount_path": naming.MODEL_CACHE_MOUNT},
        ],
        "security_context": {"allow_privilege_escalation": False},
        **probes(server),
    }
    if gpu:
        container["args"] = vllm_args(server)
    else:
        container["command"] = sim_command(server)
    pod: dict = {
        "enable_service_links": False,
        "termination_grace_period_seconds": sizing.grace_period_s(server),
        "containers": [container],
        "volumes": [
            {"name": "dshm", "empty_dir": {
                "medium": "Memory", "size_limit": quantity_gib(sizing.shm_gib(tp))}},
            {"name": "model-cache",
             "persistent_volume_claim": {"claim_name": f"{server.name}-model-cache"}},
        ],
    }
    if gpu:
        pod["tolerations"] = naming.gpu_tolerations(spec)
        pod["node_selector"] = naming.gpu_node_selector(spec)
    return pod


def template_annotations(spec: Spec, server: InferenceServer) -> dict[str, str]:
    """Derived numbers the policy pack checks the objects against."""
    surge = sizing.server_rollout(spec, server).max_surge > 0
    return {STARTUP_BUDGET_ANNOTATION: str(server.startup_budget_s),
            GPU_HEADROOM_ANNOTATION: "true" if surge else "false"}


def custom_timeouts(server: InferenceServer) -> pulumi.CustomTimeouts:
    """Pulumi waits for the Deployment to be ready: at least the startup budget, plus pulls."""
    budget = duration(server.startup_budget_s + CUSTOM_TIMEOUT_MARGIN_S)
    return pulumi.CustomTimeouts(create=budget, update=budget)


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

        self.cache = k8s.core.v1.PersistentVolumeClaim(
            f"{name}-model-cache",
            metadata=metadata(f"{server.name}-model-cache", ns, sel),
            spec={"access_modes": [sizing.cache_access_mode(server)],
                  "resources": {"requests": {"storage": f"{sizing.model_cache_gib(server)}Gi"}}},
            opts=child(self),
        )
        self.deployment = k8s.apps.v1.Deployment(
            name,
            metadata=metadata(server.name, ns, sel),
            spec={
                "replicas": server.replicas,
                "selector": {"match_labels": sel},
                "strategy": strategy(spec, server),
                "template": {"metadata": {"labels": sel,
                                          "annotations": template_annotations(spec, server)},
                             "spec": pod_spec(spec, server)},
            },
            opts=child(self, depends_on=[self.cache], custom_timeouts=custom_timeouts(server)),
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
            metadata=metadata(server.name, ns, {**sel, "release": naming.PROMETHEUS_RELEASE}),
            spec={"selector": {"matchLabels": sel}, "namespaceSelector": {"matchNames": [ns]},
                  "jobLabel": naming.JOB_LABEL,
                  "endpoints": [{"port": naming.HTTP_PORT_NAME, "path": "/metrics",
                                 "interval": f"{spec.observability.scrape_interval_s}s"}]},
            opts=child(self),
        )
        self.scaled_object = None
        max_replicas = sizing.server_max_replicas(spec, server)
        if server.engine is Engine.vllm and max_replicas > server.replicas:
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
