"""Capacity rehearsal: what MinerU traffic does to each simulated GPU (virtual clock, seconds to run).

For each calibrated profile, prints its saturation capacity (pages/s, tokens/s) and, for offered
loads of 0.5x to 2x that capacity (Poisson page arrivals; each page sends its layout request, then
one request per block, as MinerU does): pages completed per second and output tokens/s while pages
arrive, page latency p50/p95, TTFT p95 and the deepest vLLM queue. Past capacity the server stays
at its token throughput while pages pile up in flight, so completed pages/s lags it over a finite
run. Numbers are the model's, calibrated to the MinerU2.5 report's throughput (see each profile's
sources); low-load latency rests on the step-time split, which those published numbers do not pin
down.

    python benchmarks/sim_capacity.py [--pages 600] [--profiles mineru25-h200,mineru25-a100]
"""

from __future__ import annotations

import argparse

from simulator.capacity import mineru_open_loop, mineru_saturation
from simulator.profile import load_profile

LOADS = (0.5, 0.9, 1.5, 2.0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=600)
    ap.add_argument("--profiles", default="mineru25-h200,mineru25-a100,mineru25-rtx4090")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    for name in args.profiles.split(","):
        profile = load_profile(name)
        cap = mineru_saturation(profile, pages=args.pages, seed=args.seed)
        print(f"{name}: capacity {cap.pages_per_s:.2f} pages/s, {cap.output_tokens_per_s:.0f} output tokens/s "
              f"(max_num_seqs {profile.engine.max_num_seqs})")
        print("  offered   pages/s  completed  tokens/s  page p50 s  page p95 s  TTFT p95 s  max waiting")
        for load in LOADS:
            r = mineru_open_loop(profile, cap.pages_per_s * load, pages=args.pages, seed=args.seed)
            print(f"  {load:4.1f}x {r.offered_pages_per_s:10.2f} {r.achieved_pages_per_s:10.2f} "
                  f"{r.output_tokens_per_s:9.0f} {r.page_latency_p50_s:11.1f} {r.page_latency_p95_s:11.1f} "
                  f"{r.ttft_p95_s:11.2f} {r.max_waiting:12d}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
