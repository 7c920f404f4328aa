"""Queue: Redis as an in-cluster StatefulSet (AOF on a PVC), or nothing for an external URL."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from contract import naming, sizing
from contract.spec import Spec
from infra.components.base import child, metadata

REDIS_DATA_GIB = 5  # jobs are small references to PDFs, not the PDFs themselves
REDIS_MEMORY = "1Gi"


@dataclass(frozen=True)
class QueueArgs:
    spec: Spec


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
                "selector": {"match_labels": sel},
                "template": {"metadata": {"labels": sel}, "spec": {
                    "enable_service_links": False,
                    "containers": [{
                        "name": "redis",
                        "image": sizing.REDIS_IMAGE,
                        # AOF so queued jobs and consumer-group state survive a restart.
                        "args": ["--port", str(q.port), "--appendonly", "yes",
                                 "--maxmemory-policy", "noeviction"],
                        "ports": [{"name": "redis", "container_port": q.port}],
                        "resources": {"requests": {"cpu": "100m", "memory": REDIS_MEMORY},
                                      "limits": {"memory": REDIS_MEMORY}},
                        "readiness_probe": {"exec": {"command": [
                            "redis-cli", "-p", str(q.port), "ping"]}, "period_seconds": 5},
                        "liveness_probe": {"tcp_socket": {"port": "redis"}, "period_seconds": 10},
                        "volume_mounts": [{"name": "data", "mount_path": "/data"}],
                        "security_context": {"allow_privilege_escalation": False},
                    }],
                }},
                "volume_claim_templates": [{
                    "metadata": {"name": "data"},
                    "spec": {"access_modes": ["ReadWriteOnce"],
                             "resources": {"requests": {"storage": f"{REDIS_DATA_GIB}Gi"}}},
                }],
            },
            opts=child(self),
        )
        self.register_outputs({"address": self.address})
