"""Inference capacity: does a model fit a GPU under vLLM, and how many tokens of KV cache remain.

The arithmetic mirrors vLLM's start-up memory profiling (see vllm_memory.yaml for the steps and
the published log lines they were checked against). Pure functions of a ModelSpec, a GPU memory
size and the serving knobs; no I/O beyond the catalog.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from contract.capacity.catalog import ModelSpec, find_gpu, find_model, vllm_memory
from contract.models import Strict

GIB = 1024**3


class Overrides(Strict):
    """Measured values that replace the calculator's allowances (e.g. from a vLLM start log)."""

    weights_gib: float | None = Field(default=None, ge=0, description="Logged weights, GiB/GPU.")
    activation_gib: float | None = Field(default=None, ge=0, description="Peak activation, GiB.")
    non_torch_gib: float | None = Field(default=None, ge=0, description="Non-torch memory, GiB.")
    cudagraph_gib: float | None = Field(default=None, ge=0, description="CUDA graphs, GiB.")


class FitReport(BaseModel):
    """Per-GPU memory plan of one vLLM replica and the verdict."""

    model_config = ConfigDict(frozen=True)

    model: str
    gpu: str
    tensor_parallel_size: int
    gpu_memory_utilization: float
    max_model_len: int
    max_num_batched_tokens: int
    gpu_total_gib: float = Field(description="CUDA-visible memory of one GPU, GiB.")
    budget_gib: float = Field(description="gpu_total_gib x gpu_memory_utilization.")
    weights_gib: float = Field(description="Weights on one GPU, GiB.")
    activation_gib: float = Field(description="Peak activation allowance, GiB.")
    non_torch_gib: float
    cudagraph_gib: float
    kv_cache_gib: float = Field(description="Left for the KV cache on one GPU (may be < 0).")
    kv_bytes_per_token: int = Field(description="KV bytes of one token on one GPU.")
    kv_bytes_per_token_total: int = Field(
        description="KV bytes of one token for the whole model (the TP=1 figure).")
    kv_capacity_tokens: int = Field(description="vLLM's 'GPU KV cache size' in tokens.")
    max_concurrent_full_length: float = Field(
        description="vLLM's 'Maximum concurrency for max_model_len tokens per request'.")
    fits: bool
    reason: str = Field(description="Why it fits or not, with the fix.")

    def explain(self) -> str:
        lines = [
            f"{self.model} on {self.tensor_parallel_size}x {self.gpu}: "
            f"{'FITS' if self.fits else 'DOES NOT FIT'}",
            f"  budget   {self.gpu_total_gib:7.2f} GiB x {self.gpu_memory_utilization:.2f} = "
            f"{self.budget_gib:7.2f} GiB per GPU",
            f"  weights  {self.weights_gib:7.2f} GiB   activation {self.activation_gib:5.2f} GiB"
            f"   non-torch {self.non_torch_gib:4.2f} GiB"
            f"   cuda graphs {self.cudagraph_gib:4.2f} GiB",
            f"  KV cache {self.kv_cache_gib:7.2f} GiB at {self.kv_bytes_per_token} B/token/GPU "
            f"-> {self.kv_capacity_tokens:,} tokens; "
            f"{self.max_concurrent_full_length:.2f}x sequences of {self.max_model_len:,} tokens",
            f"  {self.reason}",
        ]
        return "\n".join(lines)


