"""Every catalog model on every catalog GPU, as a markdown table (CLI `capacity-plan matrix`
and the generated block of docs/capacity.md)."""

from __future__ import annotations

from contract.capacity.catalog import gpus, models
from contract.capacity.inference import fits


def matrix_table(*, gpu_memory_utilization: float = 0.9, max_model_len: int = 8192) -> str:
    gpu_names = list(gpus())
    lines = [
        f"Max concurrent sequences of {max_model_len:,} tokens at gpu_memory_utilization "
        f"{gpu_memory_utilization:g}, TP 1 (0 = does not fit; - = longer than the model's "
        f"context)",
        "",
        "| model | " + " | ".join(gpu_names) + " |",
        "|---" * (len(gpu_names) + 1) + "|",
    ]
    for name, spec in models().items():
        cells = []
        for g in gpu_names:
            if max_model_len > spec.max_position_embeddings:
                cells.append("-")
                continue
            r = fits(name, g, gpu_memory_utilization=gpu_memory_utilization,
                     max_model_len=max_model_len)
            cells.append(f"{r.max_concurrent_full_length:.1f}" if r.fits else "0")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
