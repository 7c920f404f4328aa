"""Every cloud the spec accepts has a complete profile in contract/clusters.yaml, and nothing
falls through to another cloud's numbers: a cloud without a row is an error naming the file."""

from __future__ import annotations

import importlib.util

import pytest

from contract import clusters
from contract.clusters import Instance
from contract.enums import Cloud

CLOUDS = [c.value for c in Cloud]


@pytest.mark.parametrize("cloud", CLOUDS)
def test_every_cloud_has_a_complete_profile(cloud):
    p = clusters.profile(cloud)
    assert clusters.prerequisites(cloud)
    assert clusters.daemonset_requests(cloud)  # type: ignore[arg-type]
    if cloud not in clusters.MANAGED_CLOUDS:
        assert p.cpu_instance is None and p.reservation_formula is None and p.gpu_stack == "declared"
        return
    # A managed cloud: its CPU machine is in its instance table, with reservations by a named
    # formula; storage classes of both kinds; Kubernetes versions with their support windows;
    # and a program module that creates it.
    cpu = clusters.instance(cloud, p.cpu_instance or "")
    assert cpu is not None and cpu.gpus == 0
    assert p.reservation_formula is not None
    reserved = clusters.reserved(cpu)
    assert 0 < reserved.cpu_m < cpu.vcpu * 1000 and 0 < reserved.memory_mib < cpu.memory_gib * 1024
    assert any(i.gpus for i in clusters.instances(cloud).values())
    assert set(clusters.storage(cloud)) == {"block", "shared"}
    assert clusters.standard_support_ends(cloud)
    assert importlib.util.find_spec(f"infra.components.clouds.{cloud}") is not None


def test_no_cloud_falls_through_to_another_clouds_numbers():
    stranger = Instance(cloud="nimbus", name="n1", vcpu=8, memory_gib=32, gpus=0, source="test")
    with pytest.raises(KeyError, match="no profile for cloud 'nimbus'"):
        clusters.reserved(stranger)
    with pytest.raises(KeyError, match="contract/clusters.yaml"):
        clusters.standard_support_ends("nimbus")
    with pytest.raises(KeyError, match="contract/clusters.yaml"):
        clusters.prerequisites("nimbus")


def test_profiles_drive_gpu_setup():
    assert clusters.profile("gke").taints_gpu_nodes_itself
    assert clusters.profile("gke").gpu_stack == "cloud"
    assert clusters.profile("eks").driver_on_node_image and not clusters.profile("aks").driver_on_node_image
