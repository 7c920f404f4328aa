"""check_server_fits: the hook contract/spec_rules.py calls for every inference server."""

from __future__ import annotations

import pytest

from contract import spec_loader
from contract.capacity import check_server_fits


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_shipped_stacks_fit(stack: str) -> None:
    spec = spec_loader.load_stack(stack)
    assert spec.inference_servers
    for server in spec.inference_servers:
        assert check_server_fits(server, spec.gpu_node_pool) is None, server.name


def _prod_server(**changes):
    spec = spec_loader.load_stack("prod")
    server = next(s for s in spec.inference_servers if s.name == "qwen-vl")
    return server.model_copy(update=changes), spec.gpu_node_pool


def test_context_too_long_for_the_gpu_is_rejected_with_the_fix() -> None:
    server, pool = _prod_server(max_model_len=128000, gpu_memory_utilization=0.25)
    problem = check_server_fits(server, pool)
    assert problem is not None
    assert problem.startswith("Qwen2.5-VL-7B-Instruct does not fit 1x nvidia-h100-80gb: one "
                              "sequence of max_model_len 128000 needs 6.84 GiB of KV cache")
    assert "lower max_model_len to at most" in problem


def test_tensor_parallel_beyond_the_node() -> None:
    server, pool = _prod_server(tensor_parallel_size=2)
    assert check_server_fits(server, pool) == (
        "tensor_parallel_size 2 needs 2 GPUs on one node but gpu_node_pool has gpus_per_node 1:"
        " raise gpus_per_node or lower tensor_parallel_size")


def test_unknown_catalog_name_and_uncatalogued_gpu() -> None:
    server, pool = _prod_server()
    bad = server.model_copy(update={"model": server.model.model_copy(
        update={"catalog_name": "Qwen9"})})
    assert check_server_fits(bad, pool).startswith("model.catalog_name: unknown model 'Qwen9'")
    # An accelerator outside the catalog falls back on the spec's gpu_memory_gib.
    small = pool.model_copy(update={"accelerator": "nvidia-t4", "gpu_memory_gib": 16})
    problem = check_server_fits(server, small)
    assert problem is not None and "nvidia-t4" in problem and "weights need" in problem
