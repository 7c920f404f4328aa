"""Parameter counts and a ModelSpec from a Hugging Face config.json.

Counts follow the module shapes of transformers' Qwen2 / Qwen3 / Llama decoders and of the
Qwen2-VL / Qwen2.5-VL vision towers, so a catalog entry can be checked against its config.json
(tests do) and a model outside the catalog can be planned from its config.json alone.
Architectures whose weights this module cannot count (MoE, SAM/CLIP towers) need params_total.
"""

from __future__ import annotations

from typing import Any

from contract.capacity.catalog import ModelSpec

# model_type -> (q/k/v projections carry a bias, q/k carry an RMSNorm of head_dim)
_DECODERS: dict[str, tuple[bool, bool]] = {
    "qwen2": (True, False),
    "qwen2_vl": (True, False),
    "qwen2_5_vl": (True, False),
    "qwen3": (False, True),
    "llama": (False, False),
    "mistral": (False, False),
}


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    # Newer transformers nest the decoder under text_config / language_config.
    for key in ("text_config", "language_config"):
        if isinstance(config.get(key), dict) and "num_hidden_layers" in config[key]:
            return {**config, **config[key]}
    return config


def head_dim_of(cfg: dict[str, Any]) -> int:
    return int(cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"])


def decoder_params(config: dict[str, Any]) -> int:
    """Weights of the text decoder incl. embeddings and lm_head (untied) and the final norm."""
    cfg = _text_config(config)
    model_type = config.get("model_type", cfg.get("model_type", ""))
    if model_type not in _DECODERS:
        raise ValueError(
            f"model_type {model_type!r}: parameter counting supports {', '.join(_DECODERS)}; "
            f"give params_total explicitly for other architectures"
        )
    qkv_bias, qk_norm = _DECODERS[model_type]
    h, heads, kv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = head_dim_of(cfg)
    q = h * heads * hd + (heads * hd if qkv_bias else 0)
    k = h * kv * hd + (kv * hd if qkv_bias else 0)
    o = heads * hd * h
    mlp = 3 * h * cfg["intermediate_size"]  # gate, up, down
    norms = 2 * h + (2 * hd if qk_norm else 0)
    per_layer = q + 2 * k + o + mlp + norms
    embed = cfg["vocab_size"] * h
    lm_head = 0 if cfg.get("tie_word_embeddings", False) else embed
    return cfg["num_hidden_layers"] * per_layer + embed + lm_head + h


def vision_params(config: dict[str, Any]) -> int:
    """Weights of a Qwen2-VL / Qwen2.5-VL vision tower and patch merger; 0 for text models."""
    vc = config.get("vision_config")
    model_type = config.get("model_type", "")
    if not vc or model_type not in ("qwen2_vl", "qwen2_5_vl"):
        return 0
    patch, tpatch = vc.get("patch_size", 14), vc.get("temporal_patch_size", 2)
    merge = vc.get("spatial_merge_size", 2)
    in_ch = vc.get("in_chans", vc.get("in_channels", 3))
    if model_type == "qwen2_5_vl":
        h, inter, depth = vc.get("hidden_size", 1280), vc.get("intermediate_size", 3420), \
            vc.get("depth", 32)
        out = vc.get("out_hidden_size", config.get("hidden_size"))
        mlp = 3 * h * inter + 2 * inter + h  # gated SiLU MLP with biases
        norms = 2 * h  # RMSNorm: weight only
        merger_norm = h
    else:  # qwen2_vl: plain GELU MLP (mlp_ratio) and LayerNorms with bias
        h, depth = vc.get("embed_dim", 1280), vc.get("depth", 32)
        inter = int(h * vc.get("mlp_ratio", 4))
        out = vc.get("hidden_size", config.get("hidden_size"))
        mlp = 2 * h * inter + inter + h
        norms = 4 * h
        merger_norm = 2 * h
    attn = (h * 3 * h + 3 * h) + (h * h + h)
    m = h * merge * merge
    merger = merger_norm + (m * m + m) + (m * out + out)
    return in_ch * tpatch * patch * patch * h + depth * (attn + mlp + norms) + merger


def spec_from_config(name: str, config: dict[str, Any], *,
                     params_total: int | None = None, source: str) -> ModelSpec:
    """A ModelSpec for a model outside the catalog, from its config.json dict."""
    cfg = _text_config(config)
    vision = vision_params(config)
    total = params_total if params_total is not None else decoder_params(config) + vision
    return ModelSpec(
        name=name,
        architecture=config.get("model_type", cfg.get("model_type", "unknown")),
        num_hidden_layers=cfg["num_hidden_layers"],
        num_attention_heads=cfg["num_attention_heads"],
        num_key_value_heads=cfg.get("num_key_value_heads", cfg["num_attention_heads"]),
        head_dim=head_dim_of(cfg),
        hidden_size=cfg["hidden_size"],
        intermediate_size=cfg["intermediate_size"],
        vocab_size=cfg["vocab_size"],
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        max_position_embeddings=cfg.get("max_position_embeddings", 4096),
        dtype=str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"),
        params_total=total,
        vision_params=vision,
        sources=[source],
    )
