"""EKS: a cluster at the spec's Kubernetes version with a CPU managed node group, a GPU managed
node group on the NVIDIA AMI, and the storage a new EKS cluster lacks: the EBS CSI add-on (no
StorageClass works without it) and, when something needs ReadWriteMany, EFS with its CSI add-on.
Both drivers get their AWS credentials from EKS Pod Identity."""

from __future__ import annotations

import json

import pulumi

from contract import clusters
from contract.cluster_fit import storage_needs
from contract.cluster_placement import cpu_node_count
from contract.naming import GPU_POOL_LABEL
from contract.spec import Spec
from infra.components.clouds import (
    CPU_INSTANCE,
    GPU_DISK_GIB,
    ClusterOut,
    missing_sdk,
    require_region,
    taint_effect_enum,
)

NODE_POLICIES = (
    "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
    "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy",
    "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly",
)
# CSI drivers as EKS add-ons, each with its controller's service account and AWS managed policy:
# https://docs.aws.amazon.com/eks/latest/userguide/ebs-csi.html and .../efs-csi.html
EBS_CSI = ("aws-ebs-csi-driver", "ebs-csi-controller-sa",
           "arn:aws:iam::aws:policy/service-role/AmazonEBSCSIDriverPolicy")
EFS_CSI = ("aws-efs-csi-driver", "efs-csi-controller-sa",
           "arn:aws:iam::aws:policy/service-role/AmazonEFSCSIDriverPolicy")
# EKS Pod Identity: the agent add-on, and roles that trust pods.eks.amazonaws.com
# (https://docs.aws.amazon.com/eks/latest/userguide/pod-id-role.html).
POD_IDENTITY_AGENT = "eks-pod-identity-agent"
POD_IDENTITY_TRUST = json.dumps({"Version": "2012-10-17", "Statement": [{
    "Effect": "Allow", "Principal": {"Service": "pods.eks.amazonaws.com"},
    "Action": ["sts:AssumeRole", "sts:TagSession"]}]})
NFS_PORT = 2049


def control_plane_zones(spec_zones: list[str], supported: list[str], region: str) -> list[str]:
    """Zones of the control plane's subnets: gpu_node_pool.zones when they are two or more (EKS
    needs two), else every zone of the region EKS supports. A listed zone EKS refuses is an
    error naming it, not an UnsupportedAvailabilityZoneException minutes into `pulumi up`."""
    refused = [z for z in spec_zones if z not in supported]
    if refused:
        raise ValueError(
            f"gpu_node_pool.zones: {', '.join(refused)} not among the zones of {region} where EKS "
            f"accepts a cluster ({', '.join(supported) or 'none found'}; EKS refuses zone IDs "
            f"{', '.join(clusters.excluded_zone_ids('eks', region)) or '-'}, whose names differ by "
            "account: `aws ec2 describe-availability-zones`); list zones from the supported ones")
    if len(spec_zones) >= 2:
        return list(spec_zones)
    if len(supported) < 2:
        raise ValueError(f"gpu_node_pool.region {region}: EKS needs two zones for a cluster and "
                         f"found {supported}; choose another region")
    return list(supported)


def cluster_name(spec: Spec) -> str:
    """The EKS cluster's physical name, fixed so that the add-ons can name it before it exists."""
    return f"splitstack-{spec.stack}"


