"""Fan-out speed-up: one 100-page document on 1, 2 and 4 workers (issue 4: >= 1.6x on 2).

Run: .venv/bin/python benchmarks/worker_fanout.py [--pages 100] [--workers 1 2 4]
Real Redis, the simulator (profile 'instant') and real MinerU on loopback. Each run starts fresh
workers, submits the document and times submit -> merged output stored.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "pdfs"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pages", type=int, default=100)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    args = parser.parse_args()
    from pdf_fixtures import make_pdf

    from worker.testing import Harness

    tmp = Path(tempfile.mkdtemp(prefix="worker-fanout-"))
    pdf = make_pdf(tmp / "big.pdf", args.pages, seed=1)
    results: dict[int, float] = {}
    for n in args.workers:
        h = Harness(tmp / f"w{n}")
        try:
            h.start_redis()
            h.start_sim()
            workers = [h.start_worker() for _ in range(n)]
            t0 = time.monotonic()
            job_id, = h.submit([pdf])
            row = h.wait_terminal([job_id], 1800)[job_id]
            results[n] = time.monotonic() - t0
            assert row["state"] == "done", row
            meta = json.loads((h.outputs / job_id / "metadata.json").read_text())
            print(f"{n} worker(s): {results[n]:.1f} s for {meta['pages']} pages in {meta['parts']} parts "
                  f"(load average {os.getloadavg()[0]:.1f})", flush=True)
            del workers
        finally:
            h.close()
    base = results[args.workers[0]]
    for n, seconds in results.items():
        print(f"speed-up with {n} worker(s): {base / seconds:.2f}x")


if __name__ == "__main__":
    main()
