"""The inference capacity calculator against hand-derived and published vLLM figures."""

from __future__ import annotations

import re

import pytest

from contract.capacity import (
    CatalogError,
    Overrides,
    find_model,
    fits,
    gpus,
    kv_bytes_per_token,
    kv_capacity_tokens,
    plan,
)
from contract.capacity.inference import GIB, activation_gib, weights_gib


@pytest.mark.parametrize("model, expected", [
    # 2 (K,V) x layers x KV heads x head_dim x 2 bytes (bf16), from each config.json, by hand:
    ("Qwen2.5-VL-7B-Instruct", 2 * 28 * 4 * 128 * 2),   # 57,344 B = 56 KiB
    ("Qwen2.5-VL-3B-Instruct", 2 * 36 * 2 * 128 * 2),   # 36,864 B = 36 KiB
    ("MinerU2.5-2509-1.2B", 2 * 24 * 2 * 64 * 2),       # 12,288 B = 12 KiB
    ("DeepSeek-OCR", 2 * 12 * 10 * 128 * 2),            # 61,440 B = 60 KiB (no MLA)
    ("Qwen3-4B", 2 * 36 * 8 * 128 * 2),                 # 147,456 B = 144 KiB
    ("Llama-3.1-8B-Instruct", 2 * 32 * 8 * 128 * 2),    # 131,072 B = 128 KiB
])
def test_kv_bytes_per_token_by_hand(model: str, expected: int) -> None:
    assert kv_bytes_per_token(find_model(model)) == expected


def test_kv_bytes_fp8_and_tensor_parallel() -> None:
    qwen7 = find_model("Qwen2.5-VL-7B-Instruct")
    assert kv_bytes_per_token(qwen7, kv_cache_dtype="fp8") == 2 * 28 * 4 * 128
    # 4 KV heads over 2 GPUs: each GPU keeps 2 heads.
    assert kv_bytes_per_token(qwen7, tensor_parallel_size=2) == 2 * 28 * 2 * 128 * 2
    # Qwen2.5-VL-3B has 2 KV heads; at TP 4 vLLM replicates so every GPU holds one.
    qwen3b = find_model("Qwen2.5-VL-3B-Instruct")
    assert kv_bytes_per_token(qwen3b, tensor_parallel_size=4) == 2 * 36 * 1 * 128 * 2


def test_kv_capacity_counts_whole_blocks_only() -> None:
    # 1 GiB at 128 KiB/token: 8192 tokens = 512 blocks of 16; a byte less loses a whole block.
    assert kv_capacity_tokens(1.0, 131072) == 8192
    assert kv_capacity_tokens(1.0 - 1 / GIB, 131072) == 8192 - 16
    assert kv_capacity_tokens(-0.5, 131072) == 0


# vllm-project/vllm#10517 (vLLM V0, Llama-3.1-8B-Instruct, RTX 3090, gpu_memory_utilization 0.9):
#   20k: "Loading model weights took 14.9888 GB ... total_gpu_memory=23.58GiB ...
#         peak_torch_memory=17.06GiB ... non_torch_memory=0.35GiB kv_cache_size=3.81GiB"
#        "# GPU blocks: 1952" "Maximum concurrency for 20000 tokens per request: 1.56x"
#   29k: "peak_torch_memory=17.98GiB ... kv_cache_size=2.89GiB" "# GPU blocks: 1478"
#        "Maximum concurrency for 29000 tokens per request: 0.82x" "The model's max seq len
#        (29000) is larger than the maximum number of tokens that can be stored in KV cache
#        (23648)."
# The log rounds GiB to 0.01 (= 5 blocks of 2 MiB for this model), so token counts agree to
# +-80 tokens, not exactly.
LOG_TOLERANCE_TOKENS = 80


