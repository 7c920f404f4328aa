"""The deployment spec's fit check (contract/spec_rules.py calls check_server_fits).

Duck-typed on the spec's InferenceServer and GpuNodePool: the spec model runs this check in its
own validator, so this module cannot import the model.
"""

from __future__ import annotations

from typing import Any

from contract.capacity.catalog import CatalogError, find_gpu, find_model
from contract.capacity.inference import plan


def check_server_fits(server: Any, pool: Any) -> str | None:
    """None when the server's model fits its GPUs; else the problem and the fix, in words."""
    name = server.model.catalog_name
    if name is None:
        return None
    try:
        model = find_model(name)
    except CatalogError as exc:
        return f"model.catalog_name: {exc}"
    tp = server.tensor_parallel_size
    if tp > pool.gpus_per_node:
        return (
            f"tensor_parallel_size {tp} needs {tp} GPUs on one node but gpu_node_pool has "
            f"gpus_per_node {pool.gpus_per_node}: raise gpus_per_node or lower "
            f"tensor_parallel_size"
        )
    try:
        gpu = find_gpu(pool.accelerator)
        total, gpu_name = gpu.cuda_total_gib, gpu.name
    except CatalogError:
        # An accelerator outside the catalog: trust the spec's own memory figure.
        total, gpu_name = pool.gpu_memory_gib, pool.accelerator
    try:
        report = plan(
            model, gpu_name=gpu_name, gpu_total_gib=total,
            gpu_memory_utilization=server.gpu_memory_utilization,
            max_model_len=server.max_model_len, tensor_parallel_size=tp,
            max_num_batched_tokens=server.max_num_batched_tokens,
        )
    except ValueError as exc:
        return str(exc)
    if report.fits:
        return None
    return f"{model.name} does not fit {tp}x {gpu_name}: {report.reason}"
