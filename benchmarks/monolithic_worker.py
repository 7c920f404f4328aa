"""One real worker in each mode, side by side: start-to-ready, memory (RSS of the worker and its
children) and seconds per document.

* split: MinerU's HTTP client against the simulator (profile ``instant``: the engine costs
  nothing, so the figures are the worker's own);
* monolithic: MinerU's in-process transformers engine on the tiny generated Qwen2-VL
  (localvllm/tinyvlm.py), no server.

Both on this machine's CPUs, so the monolithic figures are those of a 64-wide model: they show
what in-process loading adds to a worker (torch, transformers, the model), not what MinerU2.5
on a GPU costs. Run: ``python -m benchmarks.monolithic_worker [--documents 4]``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import psutil

from bench.pdfgen import make_pdf
from localvllm.tinyvlm import ensure_tiny_vlm
from testsupport.stack import ROOT
from testsupport.worker import Harness


def _rss_mib(pid: int) -> float:
    proc = psutil.Process(pid)
    return sum(p.memory_info().rss for p in [proc, *proc.children(recursive=True)]) / 2**20


def _start_to_ready(log: str) -> float | None:
    for line in log.splitlines():
        if '"msg": "ready"' in line:
            return float(json.loads(line)["start_to_ready_s"])
    return None


def measure(mode: str, root: Path, documents: int) -> dict[str, object]:
    overrides: dict[str, object] = {}
    if mode == "monolithic":
        model = ensure_tiny_vlm(ROOT / ".cache" / "models" / "tiny-vlm")
        overrides = {"deployment_mode": "monolithic", "worker_pool.in_process.backend": "vlm-transformers",
                     "worker_pool.in_process.model_path": str(model)}
    h = Harness(root / mode, overrides=overrides)
    try:
        h.start_redis()
        if mode == "split":
            h.start_sim()
        worker = h.start_worker()
        ready_s = _start_to_ready(worker.log())
        idle = _rss_mib(worker.pid)
        pdfs = [make_pdf(root / f"{mode}-{i}.pdf", 1, seed=i) for i in range(documents)]
        t0 = time.monotonic()
        ids = h.submit(pdfs)
        rows = h.wait_terminal(ids, timeout_s=600)
        elapsed = time.monotonic() - t0
        done = sum(r.get("state") == "done" for r in rows.values())
        return {"mode": mode, "start_to_ready_s": ready_s, "rss_idle_mib": round(idle),
                "rss_after_mib": round(_rss_mib(worker.pid)), "documents_done": f"{done}/{documents}",
                "s_per_document": round(elapsed / documents, 2)}
    finally:
        h.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--documents", type=int, default=4)
    args = parser.parse_args()
    print(f"load average: {os.getloadavg()}")
    with tempfile.TemporaryDirectory(prefix="monolithic-bench-") as tmp:
        for mode in ("split", "monolithic"):
            print(json.dumps(measure(mode, Path(tmp), args.documents)))


if __name__ == "__main__":
    main()
