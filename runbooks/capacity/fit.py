"""`runbook capacity-plan fit`: a model (from the catalog or a Hugging Face config.json) on a GPU
(from the catalog or by its memory), planned by the contract's capacity math."""

from __future__ import annotations

import json
from pathlib import Path

from contract.capacity import CatalogError, FitReport, Overrides, find_gpu, find_model, plan
from runbooks.capacity.params import spec_from_config


class FitInputError(ValueError):
    """The command's inputs name no model or GPU, or a file that cannot be read."""


def fit_report(*, model: str | None, model_config: Path | None, params_total: int | None, gpu: str,
               gpu_memory_gib: float | None, gpu_memory_utilization: float, max_model_len: int,
               tensor_parallel_size: int, max_num_batched_tokens: int | None, kv_cache_dtype: str,
               activation_gib: float | None) -> FitReport:
    """The fit report; FitInputError (or CatalogError) names the input that is missing or wrong."""
    try:
        if model_config is not None:
            config = json.loads(model_config.read_text(encoding="utf-8"))
            spec = spec_from_config(model or model_config.parent.name, config,
                                    params_total=params_total, source=str(model_config))
        elif model:
            spec = find_model(model)
        else:
            raise FitInputError("give --model NAME (see `runbook capacity-plan matrix`) or --model-config PATH")
        if gpu_memory_gib is not None:
            total, gpu_name = gpu_memory_gib, gpu or f"{gpu_memory_gib:g} GiB GPU"
        elif gpu:
            g = find_gpu(gpu)
            total, gpu_name = g.cuda_total_gib, g.name
        else:
            raise FitInputError("give --gpu NAME (e.g. nvidia-h100-80gb) or --gpu-memory-gib")
        return plan(spec, gpu_name=gpu_name, gpu_total_gib=total, gpu_memory_utilization=gpu_memory_utilization,
                    max_model_len=max_model_len, tensor_parallel_size=tensor_parallel_size,
                    max_num_batched_tokens=max_num_batched_tokens, kv_cache_dtype=kv_cache_dtype,
                    overrides=Overrides(activation_gib=activation_gib))
    except KeyError as exc:
        raise FitInputError(f"{model_config}: config.json lacks {exc}") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise FitInputError(f"{model_config}: {exc}") from None


__all__ = ["CatalogError", "FitInputError", "fit_report"]