def create(parent: pulumi.Resource, name: str, spec: Spec) -> ClusterOut:
    try:
        import pulumi_aws as aws
        import pulumi_eks as eks
    except ImportError:
        raise missing_sdk("eks", "pulumi-eks and pulumi-aws") from None
    pool = spec.gpu_node_pool
    assert pool is not None
    require_region(pool)
    opts = pulumi.ResourceOptions(parent=parent)
    # The default VPC's subnets (one per availability zone) in the zones EKS accepts for the
    # control plane (the account's names of the zone IDs EKS refuses are left out), and those
    # of gpu_node_pool.zones for the node groups.
    vpc = aws.ec2.get_vpc(default=True)
    supported = aws.get_availability_zones(
        state="available", region=pool.region,
        exclude_zone_ids=clusters.excluded_zone_ids("eks", pool.region)).names
    zones = control_plane_zones(list(pool.zones), list(supported), pool.region)

    def zone_subnets(names: list[str]) -> list[str]:
        return aws.ec2.get_subnets(filters=[
            {"name": "vpc-id", "values": [vpc.id]},
            {"name": "availability-zone", "values": names}]).ids
    subnets = zone_subnets(zones)
    pool_subnets = zone_subnets(list(pool.zones)) if pool.zones else subnets
    role = aws.iam.Role(
        f"{name}-node-role",
        assume_role_policy=json.dumps({"Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"},
            "Action": "sts:AssumeRole"}]}),
        opts=opts,
    )
    attachments = [
        aws.iam.RolePolicyAttachment(f"{name}-node-policy-{i}", role=role.name, policy_arn=arn,
                                     opts=opts)
        for i, arn in enumerate(NODE_POLICIES)
    ]
    cluster = eks.Cluster(
        f"{name}-cluster",
        name=cluster_name(spec),
        # Pinned: the chart pins and feature floors are checked against it (contract/clusters.yaml);
        # left unset, EKS creates its current default and the checks mean nothing.
        version=spec.cluster.kubernetes_version,
        vpc_id=vpc.id,
        subnet_ids=subnets,
        skip_default_node_group=True,
        instance_roles=[role],
        authentication_mode=eks.AuthenticationMode.API,
        # The VPC CNI enforces NetworkPolicy only when asked to.
        vpc_cni_options=eks.VpcCniOptionsArgs(enable_network_policy=True),
        opts=pulumi.ResourceOptions(parent=parent, depends_on=attachments),
    )
    cpu_nodes = cpu_node_count(spec)
    cpu = eks.ManagedNodeGroup(
        f"{name}-cpu",
        cluster=cluster, node_role=role, instance_types=[CPU_INSTANCE["eks"]],
        ami_type=eks.AmiType.AL2023_X86_64_STANDARD,
        subnet_ids=pool_subnets,
        scaling_config={"desired_size": cpu_nodes, "min_size": cpu_nodes,
                        "max_size": cpu_nodes + 2},
        opts=opts,
    )
    gpu = eks.ManagedNodeGroup(
        f"{name}-gpu",
        cluster=cluster, node_role=role, instance_types=[pool.instance_type],
        # The NVIDIA AMI ships the driver and container toolkit; the device plugin comes from
        # the GPU operator (PlatformAddonsComponent) with driver and toolkit disabled.
        ami_type=eks.AmiType.AL2023_X86_64_NVIDIA,
        disk_size=GPU_DISK_GIB,
        # In gpu_node_pool.zones only: a ReadWriteOnce model cache is a zonal EBS volume, and a
        # replacement node in another zone could never attach it.
        subnet_ids=pool_subnets,
        scaling_config={"desired_size": pool.node_count, "min_size": pool.node_count,
                        "max_size": pool.node_count},
        labels={**pool.labels, GPU_POOL_LABEL: "true"},
        taints=[{"key": t.key, "value": t.value, "effect": taint_effect_enum(t.effect)}
                for t in pool.taints],
        opts=opts,
    )
    addon_opts = pulumi.ResourceOptions(parent=parent, depends_on=[cluster])
    agent = aws.eks.Addon(f"{name}-pod-identity-agent", cluster_name=cluster_name(spec),
                          addon_name=POD_IDENTITY_AGENT, opts=addon_opts)

    def csi_addon(driver: tuple[str, str, str], short: str) -> pulumi.Resource:
        addon, service_account, policy = driver
        csi_role = aws.iam.Role(f"{name}-{short}-csi-role", assume_role_policy=POD_IDENTITY_TRUST,
                                opts=opts)
        attach = aws.iam.RolePolicyAttachment(f"{name}-{short}-csi-policy", role=csi_role.name,
                                              policy_arn=policy, opts=opts)
        return aws.eks.Addon(
            f"{name}-{short}-csi", cluster_name=cluster_name(spec), addon_name=addon,
            pod_identity_associations=[{"role_arn": csi_role.arn,
                                        "service_account": service_account}],
            opts=pulumi.ResourceOptions(parent=parent, depends_on=[cluster, agent, attach, cpu]))

    storage_ready = [csi_addon(EBS_CSI, "ebs")]
    resources = [role, *attachments, cluster, cpu, gpu, agent, *storage_ready]
    file_system_id = None
    if storage_needs(spec)["shared"] and spec.cluster.shared_storage_class is None:
        # EFS: encrypted, reachable on NFS from the VPC, a mount target in each control-plane
        # subnet (one per zone).
        efs = aws.efs.FileSystem(f"{name}-efs", encrypted=True,
                                 tags={"Name": f"{cluster_name(spec)}-shared"}, opts=opts)
        sg = aws.ec2.SecurityGroup(
            f"{name}-efs-sg", vpc_id=vpc.id, description="NFS from the cluster VPC to EFS",
            ingress=[{"protocol": "tcp", "from_port": NFS_PORT, "to_port": NFS_PORT,
                      "cidr_blocks": [vpc.cidr_block]}],
            opts=opts)
        targets = [aws.efs.MountTarget(f"{name}-efs-mount-{i}", file_system_id=efs.id,
                                       subnet_id=subnet, security_groups=[sg.id], opts=opts)
                   for i, subnet in enumerate(subnets)]
        storage_ready += [csi_addon(EFS_CSI, "efs"), *targets]
        resources += [efs, sg, *storage_ready[1:]]
        file_system_id = efs.id
    return ClusterOut(kubeconfig=pulumi.Output.secret(cluster.kubeconfig_json),
                      name=pulumi.Output.from_input(cluster_name(spec)),
                      resources=resources, storage_ready=storage_ready,
                      shared_file_system_id=file_system_id)
