"""OutputStore: a ReadWriteMany PVC every worker mounts (kind=directory), on the cluster's shared
StorageClass (EFS, Filestore, Azure Files or the one cluster.shared_storage_class names)."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from contract import naming
from contract.outputs import OUTPUTS_CLAIM, store_root
from contract.spec import Spec
from infra.components.base import child, metadata
from infra.components.inference_server import SKIP_AWAIT


@dataclass(frozen=True)
class OutputStoreArgs:
    spec: Spec
    storage_class: str | None = None  # ReadWriteMany class
    storage_min_gib: int = 1  # smallest volume that class provisions (Filestore: 1 TiB)
    expandable: bool = True  # False: the class cannot grow a claim (EFS: elastic, size nominal)


def claim_size_gib(args: OutputStoreArgs) -> int:
    return max(args.spec.output_store.size_gib, args.storage_min_gib)


class OutputStoreComponent(pulumi.ComponentResource):
    def __init__(self, name: str, args: OutputStoreArgs,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("splitstack:infra:OutputStore", name, None, opts)
        store = args.spec.output_store
        self.claim_name: str | None = None
        if store.kind == "s3":
            # No volume: the workers write to the bucket (which must exist: the program does
            # not create it, see docs/infra.md), staging in an emptyDir of their own.
            self.location = pulumi.Output.from_input(store_root(args.spec))
        else:
            self.claim_name = OUTPUTS_CLAIM
            # Many workers on many nodes write here: it needs a ReadWriteMany storage class.
            self.claim = k8s.core.v1.PersistentVolumeClaim(
                name,
                metadata=metadata(OUTPUTS_CLAIM, args.spec.namespace,
                                  naming.labels("output-store", OUTPUTS_CLAIM),
                                  annotations=dict(SKIP_AWAIT)),
                spec={"access_modes": ["ReadWriteMany"],
                      "storage_class_name": args.storage_class,
                      "resources": {"requests": {"storage": f"{claim_size_gib(args)}Gi"}}},
                # A claim can only grow, and only where its class expands volumes: on a class
                # that cannot (EFS, where the size means nothing) a new size_gib would make
                # `pulumi up` fail on the API server's refusal, so the size is left alone.
                opts=child(self, ignore_changes=[] if args.expandable
                           else ["spec.resources.requests.storage"]),
            )
            self.location = pulumi.Output.from_input(store_root(args.spec))
        self.register_outputs({"location": self.location})
