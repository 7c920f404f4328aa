"""The production rollout on a cluster: both topologies at once (docs/migration.md).

With ``migration.monolithic_workers: N`` (deployment_mode split) the program renders, beside
the split pool and its shared server (unchanged, now reading the split cohort's stream):

* the monolithic pool: the WorkerPool component on the spec ``monolithic_pool_spec`` returns,
  i.e. what deployment_mode monolithic renders (one GPU per worker, a PodDisruptionBudget, a
  model cache claim and a spec ConfigMap; pods labelled as monolithic mode's), with N fixed
  replicas, reading the monolithic cohort's stream; its objects are named
  ``worker-monolithic``, not ``worker-gpu``: a cluster coming from deployment_mode monolithic
  still holds that one (another Pulumi resource), and one name claimed by two resources fails
  `pulumi up` (AlreadyExists);
* the router (Deployment ``router``, worker/router.py in the worker image): the jobs stream in,
  one cohort stream out per document, by the split share in Redis that `runbook migrate`
  moves live.

Every pool's series carry the label ``topology`` (its ServiceMonitor's relabeling) and its KEDA
trigger watches its cohort's stream.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from contract import image_refs, naming, sizing
from contract.migration import ROUTER_DEPLOYMENT
from contract.spec import DeploymentMode, Migration, Spec
from contract.worker_env import redis_password_env
from infra.components.base import child, metadata

ROUTER_NAME = ROUTER_DEPLOYMENT
ROUTER_HEALTH_PORT = 8080


def monolithic_pool_spec(spec: Spec) -> Spec:
    """The spec the monolithic cohort's objects are rendered from: deployment_mode monolithic,
    ``migration.monolithic_workers`` fixed replicas (its GPUs are counted by the spec rules).
    The pool's own spec (its ConfigMap) is a plain monolithic one: it is not the migration."""
    n = spec.migration.monolithic_workers
    return spec.model_copy(update={
        "deployment_mode": DeploymentMode.monolithic,
        "migration": Migration(),
        "worker_pool": spec.worker_pool.model_copy(update={"replicas": n, "max_replicas": None}),
    })


def router_labels() -> dict[str, str]:
    return naming.labels("router", ROUTER_NAME)


def router_env(spec: Spec) -> list[dict]:
    """The Redis URL the router reads (the workers' own variable and value, naming.worker_env)."""
    q = spec.queue
    if q.kind == "external":
        return [naming.secret_env(q.url_env, naming.EXTERNAL_REDIS_SECRET)]
    env = [naming.secret_env(q.password.env, q.password)] if q.password else []
    return env + [{"name": q.url_env, "value": naming.redis_url(spec)}]


def router_container(spec: Spec) -> dict:
    q = spec.queue
    # No declared container port: nothing but the kubelet's probes calls it (no flow to open).
    http = {"port": ROUTER_HEALTH_PORT, "path": "/healthz"}
    return {
        "name": ROUTER_NAME,
        "image": image_refs.pull_ref(spec, image_refs.worker_source(spec)),
        # $(VAR) in args is expanded by the kubelet from the container's env: the URL (with its
        # password) never appears in the object.
        "command": ["python", "-m", "worker.router", "--redis-url", f"$({q.url_env})", "--stream", q.stream,
                    "--group", q.group, "--host", "0.0.0.0", "--health-port", str(ROUTER_HEALTH_PORT),
                    "--password-env", redis_password_env(spec)],
        "env": router_env(spec),
        "resources": {
            "requests": {"cpu": f"{sizing.ROUTER_CPU_MILLICORES}m", "memory": f"{sizing.ROUTER_MEMORY_MIB}Mi"},
            "limits": {"cpu": f"{sizing.ROUTER_CPU_LIMIT_MILLICORES}m",
                       "memory": f"{sizing.ROUTER_MEMORY_LIMIT_MIB}Mi"}},
        # /healthz is 200 while the forwarding loop turns (worker/router.py serve_health).
        "readiness_probe": {"http_get": http, "period_seconds": 5, "failure_threshold": 3},
        "liveness_probe": {"http_get": http, "period_seconds": 15, "timeout_seconds": 5, "failure_threshold": 4},
        "security_context": naming.container_security_context(read_only_root=True),
    }


def router_pod_spec(spec: Spec) -> dict:
    return {
        "enable_service_links": False,
        "automount_service_account_token": False,
        "security_context": naming.pod_security_context(),
        "termination_grace_period_seconds": 30,
        **({"image_pull_secrets": image_refs.pull_secrets(spec)} if image_refs.pull_secrets(spec) else {}),
        "containers": [router_container(spec)],
    }


@dataclass(frozen=True)
class RouterArgs:
    spec: Spec


class RouterComponent(pulumi.ComponentResource):
    """One router; a second one during a rollout is safe (each forward is one atomic script that
    does nothing for an entry no longer pending, and a dead router's entries are claimed)."""

    def __init__(self, name: str, args: RouterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("splitstack:infra:Router", name, None, opts)
        spec = args.spec
        sel = router_labels()
        self.deployment = k8s.apps.v1.Deployment(
            name,
            metadata=metadata(ROUTER_NAME, spec.namespace, sel),
            spec={"replicas": 1, "selector": {"match_labels": sel},
                  "strategy": {"type": "RollingUpdate"},
                  "template": {"metadata": {"labels": sel}, "spec": router_pod_spec(spec)}},
            opts=child(self),
        )
        self.register_outputs({"deployment": self.deployment.metadata["name"]})
