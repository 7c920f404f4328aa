"""The local cluster's nodes are the fit model's nodes; its tools are found by the build script's
own digest; the command line refuses what cannot be shaped."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from contract.cluster_placement import cpu_pool, gpu_pool
from contract.spec_loader import load_stack, project_root
from splitstack.cli.main import app
from stack.cluster import tools
from stack.cluster.nodes import MANAGED_LABEL, POOL_LABEL, ShapeError, shaped_nodes
from stack.component import SetupError

ROOT = project_root(Path(__file__))


def by_name(stack: str) -> dict[str, dict]:
    return {n["metadata"]["name"]: n for n in shaped_nodes(load_stack(stack, ROOT))}


def test_dev_nodes_have_the_allocatable_the_fit_model_packs_into():
    spec = load_stack("dev", ROOT)
    nodes = by_name("dev")
    gpu, cpu = gpu_pool(spec), cpu_pool(spec)
    assert gpu is not None and cpu is not None
    assert len(nodes) == gpu.node_count + cpu.node_count
    node = nodes["gpu-0"]
    cap = gpu.nodes[0].capacity
    assert node["status"]["allocatable"]["cpu"] == f"{cap.cpu_m}m"
    assert node["status"]["allocatable"]["memory"] == f"{cap.memory_mib}Mi"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "1"
    assert node["status"]["capacity"]["cpu"] == "8000m"  # a g6e.2xlarge has 8 vCPUs
    assert node["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    labels = node["metadata"]["labels"]
    assert labels["splitstack.dev/gpu-pool"] == "true" and labels[POOL_LABEL] == "gpu"
    assert labels["node.kubernetes.io/instance-type"] == "g6e.2xlarge"
    assert labels[MANAGED_LABEL] == "kwok"
    assert labels["topology.kubernetes.io/zone"] == "us-east-1a"
    assert "nvidia.com/gpu" not in nodes["cpu-0"]["status"]["allocatable"]


def test_prod_gpu_nodes_carry_what_gke_puts_on_them():
    nodes = by_name("prod")
    gpus = [n for n in nodes.values() if n["metadata"]["labels"][POOL_LABEL] == "gpu"]
    assert len(gpus) == 2
    assert {n["metadata"]["labels"]["topology.kubernetes.io/zone"] for n in gpus} == {"us-central1-a", "us-central1-c"}
    for n in gpus:
        assert n["metadata"]["labels"]["cloud.google.com/gke-accelerator"] == "nvidia-h100-80gb"
        assert {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"} in n["spec"]["taints"]


def test_a_stack_on_an_existing_cluster_cannot_shape_nodes():
    with pytest.raises(ShapeError, match=r"gpu_node_pool.instance_type: instance type 'g6e.2xlarge' is not "
                                         r"in contract/clusters.yaml.*`splitstack cluster up --shape dev`"):
        shaped_nodes(load_stack("localk8s", ROOT))


def test_python_finds_the_directory_the_build_script_fills():
    out = subprocess.run(["bash", str(ROOT / "tools" / "build-go-tools.sh"), "--print-dir"],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert Path(out) == tools.cache_root() / tools.digest(ROOT)


def test_missing_tools_name_the_make_target(tmp_path, monkeypatch):
    monkeypatch.setenv(tools.CACHE_ENV, str(tmp_path))
    with pytest.raises(SetupError, match=r"build them with `make tools`"):
        tools.go_tools(ROOT)


@pytest.mark.parametrize(("shape", "message"), [
    ("localk8s", "is not in contract/clusters.yaml"),
    ("local", "has no gpu_node_pool"),
    ("nosuch", "nosuch"),
])
def test_cluster_up_refuses_a_shape_before_starting_anything(shape, message, tmp_path, monkeypatch):
    result = CliRunner().invoke(app, ["cluster", "up", "--shape", shape])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
