"""OutputStore: a PVC shared by the workers (kind=directory) or a bucket (kind=s3, no object)."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from contract import naming
from contract.spec import Spec
from infra.components.base import child, metadata

OUTPUTS_CLAIM = "splitstack-outputs"


@dataclass(frozen=True)
class OutputStoreArgs:
    spec: Spec


class OutputStoreComponent(pulumi.ComponentResource):
    def __init__(self, name: str, args: OutputStoreArgs,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("splitstack:infra:OutputStore", name, None, opts)
        store = args.spec.output_store
        self.claim_name: str | None = None
        if store.kind == "s3":
            if not store.bucket:
                raise ValueError(
                    "output_store.bucket: empty with kind 's3'; name the bucket the workers "
                    "write to, or use kind 'directory'")
            self.location = pulumi.Output.from_input(f"s3://{store.bucket}")
        else:
            self.claim_name = OUTPUTS_CLAIM
            # Many workers on many nodes write here: it needs a ReadWriteMany storage class.
            self.claim = k8s.core.v1.PersistentVolumeClaim(
                name,
                metadata=metadata(OUTPUTS_CLAIM, args.spec.namespace,
                                  naming.labels("output-store", OUTPUTS_CLAIM)),
                spec={"access_modes": ["ReadWriteMany"],
                      "resources": {"requests": {"storage": f"{store.size_gib}Gi"}}},
                opts=child(self),
            )
            self.location = pulumi.Output.from_input(f"pvc://{OUTPUTS_CLAIM}")
        self.register_outputs({"location": self.location})