def kv_bytes_per_token(model: ModelSpec, *, kv_cache_dtype: str = "auto",
                       tensor_parallel_size: int = 1) -> int:
    """2 (K and V) x layers x KV heads on one GPU x head_dim x element bytes.

    With tensor parallelism vLLM splits KV heads across GPUs, replicating them when there are
    fewer heads than GPUs (so a GPU always holds at least one).
    """
    dtype = model.dtype if kv_cache_dtype == "auto" else kv_cache_dtype
    elem = vllm_memory().bytes_of(dtype)
    heads = max(1, model.num_key_value_heads // tensor_parallel_size)
    return int(2 * model.num_hidden_layers * heads * model.head_dim * elem)


def weights_gib(model: ModelSpec, *, tensor_parallel_size: int = 1,
                weights_dtype: str | None = None) -> float:
    elem = vllm_memory().bytes_of(weights_dtype or model.dtype)
    return model.params_total * elem / tensor_parallel_size / GIB


def activation_gib(model: ModelSpec, *, max_num_batched_tokens: int,
                   tensor_parallel_size: int = 1) -> float:
    mem = vllm_memory()
    per_token = (2 * model.intermediate_size + 4 * model.hidden_size) * 2
    text = mem.activation_calibration.value * max_num_batched_tokens * per_token / GIB
    vision = mem.vision_activation_gib.value if model.is_vision else 0.0
    return (text + vision) / tensor_parallel_size


def kv_capacity_tokens(kv_cache_gib: float, bytes_per_token: int,
                       block_size_tokens: int | None = None) -> int:
    """Tokens of KV cache vLLM allocates: whole blocks only (num_blocks x block_size)."""
    block = block_size_tokens or vllm_memory().block_size_tokens.value
    if kv_cache_gib <= 0:
        return 0
    blocks = int(kv_cache_gib * GIB // (block * bytes_per_token))
    return blocks * block


def _check_inputs(model: ModelSpec, gpu_memory_utilization: float, max_model_len: int,
                  tensor_parallel_size: int) -> None:
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError(
            f"gpu_memory_utilization {gpu_memory_utilization} is outside (0, 1]: it is a "
            f"fraction of GPU memory, e.g. 0.9"
        )
    if max_model_len < 1:
        raise ValueError(f"max_model_len {max_model_len} must be a positive number of tokens")
    if tensor_parallel_size < 1 or model.num_attention_heads % tensor_parallel_size:
        raise ValueError(
            f"tensor_parallel_size {tensor_parallel_size}: vLLM needs the attention heads of "
            f"{model.name} ({model.num_attention_heads}) to be divisible by it; use one of "
            f"{[d for d in range(1, 17) if model.num_attention_heads % d == 0]}"
        )


def plan(model: ModelSpec, *, gpu_name: str, gpu_total_gib: float,
         gpu_memory_utilization: float, max_model_len: int,
         tensor_parallel_size: int = 1, max_num_batched_tokens: int | None = None,
         kv_cache_dtype: str = "auto", overrides: Overrides | None = None) -> FitReport:
    """The memory plan of one replica on GPUs of gpu_total_gib (CUDA-visible) each."""
    _check_inputs(model, gpu_memory_utilization, max_model_len, tensor_parallel_size)
    mem, ov = vllm_memory(), overrides or Overrides()
    batched = max_num_batched_tokens or mem.default_max_num_batched_tokens.value
    tp = tensor_parallel_size
    budget = gpu_total_gib * gpu_memory_utilization
    w = ov.weights_gib if ov.weights_gib is not None else weights_gib(
        model, tensor_parallel_size=tp)
    act = ov.activation_gib if ov.activation_gib is not None else activation_gib(
        model, max_num_batched_tokens=batched, tensor_parallel_size=tp)
    non_torch = ov.non_torch_gib if ov.non_torch_gib is not None else mem.non_torch_gib.value
    graphs = ov.cudagraph_gib if ov.cudagraph_gib is not None else mem.cudagraph_gib.value
    kv_gib = budget - w - act - non_torch - graphs
    per_gpu = kv_bytes_per_token(model, kv_cache_dtype=kv_cache_dtype, tensor_parallel_size=tp)
    tokens = kv_capacity_tokens(kv_gib, per_gpu)
    fits, reason = _verdict(model, gpu_name, budget, w, kv_gib, per_gpu, tokens,
                            gpu_memory_utilization, max_model_len, tp)
    return FitReport(
        model=model.name, gpu=gpu_name, tensor_parallel_size=tp,
        gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len,
        max_num_batched_tokens=batched, gpu_total_gib=gpu_total_gib, budget_gib=budget,
        weights_gib=w, activation_gib=act, non_torch_gib=non_torch, cudagraph_gib=graphs,
        kv_cache_gib=kv_gib, kv_bytes_per_token=per_gpu,
        kv_bytes_per_token_total=kv_bytes_per_token(model, kv_cache_dtype=kv_cache_dtype),
        kv_capacity_tokens=tokens,
        max_concurrent_full_length=round(tokens / max_model_len, 2),
        fits=fits, reason=reason,
    )


def _verdict(model: ModelSpec, gpu: str, budget: float, w: float, kv_gib: float, per_gpu: int,
             tokens: int, util: float, max_model_len: int, tp: int) -> tuple[bool, str]:
    if max_model_len > model.max_position_embeddings:
        return False, (
            f"max_model_len {max_model_len} exceeds {model.name}'s max_position_embeddings "
            f"({model.max_position_embeddings}); vLLM refuses it: lower max_model_len to "
            f"{model.max_position_embeddings} or less"
        )
    if w >= budget:
        return False, (
            f"weights need {w:.2f} GiB per GPU but the budget on {gpu} at "
            f"gpu_memory_utilization {util} is {budget:.2f} GiB: use a larger GPU, raise "
            f"tensor_parallel_size above {tp}, or a quantized checkpoint"
        )
    needed_gib = max_model_len * per_gpu / GIB
    if tokens < max_model_len:
        return False, (
            f"one sequence of max_model_len {max_model_len} needs {needed_gib:.2f} GiB of KV "
            f"cache but only {max(kv_gib, 0):.2f} GiB remain ({tokens} tokens); vLLM refuses to "
            f"start: lower max_model_len to at most {tokens}, raise gpu_memory_utilization "
            f"above {util}, or use a larger GPU"
        )
    return True, (
        f"{tokens:,} tokens of KV cache hold {tokens // max_model_len} full-length "
        f"sequence(s) of {max_model_len:,} tokens at once"
    )


def fits(model: str, gpu: str, *, gpu_memory_utilization: float, max_model_len: int,
         tensor_parallel_size: int = 1, max_num_batched_tokens: int | None = None,
         kv_cache_dtype: str = "auto", gpu_memory_gib: float | None = None,
         overrides: Overrides | None = None) -> FitReport:
    """Catalog front door: model and GPU by name (or gpu_memory_gib for an uncatalogued GPU)."""
    spec = find_model(model)
    if gpu_memory_gib is not None:
        total, name = gpu_memory_gib, gpu
    else:
        g = find_gpu(gpu)
        total, name = g.cuda_total_gib, g.name
    return plan(spec, gpu_name=name, gpu_total_gib=total,
                gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len,
                tensor_parallel_size=tensor_parallel_size,
                max_num_batched_tokens=max_num_batched_tokens, kv_cache_dtype=kv_cache_dtype,
                overrides=overrides)

