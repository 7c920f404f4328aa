"""Names, labels, URLs and env wiring shared by the components, Compose and the policy pack.

No pulumi import: the Compose renderer and the policy rules use these too.
"""

from __future__ import annotations

import hashlib

from contract import clusters
from contract.prometheus_jobs import JOB_SERVER, JOB_WORKERS
from contract.spec import InferenceServer, SecretRef, Spec
from contract.worker_env import (
    ENV_METRICS_PORT,
    ENV_MODEL_SOURCE,
    ENV_OUTPUT_DIR,
    ENV_SERVER_URL,
    ENV_SPEC_FILE,
)

# ServiceMonitors take Prometheus' job label from this Service label, so that the job names
# match the local stack's scrape config, which alerts/ rules select on (job="workers", ...).
JOB_LABEL = "splitstack.dev/job"
__all__ = ["JOB_SERVER", "JOB_WORKERS"]

PART_OF = "splitstack"
GPU_RESOURCE = "nvidia.com/gpu"
HTTP_PORT_NAME = "http"
METRICS_PORT_NAME = "metrics"
REDIS_NAME = "redis"
WORKER_NAME = "worker"
MONOLITHIC_NAME = "worker-gpu"
OUTPUTS_MOUNT = "/data/outputs"
# The resolved deployment spec (JSON, no secret values) the worker reads instead of Pulumi.<stack>.yaml.
WORKER_SPEC_MOUNT = "/etc/splitstack"
WORKER_SPEC_KEY = "spec.json"
# The ConfigMap `<deployment>-spec` holds the worker's spec; its digest in the pod template makes
# a change of it roll the workers (infra/components/worker_pool.py, the runbooks' `tune`).
WORKER_SPEC_DIGEST_ANNOTATION = "splitstack.dev/spec-sha256"


def worker_spec_config_map(monolithic: bool = False) -> str:
    return f"{MONOLITHIC_NAME if monolithic else WORKER_NAME}-spec"


def spec_digest(document: str) -> str:
    return hashlib.sha256(document.encode()).hexdigest()
MODEL_CACHE_MOUNT = "/models"
# vLLM's torch.compile / CUDA graph artifacts and Triton's kernels go on the model cache's volume
# (not under $HOME, an emptyDir), so a restarted pod skips the compile as well as the download.
VLLM_CACHE_ROOT = f"{MODEL_CACHE_MOUNT}/vllm-cache"
TRITON_CACHE_DIR = f"{MODEL_CACHE_MOUNT}/triton-cache"


def compile_cache_env() -> list[dict]:
    return [{"name": "VLLM_CACHE_ROOT", "value": VLLM_CACHE_ROOT},
            {"name": "TRITON_CACHE_DIR", "value": TRITON_CACHE_DIR}]
# The sidecar of the Grafana chart in kube-prometheus-stack loads ConfigMaps carrying this label.
GRAFANA_DASHBOARD_LABEL = "grafana_dashboard"
# kube-prometheus-stack's Prometheus selects rules/monitors by its Helm release label.
PROMETHEUS_RELEASE = "kube-prometheus-stack"
PROMETHEUS_PORT = 9090
# The Prometheus operator labels every Prometheus pod with this (NetworkPolicies admit scrapes
# from those pods).
PROMETHEUS_POD_LABELS = {"app.kubernetes.io/name": "prometheus"}
# Secret holding redis://... for queue kind=external (derived until the spec has a SecretRef).
EXTERNAL_REDIS_SECRET = SecretRef(name="splitstack-redis", key="url", env="SPLITSTACK_REDIS_URL")
# KEDA's redis-streams scaler takes no URL: it reads host:port and the password as separate
# parameters (https://keda.sh/docs/2.19/scalers/redis-streams/), from keys of the same Secret.
EXTERNAL_REDIS_ADDRESS = SecretRef(name="splitstack-redis", key="address", env="SPLITSTACK_REDIS_ADDRESS")
EXTERNAL_REDIS_PASSWORD = SecretRef(name="splitstack-redis", key="password",
                                    env="SPLITSTACK_REDIS_PASSWORD")