@pytest.mark.parametrize("max_model_len, peak_torch_gib, blocks, concurrency, ok", [
    (20000, 17.06, 1952, 1.56, True),
    (29000, 17.98, 1478, 0.82, False),
])
def test_reproduces_vllm_published_profiling_log(max_model_len: int, peak_torch_gib: float,
                                                  blocks: int, concurrency: float,
                                                  ok: bool) -> None:
    weights = 14.9888
    report = plan(
        find_model("Llama-3.1-8B-Instruct"), gpu_name="rtx-3090", gpu_total_gib=23.58,
        gpu_memory_utilization=0.90, max_model_len=max_model_len,
        max_num_batched_tokens=max_model_len,  # V0 without chunked prefill profiles max_model_len
        overrides=Overrides(weights_gib=weights, activation_gib=peak_torch_gib - weights,
                            non_torch_gib=0.35, cudagraph_gib=0.0),
    )
    assert abs(report.kv_capacity_tokens - blocks * 16) <= LOG_TOLERANCE_TOKENS
    assert report.max_concurrent_full_length == pytest.approx(concurrency, abs=0.01)
    assert report.fits is ok
    if not ok:
        assert f"lower max_model_len to at most {report.kv_capacity_tokens}" in report.reason
        assert "vLLM refuses to start" in report.reason


def test_estimates_match_the_same_log_without_overrides() -> None:
    llama = find_model("Llama-3.1-8B-Instruct")
    # Weights: 8,030,261,248 params x 2 B = 14.96 GiB; vLLM logged 14.9888 (0.2 % more).
    assert weights_gib(llama) == pytest.approx(14.9888, rel=0.003)
    # Activation model calibrated on the 20k line predicts the 29k line.
    assert activation_gib(llama, max_num_batched_tokens=20000) == pytest.approx(2.07, abs=0.01)
    assert activation_gib(llama, max_num_batched_tokens=29000) == pytest.approx(2.99, abs=0.02)


def test_manual_sizing_of_qwen7b_on_rtx5090() -> None:
    # Requirements CAP-2 and CAP-8: Qwen2.5-VL-7B-Instruct in about 14 GB plus 10 GB of KV cache on
    # one RTX 5090 at GPU_MEMORY_UTILIZATION 0.92. The calculator agrees on the KV cache and shows the
    # weights are 15.4 GiB (8.29B params in bf16), more than CAP-2's ~14 GB.
    report = fits("Qwen2.5-VL-7B-Instruct", "rtx-5090", gpu_memory_utilization=0.92,
                  max_model_len=32768)
    assert report.fits
    assert 9.5 < report.kv_cache_gib < 11.5
    assert report.weights_gib == pytest.approx(8_292_166_656 * 2 / GIB)


def test_too_long_context_names_the_largest_that_fits() -> None:
    ok = fits("Qwen2.5-VL-7B-Instruct", "rtx-4090", gpu_memory_utilization=0.9,
              max_model_len=32768)
    assert ok.fits and ok.max_concurrent_full_length >= 1
    too_long = fits("Qwen2.5-VL-7B-Instruct", "rtx-4090", gpu_memory_utilization=0.9,
                    max_model_len=65536)
    assert not too_long.fits
    assert too_long.kv_capacity_tokens == ok.kv_capacity_tokens < 65536
    assert (f"lower max_model_len to at most {too_long.kv_capacity_tokens}, raise "
            f"gpu_memory_utilization above 0.9, or use a larger GPU") in too_long.reason


def test_weights_larger_than_budget() -> None:
    report = fits("Qwen2.5-VL-7B-Instruct", "16 GiB card", gpu_memory_gib=16.0,
                  gpu_memory_utilization=0.9, max_model_len=4096)
    assert not report.fits
    assert report.reason.startswith("weights need 15.45 GiB per GPU but the budget on 16 GiB "
                                    "card at gpu_memory_utilization 0.9 is 14.40 GiB")
    # Two GPUs halve the weights and it fits.
    assert fits("Qwen2.5-VL-7B-Instruct", "16 GiB card", gpu_memory_gib=16.0,
                gpu_memory_utilization=0.9, max_model_len=4096, tensor_parallel_size=2).fits


