"""EKS: a cluster with a CPU managed node group and a GPU managed node group on the NVIDIA AMI."""

from __future__ import annotations

import json

import pulumi

from contract.naming import GPU_POOL_LABEL
from contract.spec import Spec
from infra.components.clouds import (
    CPU_INSTANCE,
    GPU_DISK_GIB,
    ClusterOut,
    cpu_node_count,
    missing_sdk,
    require_region,
    taint_effect_enum,
)

NODE_POLICIES = (
    "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
    "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy",
    "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly",
)


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
        skip_default_node_group=True,
        instance_roles=[role],
        authentication_mode=eks.AuthenticationMode.API,
        # The VPC CNI enforces NetworkPolicy only when asked to.
        vpc_cni_options=eks.VpcCniOptionsArgs(enable_network_policy=True),
        opts=pulumi.ResourceOptions(parent=parent, depends_on=attachments),
    )
    w = spec.worker_pool
    cpu_nodes = cpu_node_count(w.cpu_millicores, w.max_replicas or w.replicas)
    cpu = eks.ManagedNodeGroup(
        f"{name}-cpu",
        cluster=cluster, node_role=role, instance_types=[CPU_INSTANCE["eks"]],
        ami_type=eks.AmiType.AL2023_X86_64_STANDARD,
        scaling_config={"desired_size": cpu_nodes, "min_size": 1, "max_size": cpu_nodes + 2},
        opts=opts,
    )
    gpu = eks.ManagedNodeGroup(
        f"{name}-gpu",
        cluster=cluster, node_role=role, instance_types=[pool.instance_type],
        # The NVIDIA AMI ships the driver and container toolkit; the device plugin comes from
        # the GPU operator (GpuOperatorComponent) with driver and toolkit disabled.
        ami_type=eks.AmiType.AL2023_X86_64_NVIDIA,
        disk_size=GPU_DISK_GIB,
        scaling_config={"desired_size": pool.node_count, "min_size": pool.node_count,
                        "max_size": pool.node_count},
        labels={**pool.labels, GPU_POOL_LABEL: "true"},
        taints=[{"key": t.key, "value": t.value, "effect": taint_effect_enum(t.effect)}
                for t in pool.taints],
        opts=opts,
    )
    return ClusterOut(kubeconfig=pulumi.Output.secret(cluster.kubeconfig_json),
                      name=pulumi.Output.from_input(f"{name}-cluster"),
                      resources=[role, *attachments, cluster, cpu, gpu])
