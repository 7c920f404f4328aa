"""Queue: Redis as an in-cluster StatefulSet (AOF on a PVC), or nothing for an external URL.

Redis asks for a password (AUTH from a Secret, never a literal), caps its memory below the
container limit so that a full queue refuses writes instead of being OOM-killed, runs as its
image's non-root user, and keeps its data on the cluster's ReadWriteOnce StorageClass.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from contract import image_refs, naming, sizing
from contract.spec import Spec
from infra.components.base import child, metadata

REDIS_DATA_GIB = sizing.REDIS_DATA_GIB
REDIS_MEMORY = f"{sizing.REDIS_MEMORY_MIB}Mi"
PASSWORD_ENV = "REDIS_PASSWORD"
# redis-cli reads the password from this variable, so the probe needs no -a on its command line
# (https://redis.io/docs/latest/develop/tools/cli/#host-port-password-and-database).
REDISCLI_AUTH = "REDISCLI_AUTH"


@dataclass(frozen=True)
class QueueArgs:
    spec: Spec
    storage_class: str | None = None  # ReadWriteOnce class of the AOF volume


def redis_args(spec: Spec) -> list[str]:
    q = spec.queue
    args = ["--port", str(q.port), "--appendonly", "yes",
            "--maxmemory", f"{sizing.redis_maxmemory_mib()}mb", "--maxmemory-policy", "noeviction"]
    if q.password is not None:
        args += ["--requirepass", f"$({PASSWORD_ENV})"]  # expanded by the kubelet from the env
    return args


def redis_env(spec: Spec) -> list[dict]:
    ref = spec.queue.password
    if ref is None:
        return []
    return [naming.secret_env(PASSWORD_ENV, ref), naming.secret_env(REDISCLI_AUTH, ref)]


class QueueComponent(pulumi.ComponentResource):
    def __init__(self, name: str, args: QueueArgs,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("splitstack:infra:Queue", name, None, opts)
        spec = args.spec
        q = spec.queue
        self.address = pulumi.Output.from_input(
            f"<external: ${q.url_env}>" if q.kind == "external" else naming.redis_address(spec))
        if q.kind == "external":
            self.register_outputs({"address": self.address})
            return
        ns = spec.namespace
        sel = naming.redis_labels()
        self.service = k8s.core.v1.Service(
            f"{name}-svc",
            metadata=metadata(naming.REDIS_NAME, ns, sel),
            spec={"selector": sel, "ports": [{"name": "redis", "port": q.port,
                                              "target_port": "redis"}]},
            opts=child(self),
        )
        self.statefulset = k8s.apps.v1.StatefulSet(
            name,
            metadata=metadata(naming.REDIS_NAME, ns, sel),
            spec={
                "service_name": naming.REDIS_NAME,
                "replicas": 1,
                # The claim `data-redis-0` is the StatefulSet's, not a Pulumi resource: without
                # this, `pulumi destroy` leaves it (and its disk) behind. The queue's jobs go with
                # the deployment; a scale-down keeps them.
                "persistent_volume_claim_retention_policy": {"when_deleted": "Delete",
                                                             "when_scaled": "Retain"},
                "selector": {"match_labels": sel},
                "template": {"metadata": {"labels": sel}, "spec": {
                    "enable_service_links": False,
                    "automount_service_account_token": False,
                    "security_context": naming.pod_security_context(naming.REDIS_UID,
                                                                    naming.REDIS_GID),
                    **({"image_pull_secrets": image_refs.pull_secrets(spec)}
                       if image_refs.pull_secrets(spec) else {}),
                    "containers": [{
                        "name": "redis",
                        "image": image_refs.pull_ref(spec, sizing.REDIS_IMAGE),
                        # AOF so queued jobs and consumer-group state survive a restart.
                        "args": redis_args(spec),
                        "env": redis_env(spec),
                        "ports": [{"name": "redis", "container_port": q.port}],
                        "resources": {"requests": {"cpu": f"{sizing.REDIS_CPU_MILLICORES}m",
                                                   "memory": REDIS_MEMORY},
                                      "limits": {"memory": REDIS_MEMORY}},
                        "readiness_probe": {"exec": {"command": [
                            "redis-cli", "-p", str(q.port), "ping"]}, "period_seconds": 5},
                        "liveness_probe": {"tcp_socket": {"port": "redis"}, "period_seconds": 10},
                        "volume_mounts": [{"name": "data", "mount_path": "/data"}],
                        "security_context": naming.container_security_context(read_only_root=True),
                    }],
                }},
                "volume_claim_templates": [{
                    "metadata": {"name": "data"},
                    "spec": {"access_modes": ["ReadWriteOnce"],
                             "storage_class_name": args.storage_class,
                             "resources": {"requests": {"storage": f"{REDIS_DATA_GIB}Gi"}}},
                }],
            },
            opts=child(self),
        )
        self.register_outputs({"address": self.address})