def test_context_beyond_the_model() -> None:
    report = fits("DeepSeek-OCR", "nvidia-h100-80gb", gpu_memory_utilization=0.9,
                  max_model_len=16384)
    assert not report.fits
    assert "exceeds DeepSeek-OCR's max_position_embeddings (8192)" in report.reason


@pytest.mark.parametrize("kwargs, message", [
    ({"tensor_parallel_size": 3}, "tensor_parallel_size 3: vLLM needs the attention heads of "
                                  "Qwen2.5-VL-7B-Instruct (28) to be divisible by it"),
    ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization 1.5 is outside (0, 1]"),
    ({"max_model_len": 0}, "max_model_len 0 must be a positive number of tokens"),
    ({"kv_cache_dtype": "fp4"}, "dtype 'fp4' is unknown: use one of"),
])
def test_bad_inputs_name_the_input_and_fix(kwargs: dict, message: str) -> None:
    args = {"gpu_memory_utilization": 0.9, "max_model_len": 8192, **kwargs}
    with pytest.raises(ValueError, match=None) as err:
        fits("Qwen2.5-VL-7B-Instruct", "nvidia-h100-80gb", **args)
    assert message in str(err.value)


def test_unknown_names_list_the_catalog() -> None:
    with pytest.raises(CatalogError) as err:
        fits("Qwen9-VL", "nvidia-h100-80gb", gpu_memory_utilization=0.9, max_model_len=8192)
    assert "unknown model 'Qwen9-VL': " in str(err.value)
    assert "the capacity catalog knows DeepSeek-OCR" in str(err.value)
    assert "--model-config" in str(err.value)
    with pytest.raises(CatalogError) as err:
        fits("Qwen3-4B", "tpu-v5e", gpu_memory_utilization=0.9, max_model_len=8192)
    assert "unknown gpu 'tpu-v5e'" in str(err.value) and "--gpu-memory-gib" in str(err.value)


def test_unknown_names_get_the_nearest() -> None:
    with pytest.raises(CatalogError, match="did you mean 'nvidia-h100-80gb'"):
        fits("Qwen3-4B", "nvidia-h10", gpu_memory_utilization=0.9, max_model_len=8192)
    with pytest.raises(CatalogError, match="did you mean 'MinerU2.5-2509-1.2B'"):
        fits("mineru", "nvidia-h100-80gb", gpu_memory_utilization=0.9, max_model_len=8192)


def test_gpu_names_follow_one_pattern() -> None:
    assert all(re.fullmatch(r"nvidia-[a-z0-9-]+", name) for name in gpus()), sorted(gpus())


def test_aliases_resolve() -> None:
    a = fits("Qwen/Qwen2.5-VL-7B-Instruct", "H200", gpu_memory_utilization=0.9,
             max_model_len=8192)
    b = fits("qwen2.5-vl-7b", "nvidia-h200-141gb", gpu_memory_utilization=0.9,
             max_model_len=8192)
    assert a == b and a.gpu == "nvidia-h200-141gb"


def test_every_catalog_model_fits_every_datacenter_gpu_at_its_own_context() -> None:
    # A smoke over the whole catalog: at 8k context every model fits an A100 40GB and larger,
    # and capacity grows with GPU memory.
    from contract.capacity import models

    for name in models():
        sizes = [fits(name, g, gpu_memory_utilization=0.9, max_model_len=8192)
                 for g in ("nvidia-tesla-a100", "nvidia-a100-80gb", "nvidia-h200-141gb")]
        assert all(r.fits for r in sizes), name
        tokens = [r.kv_capacity_tokens for r in sizes]
        assert tokens == sorted(tokens) and tokens[0] < tokens[-1], name
