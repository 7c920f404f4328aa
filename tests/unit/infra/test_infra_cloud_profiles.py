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
    # Zone rules are stated for every cloud, with where they come from (or why there are none).
    assert p.control_plane_excluded_zones.source
    if cloud not in clusters.MANAGED_CLOUDS:
        assert p.cpu_instance is None and p.reservation_formula is None and p.gpu_stack == "declared"
        assert p.zone_pattern is None and not p.control_plane_excluded_zones.zone_ids
        return
    # A managed cloud's zone names: its own example matches its pattern.
    assert p.zone_pattern and p.zone_matches(p.example_zone("r1"), "r1")
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


def test_zone_rules_come_from_the_profile():
    """EKS's refused control-plane zone IDs live in its profile; GKE and AKS state none."""
    assert clusters.excluded_zone_ids("eks", "us-east-1") == ["use1-az3"]
    assert clusters.excluded_zone_ids("eks", "eu-west-1") == []
    assert clusters.excluded_zone_ids("gke", "us-east1") == []
    assert clusters.excluded_zone_ids("aks", "eastus") == []
    with pytest.raises(KeyError, match="no profile for cloud 'nimbus'"):
        clusters.excluded_zone_ids("nimbus", "r1")
    assert "control_plane_excluded_zone_ids" not in clusters._data()  # no top-level cloud table


@pytest.mark.parametrize(("cloud", "region", "good", "bad"), [
    ("eks", "us-east-1", "us-east-1a", "us-east-2a"),
    ("gke", "us-central1", "us-central1-a", "us-east1-b"),
    ("aks", "eastus", "2", "eastus-1"),
])
def test_zone_names_checked_by_the_profile(cloud, region, good, bad):
    p = clusters.profile(cloud)
    assert p.zone_matches(good, region) and not p.zone_matches(bad, region)


def test_managed_clouds_are_the_profiles_with_a_cpu_machine():
    assert set(clusters.MANAGED_CLOUDS) == {c.value for c in Cloud} - {"existing"}


@pytest.mark.parametrize(("cloud", "location", "zonal"), [
    ("gke", "us-central1-a", True), ("gke", "us-central1", False),
    ("eks", "us-east-1", False), ("aks", "eastus", False), ("existing", "", False),
])
def test_a_zonal_location_is_the_profiles_rule(cloud, location, zonal):
    """GKE's zonal clusters (a location that is one zone) come from its profile, not a branch."""
    assert clusters.profile(cloud).zonal_location(location) is zonal
