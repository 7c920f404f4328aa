"""The pipeline scenario against a stack the launcher did not start, in both completion modes.

Run: .venv/bin/python benchmarks/bench_pipeline_deployed.py [--rate 2] [--duration 15] [--workers 2]

Real Redis, the simulator (profile 'instant') and real MinerU workers on loopback, started with
testsupport/worker.py's harness (no `splitstack up`): to the bench this is a deployed stack reached
through its queue. `bench run --stack dev --queue-url-env` runs twice, first with --outputs-at
(outputs read and verified), then from the job records alone. Prints per mode: document latency
p50/p95, pages/s, documents/h, requests per page, the canary's latency and the client's CPU per
1,000 documents. The first mode also warms the workers up: compare modes by what they verify.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import yaml
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # testsupport/ is not installed
from bench.pdfgen import make_pdf
from splitstack.cli.bench import app
from testsupport.worker import Harness


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=2.0, help="documents/s")
    ap.add_argument("--duration", type=float, default=15.0, help="measured window, s")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-deployed-"))
    h = Harness(tmp / "stack")
    try:
        h.start_redis()
        h.start_sim()
        for _ in range(args.workers):
            h.start_worker()
        for i, n in enumerate((1, 2, 1, 3)):
            make_pdf(tmp / "docs" / f"d{i}.pdf", n, seed=i)
        scn = tmp / "scenario.yaml"
        scn.write_text(yaml.safe_dump({
            "kind": "pipeline", "name": "deployed", "documents": {"directory": str(tmp / "docs")},
            "load": {"mode": "open", "arrival": "constant", "rate_rps": args.rate, "duration_s": args.duration,
                     "warmup_s": 2, "cooldown_s": 2}}))
        print("| mode | exit | docs | latency p50 / p95 s | pages/s | docs/h | requests/page | canary s | "
              "client CPU-s / 1k docs |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for mode, extra in (("--outputs-at", ["--outputs-at", str(h.outputs)]), ("job records", [])):
            out = tmp / mode.strip("-").replace(" ", "-")
            res = CliRunner().invoke(app, ["run", str(scn), "--stack", "dev", "--queue-url-env", "BENCH_Q",
                                           "--out", str(out), *extra], env={"BENCH_Q": h.redis_url})
            s = json.loads((out / "summary.json").read_text())
            lat, tp = s["latency"]["doc_latency_s"], s["throughput"]
            rpp = s["requests_per_page"].get("mean")
            print(f"| {mode} | {res.exit_code} | {lat['n']} | {lat['p50']:.2f} / {lat['p95']:.2f} | "
                  f"{tp['pages_per_s']:.2f} | {tp['documents_per_h']:.0f} | "
                  f"{'not measured' if rpp is None else f'{rpp:.1f}'} | {s['pipeline']['canary']['latency_s']:.2f} | "
                  f"{s['run']['client']['cpu_s_per_1k_requests']:.1f} |")
    finally:
        h.close()


if __name__ == "__main__":
    main()
