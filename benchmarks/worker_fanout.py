"""Fan-out speed-up: one 100-page document on 1, 2 and 4 workers (issue 4: >= 1.6x on 2).

Run: .venv/bin/python benchmarks/worker_fanout.py [--pages 100] [--workers 1 2 4] [--repeats 3]
Real Redis, the simulator (profile 'instant') and real MinerU on loopback. For each run fresh
workers are started (start-up not timed), the document is submitted, and submit -> merged
output stored is timed. Runs are interleaved (1, 2, 4, 1, 2, 4, ...) and the median is used, so
other load on a shared machine hits every configuration alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "pdfs"))


def _cpu(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pages", type=int, default=100)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from pdf_fixtures import make_pdf

    from worker.testing import Harness

    tmp = Path(tempfile.mkdtemp(prefix="worker-fanout-"))
    pdf = make_pdf(tmp / "big.pdf", args.pages, seed=1)
    results: dict[int, list[float]] = {n: [] for n in args.workers}
    h = Harness(tmp / "h")
    try:
        h.start_redis()
        h.start_sim()
        for repeat in range(args.repeats):
            for n in args.workers:
                workers = [h.start_worker() for _ in range(n)]
                procs = [psutil.Process(p.popen.pid) for p in h.procs if p.alive()]
                c0 = sum(_cpu(p) for p in procs)
                t0 = time.monotonic()
                job_id, = h.submit([pdf])
                row = h.wait_terminal([job_id], 1800)[job_id]
                seconds = time.monotonic() - t0
                cores = (sum(_cpu(p) for p in procs) - c0) / seconds
                for w in workers:
                    w.stop()
                assert row["state"] == "done", row
                meta = json.loads((h.outputs / job_id / "metadata.json").read_text())
                results[n].append(seconds)
                print(f"run {repeat + 1}: {n} worker(s) {seconds:.1f} s for {meta['pages']} pages in "
                      f"{meta['parts']} parts; our processes used {cores:.2f} of {os.cpu_count()} cores "
                      f"(load average {os.getloadavg()[0]:.1f})", flush=True)
    finally:
        h.close()
    base = statistics.median(results[args.workers[0]])
    for n, times in results.items():
        med = statistics.median(times)
        print(f"{n} worker(s): median {med:.1f} s, speed-up {base / med:.2f}x")


if __name__ == "__main__":
    main()
