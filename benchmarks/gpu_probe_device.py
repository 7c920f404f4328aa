"""Prove the GPU probe on a real GPU: prints the probe, its Prometheus textfile and a
wait-for-gpu-memory run, then (when torch is there) holds 4 GiB and probes again so the memory
and process readings are seen to move, and compares NVML's total with the CUDA total that vLLM
sizes from (contract/capacity/gpus.yaml cuda_total_gib).

Needs only the standard library, nvidia-ml-py and this repo's runbooks/gpu; prometheus-client
and torch are optional (guarded), so it runs on a bare GPU machine:
    python benchmarks/gpu_probe_device.py
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runbooks.gpu.probe import probe  # noqa: E402
from runbooks.gpu.wait import WaitParams, wait_for_gpu_memory  # noqa: E402


def main() -> int:
    print("== probe (2 s Xid watch) ==")
    result = probe(xid_watch_s=2.0)
    print(result.summary())
    print("== probe JSON ==")
    print(json.dumps(result.to_dict(), indent=1, default=str))
    try:
        from runbooks.gpu.export import write_textfile
    except ImportError as exc:
        print(f"== textfile skipped: {exc} ==")
    else:
        with tempfile.TemporaryDirectory() as tmp:
            path = write_textfile(Path(tmp) / "gpu.prom", result)
            print("== Prometheus textfile ==")
            print(path.read_text(), end="")
    print("== wait-for-gpu-memory (min 1024 MiB free, timeout 5 s) ==")
    report = wait_for_gpu_memory(WaitParams(min_free_mib=1024, timeout_s=5, interval_s=1))
    print(f"{report.outcome}: {report.message} (checks {report.checks})")
    if not result.available:
        return 1
    try:
        import torch
    except ImportError:
        print("== torch not installed: skipping the 4 GiB hold and the CUDA total check ==")
        return 0
    free_b, total_b = torch.cuda.mem_get_info(0)
    gib = 1024**3
    nvml_total = result.gpus[0].memory_total_mib or 0
    print(f"== CUDA total (torch.cuda.mem_get_info) {total_b / gib:.2f} GiB vs NVML total "
          f"{nvml_total:.0f} MiB = {nvml_total / 1024:.2f} GiB ==")
    hold = torch.empty(4 * gib, dtype=torch.uint8, device="cuda:0")
    torch.cuda.synchronize()
    after = probe()
    g = after.gpus[0]
    print(f"== after holding 4 GiB in pid {os.getpid()}: used {g.memory_used_mib:.0f} MiB "
          f"(was {result.gpus[0].memory_used_mib:.0f}), processes "
          f"{[(p.pid, p.used_memory_mib) for p in g.processes]} ==")
    del hold
    return 0


if __name__ == "__main__":
    sys.exit(main())