def labels(component: str, instance: str) -> dict[str, str]:
    """Selector labels (stable for the life of a Deployment: selectors are immutable)."""
    return {
        "app.kubernetes.io/name": component,
        "app.kubernetes.io/instance": instance,
        "app.kubernetes.io/part-of": PART_OF,
    }


def server_labels(server: InferenceServer) -> dict[str, str]:
    return labels("inference-server", server.name)


def worker_labels(monolithic: bool = False) -> dict[str, str]:
    return labels("worker", MONOLITHIC_NAME if monolithic else WORKER_NAME)


def redis_labels() -> dict[str, str]:
    return labels("queue", REDIS_NAME)


def server_host(spec: Spec, server: InferenceServer) -> str:
    return f"{server.name}.{spec.namespace}.svc.cluster.local"


def server_url(spec: Spec, server: InferenceServer) -> str:
    return f"http://{server_host(spec, server)}:{server.port}"


def redis_address(spec: Spec) -> str:
    return f"{REDIS_NAME}.{spec.namespace}.svc.cluster.local:{spec.queue.port}"


def prometheus_service(spec: Spec) -> str:
    """Service of the default Prometheus: kube-prometheus-stack's, or the operator's own."""
    if spec.observability.install_kube_prometheus_stack:
        return f"{PROMETHEUS_RELEASE}-prometheus"
    return "prometheus-operated"  # created by the Prometheus operator for any Prometheus


def prometheus_url(spec: Spec) -> str:
    """In-cluster Prometheus: observability.prometheus_url, else the default service's URL."""
    o = spec.observability
    if o.prometheus_url:
        return o.prometheus_url.rstrip("/")
    return (f"http://{prometheus_service(spec)}.{o.prometheus_namespace}.svc.cluster.local:"
            f"{PROMETHEUS_PORT}")


def monitor_labels(spec: Spec) -> dict[str, str]:
    """Labels on ServiceMonitors, PodMonitors and PrometheusRules: what the Prometheus selects."""
    labels = spec.observability.monitor_labels
    return dict(labels) if labels is not None else {"release": PROMETHEUS_RELEASE}


def keda_namespace(spec: Spec) -> str:
    return spec.cluster.keda_namespace


def prometheus_namespace(spec: Spec) -> str:
    return spec.observability.prometheus_namespace


# Non-root identities the pods run as (Pod Security "restricted" needs runAsNonRoot, and a
# numeric runAsUser lets the kubelet verify it whatever USER an image declares). The images of
# images/ create these users; fsGroup makes mounted volumes group-writable for them.
APP_UID = 10001  # worker, simulator and inference server
APP_GID = 10001
REDIS_UID = 999  # the redis:7-alpine image's own `redis` user and group
REDIS_GID = 1000
NOBODY_UID = 65534  # busybox init container
POD_SECURITY_LEVEL = "restricted"  # https://kubernetes.io/docs/concepts/security/pod-security-standards/


def pod_security_context(uid: int = APP_UID, gid: int = APP_GID) -> dict:
    """Pod-level securityContext that the restricted Pod Security profile admits."""
    return {"run_as_non_root": True, "run_as_user": uid, "run_as_group": gid, "fs_group": gid,
            "seccomp_profile": {"type": "RuntimeDefault"}}


def container_security_context(read_only_root: bool = False) -> dict:
    return {"allow_privilege_escalation": False, "capabilities": {"drop": ["ALL"]},
            "read_only_root_filesystem": read_only_root}


def namespace_labels(spec: Spec) -> dict[str, str]:
    """Pod Security admission enforces the restricted profile on the namespace."""
    version = f"v{spec.cluster.kubernetes_version}"
    out = labels("namespace", spec.namespace)
    for mode in ("enforce", "audit", "warn"):
        out[f"pod-security.kubernetes.io/{mode}"] = POD_SECURITY_LEVEL
        out[f"pod-security.kubernetes.io/{mode}-version"] = version
    return out


def redis_url(spec: Spec) -> str:
    """In-cluster Redis URL; with a password, ``$(VAR)`` that the kubelet expands from the
    secretKeyRef env var defined before it (the password never appears in the object)."""
    auth = f":$({spec.queue.password.env})@" if spec.queue.password else ""
    return f"redis://{auth}{redis_address(spec)}/0"


