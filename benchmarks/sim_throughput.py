"""How fast is the simulator? Prints max sustained streamed completions/s on one core and CPU-s per 1,000 requests.

The simulator runs as a real process (``python -m splitstack.cli.sim serve --profile instant``) pinned to
one CPU; a raw-socket asyncio load generator runs pinned to another CPU and keeps C streamed chat
completions in flight (64 tokens each, ``max_tokens=64``), for each C in --concurrency, for
--seconds each. Every response is checked (role chunk + 64 token events + [DONE]). The server's
CPU time comes from /proc (psutil) around each level.

    python benchmarks/sim_throughput.py [--seconds 8] [--concurrency 16,64,256]

On a 2-core machine the load generator competes with anything else running: numbers are a
lower bound of the simulator's capacity.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # testsupport/ is not installed
from testsupport.procs import NotReady, free_port, running

SIM_READY_S = 30.0
TOKENS = 64
BODY = {"model": "tiny", "messages": [{"role": "user", "content": "Say something."}], "max_tokens": TOKENS,
        "stream": True}


def build_request(port: int) -> bytes:
    body = json.dumps(BODY).encode()
    return (b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:%d\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n" % (port, len(body))) + body


async def worker(port: int, request: bytes, stop_at: float, stats: dict) -> None:
    """One keep-alive connection, requests back to back. A raw HTTP/1.1 client (no parsing beyond
    finding the end of the chunked body) so the load generator costs less CPU than the server."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while time.perf_counter() < stop_at:
            writer.write(request)
            buf = bytearray()
            while not buf.endswith(b"0\r\n\r\n"):
                chunk = await reader.read(65536)
                if not chunk:
                    raise ConnectionError("server closed the connection")
                buf += chunk
            ok = buf.startswith(b"HTTP/1.1 200") and buf.count(b"data: ") == TOKENS + 2 and b"data: [DONE]" in buf
            stats["ok" if ok else "bad"] += 1
    finally:
        writer.close()


async def run_level(port: int, concurrency: int, seconds: float, server: psutil.Process) -> dict:
    stats = {"ok": 0, "bad": 0}
    request = build_request(port)
    await asyncio.gather(*(worker(port, request, time.perf_counter() + 0.5, {"ok": 0, "bad": 0})
                           for _ in range(concurrency)))  # warm-up
    cpu0 = server.cpu_times()
    t0 = time.perf_counter()
    await asyncio.gather(*(worker(port, request, t0 + seconds, stats) for _ in range(concurrency)))
    elapsed = time.perf_counter() - t0
    cpu1 = server.cpu_times()
    cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    return {"concurrency": concurrency, "rps": stats["ok"] / elapsed, "ok": stats["ok"], "bad": stats["bad"],
            "server_cpu_s_per_1000": 1000 * cpu / max(1, stats["ok"]), "server_cpu_util": cpu / elapsed}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--concurrency", default="16,64,256")
    ap.add_argument("--server-cpu", type=int, default=0)
    ap.add_argument("--client-cpu", type=int, default=1)
    ap.add_argument("--profile", default="instant", help="instant: the simulator's own ceiling; a paced profile "
                                                         "(e.g. vllm-cpu-tiny) shows the cost of one write per token")
    args = ap.parse_args()
    port = free_port()
    cmd = [sys.executable, "-m", "splitstack.cli.sim", "serve", "--port", str(port), "--profile", args.profile,
           "--seed", "1"]
    try:
        with running("sim", cmd, port=port, ready="/health", ready_timeout_s=SIM_READY_S,
                     preexec_fn=lambda: os.sched_setaffinity(0, {args.server_cpu})) as sim:
            return measure(args, port, psutil.Process(sim.pid))
    except NotReady as exc:
        raise SystemExit(f"simulator did not start: {exc}") from exc


def measure(args: argparse.Namespace, port: int, server: psutil.Process) -> int:
    os.sched_setaffinity(0, {args.client_cpu})
    print(f"simulator pid {server.pid} pinned to cpu {args.server_cpu}; client on cpu {args.client_cpu}; "
          f"{TOKENS} tokens per streamed chat completion, profile {args.profile}")
    results = []
    for c in [int(x) for x in args.concurrency.split(",")]:
        r = asyncio.run(run_level(port, c, args.seconds, server))
        results.append(r)
        print(f"  concurrency {c:4d}: {r['rps']:8.1f} completions/s  server CPU {r['server_cpu_util']:.2f} cores  "
              f"{r['server_cpu_s_per_1000']:.2f} CPU-s/1000 req  ({r['ok']} ok, {r['bad']} bad)")
    best = max(results, key=lambda r: r["rps"])
    print(f"max sustained streamed completions/s (one core, {TOKENS} tokens): {best['rps']:.1f} "
          f"at concurrency {best['concurrency']}")
    print(f"server CPU-seconds per 1,000 requests: {best['server_cpu_s_per_1000']:.2f} "
          f"(one saturated core: ~{1000 / best['server_cpu_s_per_1000']:.0f} completions/s)")
    return 1 if any(r["bad"] for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
