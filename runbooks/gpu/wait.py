"""`wait-for-gpu-memory`: block until a GPU has enough free memory (it only reads NVML).

Used before (re)starting vLLM: a restart while the old process still holds its memory makes the
new one size its KV cache on what is left, or fail with "CUDA out of memory". Clock and sleep
are injected so tests run instantly.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from runbooks.gpu.probe import ProbeResult, probe


@dataclass
class WaitParams:
    min_free_mib: float  # free memory wanted on each selected GPU, MiB
    gpu_index: int | None = None  # None: every GPU
    timeout_s: float = 300.0
    interval_s: float = 5.0

    def __post_init__(self) -> None:
        if self.min_free_mib <= 0:
            raise ValueError(f"min_free_mib {self.min_free_mib:g} must be > 0 MiB")
        if self.timeout_s < 0 or self.interval_s <= 0:
            raise ValueError(
                f"timeout_s {self.timeout_s:g} must be >= 0 and interval_s {self.interval_s:g} > 0")


@dataclass
class WaitReport:
    ok: bool
    outcome: str  # "ready", "timeout", "no-gpu", "bad-gpu-index"
    message: str
    waited_s: float
    checks: int
    free_mib: dict[int, float | None] = field(default_factory=dict)


def _free(result: ProbeResult, index: int | None) -> dict[int, float | None]:
    return {g.index: g.memory_free_mib for g in result.gpus
            if index is None or g.index == index}


def wait_for_gpu_memory(params: WaitParams, *, nvml: Any = None, use_real: bool = True,
                        clock: Callable[[], float] = time.monotonic,
                        sleep: Callable[[float], None] = time.sleep) -> WaitReport:
    start = clock()
    checks = 0
    while True:
        result = probe(nvml, use_real=use_real)
        checks += 1
        waited = clock() - start
        if not result.available:
            return WaitReport(False, "no-gpu", result.reason, waited, checks)
        free = _free(result, params.gpu_index)
        if not free:
            known = [g.index for g in result.gpus]
            return WaitReport(False, "bad-gpu-index",
                              f"GPU index {params.gpu_index} does not exist: NVML sees {known}",
                              waited, checks)
        short = {i: f for i, f in free.items() if f is None or f < params.min_free_mib}
        if not short:
            return WaitReport(True, "ready",
                              f"{len(free)} GPU(s) have >= {params.min_free_mib:g} MiB free",
                              waited, checks, free)
        if waited >= params.timeout_s:
            detail = ", ".join(f"GPU {i}: {'unknown' if f is None else f'{f:.0f}'} MiB free"
                               for i, f in sorted(short.items()))
            return WaitReport(
                False, "timeout",
                f"after {waited:.0f} s still below {params.min_free_mib:g} MiB free ({detail}); "
                f"find the holder with `runbook gpu-probe` (processes) and stop it, or lower "
                f"gpu_memory_utilization", waited, checks, free)
        sleep(min(params.interval_s, max(params.timeout_s - waited, 0.0)) or params.interval_s)
