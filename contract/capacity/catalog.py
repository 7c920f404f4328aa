"""Typed views of the capacity data files (models.yaml, gpus.yaml, vllm_memory.yaml).

The numbers live in YAML next to their sources; this module only parses and looks them up, so a
reviewer checks a constant in one place and the math in another (inference.py).
"""

from __future__ import annotations

import difflib
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field

from contract.models import Strict

DATA_DIR = Path(__file__).parent


class ModelSpec(Strict):
    """The config.json facts of one model that decide its memory footprint."""

    name: str = Field(description="Catalog name (the Hugging Face repo name without owner).")
    aliases: list[str] = Field(default_factory=list, description="Other accepted names.")
    architecture: str = Field(description="config.json model_type, e.g. qwen2_5_vl.")
    num_hidden_layers: int = Field(gt=0, description="Decoder layers (each holds K and V).")
    num_attention_heads: int = Field(gt=0, description="Query heads.")
    num_key_value_heads: int = Field(gt=0, description="KV heads (GQA); = query heads for MHA.")
    head_dim: int = Field(gt=0, description="Size of one attention head, elements.")
    hidden_size: int = Field(gt=0, description="Residual stream width, elements.")
    intermediate_size: int = Field(gt=0, description="MLP width, elements.")
    vocab_size: int = Field(gt=0, description="Vocabulary size, tokens.")
    tie_word_embeddings: bool = Field(description="lm_head shares the embedding matrix.")
    max_position_embeddings: int = Field(gt=0, description="Longest context the model takes.")
    dtype: str = Field(description="Checkpoint dtype (weights; KV with kv_cache_dtype auto).")
    params_total: int = Field(gt=0, description="Parameters of the whole checkpoint.")
    vision_params: int = Field(ge=0, description="Vision tower + projector parameters.")
    sources: list[str] = Field(min_length=1, description="Where each number came from.")

    @property
    def is_vision(self) -> bool:
        return self.vision_params > 0 or self.architecture in ("qwen2_vl", "qwen2_5_vl",
                                                               "deepseek_vl_v2")


class GpuSpec(Strict):
    name: str = Field(description="Catalog name (GKE accelerator style).")
    aliases: list[str] = Field(default_factory=list, description="Other accepted names.")
    nominal_gb: float = Field(gt=0, description="Marketing memory size, GB.")
    nvml_total_mib: int | None = Field(default=None, description="NVML/nvidia-smi total, MiB.")
    cuda_total_gib: float = Field(gt=0, description="Total CUDA reports (what vLLM uses), GiB.")
    source: str = Field(description="Where cuda_total_gib came from.")


class Constant(Strict):
    value: Any = Field(description="The constant.")
    source: str = Field(description="Why this value.")


class VllmMemory(Strict):
    block_size_tokens: Constant
    non_torch_gib: Constant
    cudagraph_gib: Constant
    activation_calibration: Constant
    vision_activation_gib: Constant
    default_max_num_batched_tokens: Constant
    dtype_bytes: Constant

    def bytes_of(self, dtype: str) -> float:
        table: dict[str, float] = self.dtype_bytes.value
        if dtype not in table:
            raise ValueError(
                f"dtype {dtype!r} is unknown: use one of {', '.join(sorted(table))}"
            )
        return table[dtype]


class CatalogError(ValueError):
    """A name that is not in the catalog (permanent: fix the input)."""


def _load(name: str) -> dict[str, Any]:
    with open(DATA_DIR / name, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


@lru_cache(maxsize=1)
def models() -> dict[str, ModelSpec]:
    raw = _load("models.yaml")["models"]
    return {name: ModelSpec(name=name, **fields) for name, fields in raw.items()}


@lru_cache(maxsize=1)
def gpus() -> dict[str, GpuSpec]:
    raw = _load("gpus.yaml")["gpus"]
    return {name: GpuSpec(name=name, **fields) for name, fields in raw.items()}


@lru_cache(maxsize=1)
def vllm_memory() -> VllmMemory:
    return VllmMemory(**_load("vllm_memory.yaml"))


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-")


def _lookup(kind: str, name: str, table: dict[str, Any]) -> Any:
    wanted = _norm(name)
    spellings: dict[str, str] = {}  # every accepted spelling -> its catalog key
    for key, spec in table.items():
        for spelling in (key, *spec.aliases):
            spellings[_norm(spelling)] = key
    if wanted in spellings:
        return table[spellings[wanted]]
    near = [s for s in spellings if wanted and wanted in s]  # a prefix or part of a name first
    near += [s for s in difflib.get_close_matches(wanted, list(spellings), n=5, cutoff=0.5) if s not in near]
    keys = list(dict.fromkeys(spellings[s] for s in near))[:3]
    hint = f"did you mean {' or '.join(repr(k) for k in keys)}? " if keys else ""
    fix = ("add it there with its sources, or pass a config.json with --model-config" if kind == "model"
           else "add it there with its source, or pass --gpu-memory-gib")
    raise CatalogError(f"unknown {kind} {name!r}: {hint}the capacity catalog knows {', '.join(sorted(table))} "
                       f"(contract/capacity/{kind}s.yaml); {fix}")


def find_model(name: str) -> ModelSpec:
    return _lookup("model", name, models())


def find_gpu(name: str) -> GpuSpec:
    return _lookup("gpu", name, gpus())
