"""Spec rule _shared_gpu_budget: pods that may share one GPU must fit it together, and each
model its own gpu_memory_utilization of it (capacity calculator)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from contract.spec_loader import SpecError, parse_spec

SERVER: dict[str, Any] = {
    "model": {"name": "mineru-vlm", "source": "opendatalab/MinerU2.5-2509-1.2B",
              "catalog_name": "MinerU2.5-2509-1.2B", "size_gib": 2.5, "vision": True},
    "gpu_memory_utilization": 0.45, "max_model_len": 16384, "max_num_seqs": 64,
    "startup_budget_s": 600,
}


def server(name: str, **fields: Any) -> dict[str, Any]:
    out = copy.deepcopy(SERVER)
    out["name"] = name
    out["model"]["name"] = name
    out.update(fields)
    return out


def raw_spec(servers: list[dict[str, Any]], sharing: str = "time-slicing", slices: int = 2,
             mode: str = "split", **pool: Any) -> dict[str, Any]:
    return {
        "stack": "test", "target": "kubernetes", "namespace": "splitstack-test",
        "deployment_mode": mode,
        "inference_servers": servers,
        "worker_pool": {"replicas": 1, "max_replicas": 2, "concurrency_per_worker": 16,
                        "server": servers[0]["name"]},
        "gpu_node_pool": {"cloud": "existing", "instance_type": "byo", "accelerator": "nvidia-l40s",
                          "gpu_memory_gib": 48, "node_count": 1, "gpu_sharing": sharing,
                          "slices_per_gpu": slices, **pool},
    }


def problems(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_spec(raw)
    return info.value.problems


def test_two_servers_at_092_cannot_share_one_gpu():
    raw = raw_spec([server("a", gpu_memory_utilization=0.92),
                    server("b", gpu_memory_utilization=0.92)])
    assert problems(raw) == [
        "inference_servers[0].gpu_memory_utilization: gpu_node_pool.gpu_sharing='time-slicing' "
        "with slices_per_gpu=2 lets Kubernetes put 2 of these pods on one nvidia-l40s: "
        "inference_servers[0] 'a' 0.92, inference_servers[1] 'b' 0.92 add up to 1.84 of the GPU "
        "> 1 (vLLM's gpu_memory_utilization is a fraction of the whole GPU, not of a slice); "
        "lower gpu_memory_utilization so any 2 add up to at most 1 (e.g. 0.5 each), lower "
        "slices_per_gpu, or set gpu_sharing to 'none'"]


def test_fractions_that_add_up_to_one_gpu_may_share_it():
    spec = parse_spec(raw_spec([server("a", gpu_memory_utilization=0.45),
                                server("b", gpu_memory_utilization=0.5)]))
    assert spec.gpu_node_pool.slices_per_gpu == 2


def test_without_sharing_each_server_has_its_own_gpu():
    raw = raw_spec([server("a", gpu_memory_utilization=0.92),
                    server("b", gpu_memory_utilization=0.92)], sharing="none", slices=1,
                   gpus_per_node=2)
    assert len(parse_spec(raw).inference_servers) == 2


def test_the_largest_fractions_are_blamed_whatever_the_spec_order():
    # The scheduler may put any 2 pods together: 0.3 + 0.3 fits, but 0.6 + 0.6 does not.
    raw = raw_spec([server("small", gpu_memory_utilization=0.3),
                    server("big", gpu_memory_utilization=0.6, replicas=2),
                    server("small2", gpu_memory_utilization=0.3)], gpus_per_node=2)
    [problem] = problems(raw)
    assert problem.startswith(
        "inference_servers[1].gpu_memory_utilization: gpu_node_pool.gpu_sharing='time-slicing' "
        "with slices_per_gpu=2 lets Kubernetes put 2 of these pods on one nvidia-l40s: "
        "inference_servers[1] 'big' 0.6, inference_servers[1] 'big' 0.6 add up to 1.20")


def test_replicas_of_one_server_share_too():
    ok = raw_spec([server("a", gpu_memory_utilization=0.3, replicas=3)], slices=3)
    assert parse_spec(ok).inference_servers[0].replicas == 3
    bad = raw_spec([server("a", gpu_memory_utilization=0.4, replicas=3)], slices=3)
    [problem] = problems(bad)
    assert "put 3 of these pods on one nvidia-l40s" in problem
    assert "add up to 1.20 of the GPU > 1" in problem and "(e.g. 0.33 each)" in problem


def test_sim_servers_hold_no_gpu_memory():
    raw = raw_spec([server("a", gpu_memory_utilization=0.92),
                    server("b", gpu_memory_utilization=0.92, engine="sim")])
    assert parse_spec(raw).inference_servers[1].engine.value == "sim"


def test_monolithic_workers_each_load_the_model():
    raw = raw_spec([server("a", gpu_memory_utilization=0.6)], mode="monolithic")
    [problem] = problems(raw)
    assert problem.startswith("inference_servers[0].gpu_memory_utilization: ")
    assert ("worker_pool (monolithic) 0.6, worker_pool (monolithic) 0.6 add up to 1.20"
            in problem)


def test_each_model_must_fit_its_own_fraction():
    # Qwen2.5-VL-7B's bf16 weights alone are ~16 GiB: 0.3 of a 48 GB L40S is too little.
    qwen = server("qwen", gpu_memory_utilization=0.3, max_model_len=8192)
    qwen["model"].update(source="Qwen/Qwen2.5-VL-7B-Instruct",
                         catalog_name="Qwen2.5-VL-7B-Instruct", size_gib=16.6)
    raw = raw_spec([server("a", gpu_memory_utilization=0.45), qwen])
    [problem] = problems(raw)
    assert problem.startswith(
        "inference_servers[1].gpu_memory_utilization: on a nvidia-l40s shared 2 ways, 'qwen' "
        "gets gpu_memory_utilization 0.3 of it and its model must fit there: "
        "Qwen2.5-VL-7B-Instruct does not fit 1x")
