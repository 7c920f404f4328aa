"""Time from `splitstack up` to healthy (median of N) and RSS of each component.

Run: .venv/bin/python benchmarks/stack_startup.py [--engine vllm|sim] [--runs 3]
Uses the `local` stack on free ports and a private state dir, so a running demo is untouched.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # testsupport/ is not installed
from bench.demo import chat_once
from stack.preflight import resolve_api_key
from testsupport.stack import local_stack


def tree_rss_mib(pid: int) -> float:
    try:
        proc = psutil.Process(pid)
        procs = [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total / 2**20


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--engine", default="vllm", choices=["vllm", "sim"])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    times, rss = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            stack = local_stack(Path(tmp) / f"s{run}", **{"inference_servers.0.engine": args.engine})
            try:
                t0 = time.monotonic()
                state = stack.up()
                times.append(time.monotonic() - t0)
                server = stack.spec.worker_server
                url = state["components"][f"server-{server.name}"]["url"]
                chat_once(url, server.model.name, resolve_api_key(stack.spec, stack.paths))
                httpx.get(state["components"]["prometheus"]["url"] + "/api/v1/query",
                          params={"query": "up"}, timeout=5)
                for name, c in state["components"].items():
                    rss.setdefault(name, []).append(tree_rss_mib(c["pid"]))
            finally:
                stack.down()
            print(f"run {run + 1}: healthy in {times[-1]:.1f} s")
    print(f"\nengine={args.engine}: up -> healthy median of {len(times)} = "
          f"{statistics.median(times):.1f} s (runs: {', '.join(f'{t:.1f}' for t in times)})")
    print("RSS after one request (process tree, MiB, median over runs):")
    for name, values in rss.items():
        print(f"  {name:<20} {statistics.median(values):8.1f}")


if __name__ == "__main__":
    main()
