"""Fan-out speed-up: one 100-page document on 1, 2 and 4 workers (target: >= 1.6x on 2).

Run: .venv/bin/python benchmarks/worker_fanout.py [--pages 100] [--workers 1 2 4] [--repeats 3]
                                                  [--cpu-limits-millicores 1000 0]
Real Redis, the simulator (profile 'instant') and real MinerU on loopback. For each run fresh
workers are started (start-up not timed), the document is submitted, and submit -> merged
output stored is timed. Runs are interleaved (1, 2, 4, 1, 2, 4, ...) and the median is used, so
other load on a shared machine hits every configuration alike.

Two CPU settings, each a table:
* ``1000``: every worker has the CPU of a pod with ``worker_pool.cpu_limit_millicores: 1000``
  (the local stack emulates the limit with CPU affinity, see worker/cpu.py). This is the scaling
  question: does a second worker of the same size halve the time?
* ``0``: no limit; every worker may use every core. One such worker already spreads over both
  cores of a 2-core machine (MinerU renders pages in a process pool while the main process sends
  requests), so the speed-up a second worker can add is bounded by 2 / (cores one worker uses);
  the script prints that bound.
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
sys.path.insert(0, str(ROOT))  # testsupport/ is not installed
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "pdfs"))


def _cpu(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pages", type=int, default=100)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cpu-limits-millicores", type=int, nargs="+", default=[1000, 0],
                        help="worker_pool.cpu_limit_millicores per table; 0 = no limit")
    args = parser.parse_args()
    from pdf_fixtures import make_pdf

    tmp = Path(tempfile.mkdtemp(prefix="worker-fanout-"))
    pdf = make_pdf(tmp / "big.pdf", args.pages, seed=1)
    tables = [measure(tmp, pdf, args, limit) for limit in args.cpu_limits_millicores]
    print()
    for line in tables:
        print(line)


def _tree_cpu(procs: list[psutil.Process]) -> float:
    """CPU-seconds of the processes and their children (MinerU's render pool)."""
    total = 0.0
    for p in procs:
        for q in [p, *p.children(recursive=True)]:
            try:
                total += _cpu(q)
            except psutil.Error:
                pass
    return total


def measure(tmp: Path, pdf: Path, args, limit_millicores: int) -> str:
    from testsupport.worker import Harness

    limit = limit_millicores or 1000 * (os.cpu_count() or 1)
    label = f"cpu_limit_millicores={limit_millicores}" if limit_millicores else "no CPU limit"
    print(f"== {label}", flush=True)
    results: dict[int, list[float]] = {n: [] for n in args.workers}
    cores_used: dict[int, list[float]] = {n: [] for n in args.workers}
    h = Harness(tmp / f"h{limit_millicores}", overrides={"worker_pool.cpu_limit_millicores": limit,
                                                         "worker_pool.cpu_millicores": min(limit, 1000)})
    try:
        h.start_redis()
        h.start_sim()
        for repeat in range(args.repeats):
            for n in args.workers:
                workers = [h.start_worker() for _ in range(n)]
                procs = [psutil.Process(p.popen.pid) for p in h.procs if p.alive()]
                c0 = _tree_cpu(procs)
                t0 = time.monotonic()
                job_id, = h.submit([pdf])
                row = h.wait_terminal([job_id], 1800)[job_id]
                seconds = time.monotonic() - t0
                cores = (_tree_cpu(procs) - c0) / seconds
                for w in workers:
                    w.stop()
                assert row["state"] == "done", row
                meta = json.loads((h.outputs / job_id / "metadata.json").read_text())
                results[n].append(seconds)
                cores_used[n].append(cores)
                print(f"run {repeat + 1}: {n} worker(s) {seconds:.1f} s for {meta['pages']} pages in "
                      f"{meta['parts']} parts; our processes (render pool included) used {cores:.2f} "
                      f"of {os.cpu_count()} cores (load average {os.getloadavg()[0]:.1f})", flush=True)
    finally:
        h.close()
    base = statistics.median(results[args.workers[0]])
    one = statistics.median(cores_used[args.workers[0]])
    lines = [f"{label}: {args.pages}-page document, medians of {args.repeats} interleaved runs "
             f"(one worker used {one:.2f} cores: a second can add at most {os.cpu_count() / one:.2f}x "
             f"on {os.cpu_count()} cores)"]
    for n, times in results.items():
        med = statistics.median(times)
        lines.append(f"  {n} worker(s): median {med:.1f} s, speed-up {base / med:.2f}x, "
                     f"cores used {statistics.median(cores_used[n]):.2f}")
    for line in lines:
        print(line, flush=True)
    return "\n".join(lines)


if __name__ == "__main__":
    main()
