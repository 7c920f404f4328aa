"""Catalog data: every number has a source, and config-derived numbers match their formula."""

from __future__ import annotations

import json

import pytest

from contract.capacity import find_model, gpus, models
from contract.capacity.catalog import vllm_memory
from runbooks.capacity.params import decoder_params, spec_from_config, vision_params

# config.json of Qwen/Qwen2.5-VL-7B-Instruct as published (the fields the counts use).
QWEN25_VL_7B_CONFIG = {
    "model_type": "qwen2_5_vl", "hidden_size": 3584, "intermediate_size": 18944,
    "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
    "vocab_size": 152064, "tie_word_embeddings": False, "max_position_embeddings": 128000,
    "torch_dtype": "bfloat16",
    "vision_config": {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420,
                      "num_heads": 16, "in_chans": 3, "out_hidden_size": 3584,
                      "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2},
}


def test_every_entry_cites_a_source() -> None:
    for m in models().values():
        assert m.sources and all(len(s) > 20 for s in m.sources), m.name
    for g in gpus().values():
        assert len(g.source) > 20, g.name
        # The driver keeps a reservation: CUDA sees less than the board's nominal size and
        # less than NVML's total.
        assert g.cuda_total_gib < g.nominal_gb, g.name
        if g.nvml_total_mib:
            assert g.cuda_total_gib < g.nvml_total_mib / 1024, g.name
    for name, const in vllm_memory().model_dump().items():
        assert len(const["source"]) > 20, name


@pytest.mark.parametrize("name, published", [
    ("Qwen2.5-VL-7B-Instruct", 8_292_166_656),  # Hugging Face: 8.29B
    ("Qwen2.5-VL-3B-Instruct", 3_754_622_976),  # Hugging Face: 3.75B
    ("Qwen3-4B", 4_022_468_096),                # Hugging Face: 4.02B
    ("Llama-3.1-8B-Instruct", 8_030_261_248),   # Meta: 8.03B
])
def test_param_formula_matches_published_counts(name: str, published: int) -> None:
    m = find_model(name)
    cfg = {
        "model_type": m.architecture, "hidden_size": m.hidden_size,
        "intermediate_size": m.intermediate_size, "num_hidden_layers": m.num_hidden_layers,
        "num_attention_heads": m.num_attention_heads,
        "num_key_value_heads": m.num_key_value_heads, "head_dim": m.head_dim,
        "vocab_size": m.vocab_size, "tie_word_embeddings": m.tie_word_embeddings,
    }
    if m.architecture == "qwen2_5_vl":
        cfg["vision_config"] = {**QWEN25_VL_7B_CONFIG["vision_config"],
                                "out_hidden_size": m.hidden_size}
    assert decoder_params(cfg) + vision_params(cfg) == published == m.params_total
    assert vision_params(cfg) == m.vision_params


def test_qwen2_text_decoder_is_qwen25_7b() -> None:
    # Qwen2.5-VL-7B's decoder is Qwen2.5-7B: 7.62B published.
    assert decoder_params({**QWEN25_VL_7B_CONFIG, "model_type": "qwen2"}) == 7_615_616_512


def test_mineru_is_qwen2_vl_tower_plus_qwen2_05b() -> None:
    m = find_model("MinerU2.5-2509-1.2B")
    cfg = {"model_type": "qwen2_vl", "hidden_size": 896, "intermediate_size": 4864,
           "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
           "vocab_size": 151936, "tie_word_embeddings": True,
           "vision_config": {"depth": 32, "embed_dim": 1280, "mlp_ratio": 4,
                             "hidden_size": 896, "patch_size": 14, "in_chans": 3}}
    assert decoder_params(cfg) == 494_032_768  # Qwen2-0.5B: 0.49B published
    assert vision_params(cfg) == m.vision_params
    assert decoder_params(cfg) + vision_params(cfg) == m.params_total
    assert round(m.params_total / 1e9, 1) == 1.2  # the report's "1.2B"


def test_spec_from_config_equals_catalog(tmp_path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(QWEN25_VL_7B_CONFIG))
    spec = spec_from_config("custom", json.loads(path.read_text()), source=str(path))
    cat = find_model("Qwen2.5-VL-7B-Instruct")
    for field in ("num_hidden_layers", "num_key_value_heads", "head_dim", "params_total",
                  "vision_params", "max_position_embeddings", "dtype"):
        assert getattr(spec, field) == getattr(cat, field), field


def test_uncountable_architecture_asks_for_params_total() -> None:
    with pytest.raises(ValueError) as err:
        decoder_params({"model_type": "deepseek_vl_v2", "hidden_size": 1280})
    assert "give params_total explicitly" in str(err.value)
    spec = spec_from_config("ocr", {"model_type": "deepseek_vl_v2", "language_config": {
        "hidden_size": 1280, "intermediate_size": 6848, "num_hidden_layers": 12,
        "num_attention_heads": 10, "num_key_value_heads": 10, "vocab_size": 129280,
        "max_position_embeddings": 8192}}, params_total=3_335_000_000, source="test")
    assert spec.head_dim == 128 and spec.num_hidden_layers == 12
