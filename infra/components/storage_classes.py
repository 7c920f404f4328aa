"""StorageClasses the cloud does not bring: on EKS, gp3 (EBS CSI, ReadWriteOnce) and efs (EFS
access points, ReadWriteMany). GKE and AKS have theirs built in (contract/clusters.yaml), and
an existing cluster names its own in the spec (cluster.storage_class, shared_storage_class)."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from contract import naming
from contract.cluster_fit import storage_class, storage_needs
from contract.clusters import StorageClassFact
from contract.spec import Spec
from infra.components.base import child

# gp3 volumes, encrypted, bound where the pod lands (a zonal EBS volume must be created in the
# zone of the node that mounts it): https://github.com/kubernetes-sigs/aws-ebs-csi-driver/blob/master/docs/parameters.md
EBS_PARAMETERS = {"type": "gp3", "encrypted": "true"}
WAIT_FOR_CONSUMER = "WaitForFirstConsumer"


def efs_parameters(file_system_id: pulumi.Input[str]) -> dict:
    """One EFS access point per volume, owned by the pods' user: every write lands as APP_UID
    whatever the client's uid (https://github.com/kubernetes-sigs/aws-efs-csi-driver/blob/master/docs/README.md#storage-class-parameters-for-dynamic-provisioning)."""
    return {"provisioningMode": "efs-ap", "fileSystemId": file_system_id,
            "directoryPerms": "700", "uid": str(naming.APP_UID), "gid": str(naming.APP_GID)}


@dataclass(frozen=True)
class StorageClassesArgs:
    spec: Spec
    shared_file_system_id: pulumi.Input[str] | None = None  # EKS: the EFS behind `efs`


class StorageClassesComponent(pulumi.ComponentResource):
    """``block`` / ``shared``: the class names PVCs use; ``classes``: the objects created here."""

    def __init__(self, name: str, args: StorageClassesArgs,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("splitstack:infra:StorageClasses", name, None, opts)
        spec = args.spec
        needs = storage_needs(spec)
        self.block = storage_class(spec, "block").name
        self.shared = storage_class(spec, "shared").name
        self.classes: list[k8s.storage.v1.StorageClass] = []
        for kind in ("block", "shared"):
            fact = storage_class(spec, kind).fact
            if not needs[kind] or fact is None or not fact.created_by_program:
                continue
            self.classes.append(self._create(name, kind, fact, args))
        self.register_outputs({"block": self.block, "shared": self.shared})

    def _create(self, name: str, kind: str, fact: StorageClassFact,
                args: StorageClassesArgs) -> k8s.storage.v1.StorageClass:
        if fact.provisioner == "efs.csi.aws.com":
            if args.shared_file_system_id is None:
                raise ValueError(f"StorageClass {fact.name!r} needs the EFS file system the EKS "
                                 "cluster component creates; none was passed")
            # EFS is elastic: a claim's size means nothing and the driver cannot expand one.
            params, binding, expand = (efs_parameters(args.shared_file_system_id), "Immediate",
                                       False)
        else:
            params, binding, expand = dict(EBS_PARAMETERS), WAIT_FOR_CONSUMER, True
        return k8s.storage.v1.StorageClass(
            f"{name}-{kind}",
            metadata={"name": fact.name, "labels": naming.labels("storage-class", fact.name)},
            provisioner=fact.provisioner,
            parameters=params,
            volume_binding_mode=binding,
            allow_volume_expansion=expand,
            reclaim_policy="Delete",
            opts=child(self),
        )