def worker_env(spec: Spec, monolithic: bool) -> list[dict]:
    """Environment of a worker container (snake_case dicts, as pulumi-kubernetes takes them).

    The names are the worker's own (worker/config.py), so the pod runs the same code path as
    the local stack: the resolved spec from a ConfigMap, URLs and the output mount from here,
    secrets only as secretKeyRef, never as values.
    """
    w = spec.worker_pool
    q = spec.queue
    server = spec.worker_server
    env: list[dict] = [
        {"name": ENV_SPEC_FILE, "value": f"{WORKER_SPEC_MOUNT}/{WORKER_SPEC_KEY}"},
        {"name": ENV_METRICS_PORT, "value": str(w.metrics_port)},
        # kind directory: the shared volume; kind s3: an emptyDir where outputs are staged
        # before their upload (worker/objectstore.py).
        {"name": ENV_OUTPUT_DIR, "value": OUTPUTS_MOUNT},
        {"name": "MINERU_VERSION", "value": w.mineru_version},
        # As in the local stack (stack/workers.py): glibc arenas per thread let RSS creep.
        {"name": "MALLOC_ARENA_MAX", "value": "2"},
    ]
    if monolithic:
        env.append({"name": ENV_MODEL_SOURCE, "value": server.model.source})
        env.append({"name": "HF_HOME", "value": f"{MODEL_CACHE_MOUNT}/hf"})
        # As for the server's pod: vLLM, torch.compile and Triton write caches under $HOME, and
        # torch's cache dir asks getpass.getuser(), which reads $USER first (the image's user
        # has no passwd entry).
        env += [{"name": "HOME", "value": "/tmp/home"}, {"name": "USER", "value": "vllm"},
                {"name": "VLLM_NO_USAGE_STATS", "value": "1"}, *compile_cache_env()]
        if server.hf_token:
            env.append(secret_env(server.hf_token.env, server.hf_token))
    else:
        env.append({"name": ENV_SERVER_URL, "value": server_url(spec, server)})
        if server.api_key:
            env.append(secret_env(server.api_key.env, server.api_key))
    store = spec.output_store
    if store.kind == "s3":  # bucket and endpoint come with the spec; the key pair by reference
        for ref in (store.access_key_id, store.secret_access_key):
            if ref is not None:
                env.append(secret_env(ref.env, ref))
    if q.kind == "external":
        env.append(secret_env(q.url_env, EXTERNAL_REDIS_SECRET))
    else:
        if q.password:
            env.append(secret_env(q.password.env, q.password))
        env.append({"name": q.url_env, "value": redis_url(spec)})
    return env


def secret_env(name: str, ref: SecretRef) -> dict:
    return {"name": name, "value_from": {"secret_key_ref": {"name": ref.name, "key": ref.key}}}


GPU_POOL_LABEL = "splitstack.dev/gpu-pool"


def gpu_node_selector(spec: Spec) -> dict[str, str]:
    """Servers select GPU nodes by the pool's labels; managed pools also carry our own label."""
    pool = spec.gpu_node_pool
    if pool is None:
        return {}
    selector = dict(pool.labels)
    if pool.cloud.value != "existing":
        selector[GPU_POOL_LABEL] = "true"
    return selector


def gpu_tolerations(spec: Spec) -> list[dict]:
    pool = spec.gpu_node_pool
    if pool is None:
        return []
    out = [
        {"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect}
        if t.value
        else {"key": t.key, "operator": "Exists", "effect": t.effect}
        for t in pool.taints
    ]
    if (clusters.profile(pool.cloud.value).taints_gpu_nodes_itself
            and not any(t.key == GPU_RESOURCE for t in pool.taints)):
        # GKE taints every GPU node nvidia.com/gpu=present:NoSchedule on its own.
        out.append({"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"})
    return out


def gpu_tolerations_camel(spec: Spec) -> list[dict]:
    """The same tolerations in Kubernetes' own spelling (for Helm values)."""
    return gpu_tolerations(spec)  # keys are single words: identical in both spellings
