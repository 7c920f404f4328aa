"""What `--engine` changes besides the engine, for the local stack.

The local stack's server is configured for the generated tiny text model (2k context). The
simulator stands in for MinerU2.5 (a 16k-context VLM): a MinerU layout request alone is
~2,600 prompt tokens, so with the simulator the server gets the context and vision flag of the
model it imitates. Explicit overrides always win over a preset.
"""

from __future__ import annotations

from typing import Any

from contract.spec import Engine

ENGINE_PRESETS: dict[Engine, dict[str, Any]] = {
    Engine.sim: {
        "max_model_len": 16384,
        "max_num_batched_tokens": 16384,
        "model.vision": True,
    },
    Engine.vllm: {},
}


def engine_overrides(engine: Engine | str, server_index: int = 0) -> dict[str, Any]:
    """Dotted-path overrides that switch server `server_index` to `engine` with its preset."""
    engine = Engine(engine)
    prefix = f"inference_servers.{server_index}"
    out: dict[str, Any] = {f"{prefix}.engine": engine.value}
    out.update({f"{prefix}.{key}": value for key, value in ENGINE_PRESETS[engine].items()})
    return out


def with_presets(overrides: dict[str, Any]) -> dict[str, Any]:
    """Expand an engine override into its preset; explicit keys in `overrides` win."""
    engine = overrides.get("inference_servers.0.engine")
    if engine is None:
        return dict(overrides)
    return {**engine_overrides(engine), **overrides}
