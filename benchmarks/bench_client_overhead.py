"""Client overhead of load generators, side by side, against the simulator's near-zero-latency
'instant' profile (64-token streamed chat completions of 32-token prompts).

Every tool here runs one open-loop shape; benchmarks/bench_same_shape.py compares the tools in
the same closed- and open-loop shapes against a stub server and the simulator, with the server's
CPU per request and repeats (the comparison to quote), and also measures max rate, rate accuracy
and token counts.

    python benchmarks/bench_client_overhead.py [--tools ours,vllm,guidellm,aiperf,inference-perf]
                                               [--rate 50] [--requests 1000] [--skip-install]
                                               [--only ours|ttft] [--capacity RPS] [--no-pin]

For every tool, measured the same way:
  * CPU-seconds per 1,000 requests: the tool runs as a child process twice, with N/4 and N
    requests at the same rate; the CPU of the child and its waited-for descendants
    (RUSAGE_CHILDREN) is differenced, which cancels start-up (imports, tokenizer loading):
    cpu_per_1k = 1000 x (cpu(N) - cpu(N/4)) / (N - N/4).
  * achieved request rate at the offered rate (from the server's own request counter, so no
    tool's self-report is trusted).
For this bench additionally:
  * maximum sustained rate with schedule-lag p99 < 2 ms (rates doubled, then bisected);
  * TTFT accuracy at half that rate, per request (docs/bench-metrics.md, "TTFT accuracy"): the
    simulator stamps each request's arrival and first-token write on CLOCK_MONOTONIC
    (GET /sim/timings), the bench's records are joined to them by response id, and
    error = client TTFT - server TTFT = send-side delay + receive-side delay (p50/p99/max).
    By default this part runs with the client pinned to CPU 0 and the simulator to CPU 1
    (--client-cpu/--sim-cpu, --no-pin): on two shared cores the "error" is otherwise mostly the two
    processes preempting each other. The same rate is then measured unpinned, side by side.
    The tools table above is measured unpinned, as before.
  * --only ours: only this bench in the CPU table; --only ttft: no CPU table, only the max-rate
    search and TTFT accuracy; --capacity RPS skips the search (development runs).
Third-party tools are installed into their own virtualenvs under .cache/venvs/ (inference-perf
needs Python >= 3.12: found via pyenv or PATH, else skipped with the reason). inference-perf's
random data only drives /v1/completions (its chat API needs a dataset), so it streams
completions of the same lengths; everything else streams chat completions.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._bench_servers import ROOT, pinned, sim_process  # noqa: E402
from benchmarks._tools import TOOL_CWD, TOOLS, Shape, bindir_of, run_child  # noqa: E402
from benchmarks._ttft_accuracy import fetch_timings, join, summary, timings_mark  # noqa: E402

IN_TOK, OUT_TOK = 32, 64


def served(url: str) -> float:
    import httpx

    from bench.server_metrics import parse

    snap = parse(httpx.get(f"{url}/metrics", timeout=10).text)
    return snap.get("vllm:e2e_request_latency_seconds", {}).get("count", 0.0)


def measure(tool: str, url: str, rate: float, n: int, skip_install: bool) -> dict:
    bindir = bindir_of(tool, skip_install)
    if isinstance(bindir, str):
        return {"tool": tool, "error": bindir}
    shape = Shape("open", rate, 0, IN_TOK, OUT_TOK)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for size in (n // 4, n):
            argv, env = TOOLS[tool][1](url, shape, size, Path(tmp), bindir)
            s0 = served(url)
            try:
                cpu, wall, out = run_child(argv, env, TOOL_CWD if bindir else ROOT)
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                return {"tool": tool, "error": str(exc)[-600:]}
            results[size] = (cpu, wall, served(url) - s0)
    (c1, _, s1), (c2, w2, s2) = results[n // 4], results[n]
    if s2 < 0.8 * n:  # inference-perf runs for a duration: its count is Poisson
        return {"tool": tool, "error": f"the server saw only {s2:.0f} of {n} requests"}
    return {"tool": tool, "cpu_s_per_1k": 1000 * (c2 - c1) / max(1.0, s2 - s1),
            "startup_cpu_s": c1 - (c2 - c1) * s1 / max(1.0, s2 - s1), "served": s2, "wall_s": w2}


GAUGE_INTERVAL_S = [0.0]  # set from --gauge-interval-s


def _chat(rate: float, seconds: float):
    from bench.scenario import parse_scenario

    return parse_scenario({"kind": "chat", "name": "cap", "prompt_tokens": {"mean": IN_TOK},
                           "output_tokens": {"mean": OUT_TOK}, "prompt_pool": 64,
                           "server_gauge_interval_s": GAUGE_INTERVAL_S[0],
                           "load": {"rate_rps": rate, "duration_s": seconds, "warmup_s": 1, "seed": 0}}, "cap")


def _target(url: str):
    from bench.target import Target

    return Target(url, "tiny", None, 16384)


def max_rate(url: str, start: float, seconds: float) -> dict:
    """Highest rate with lag p99 < 2 ms and a valid run (doubled, then bisected 3 times). Each
    probe runs as long as the accuracy run (``seconds``): a 5 s probe passed by luck at rates
    whose 10 s run then went invalid, and "sustained" should mean the window that is reported."""
    from bench.runner import run_scenario
    from bench.validity import ValidityLimits

    seen: list[dict] = []

    def ok_at(rate: float) -> bool:
        s = run_scenario(_chat(rate, seconds), _target(url), limits=ValidityLimits(lag_p99_ms_max=2.0)).summary
        cpu = max((c["measured"] for c in s["validity"]["checks"] if c["check"].startswith("client CPU")), default=None)
        seen.append({"rate": rate, "lag_p99_ms": round(s["latency"]["lag_ms"]["p99"], 3), "cpu": cpu,
                     "valid": s["validity"]["valid"]})
        print(json.dumps(seen[-1]), flush=True)
        return s["validity"]["valid"]

    lo, hi, rate = None, None, start
    while rate < 20_000:
        if not ok_at(rate):
            hi = rate
            break
        lo, rate = rate, rate * 2
    for _ in range(3):
        if lo is None or hi is None:
            break
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ok_at(mid) else (lo, mid)
    return {"max_rate_rps": lo, "points": seen,
            **({} if lo else {"why": f"lag p99 >= 2 ms already at {start:g} req/s (other processes preempt "
                                     "the client)"})}


def ttft_accuracy(url: str, rate: float, seconds: float) -> dict:
    """One run at ``rate``; per-request TTFT error against the simulator's stamps (_ttft_accuracy)."""
    from bench.runner import run_scenario
    from bench.validity import ValidityLimits

    mark = timings_mark(url)
    load0 = os.getloadavg()
    out = run_scenario(_chat(rate, seconds), _target(url), limits=ValidityLimits(lag_p99_ms_max=2.0))
    server = fetch_timings(url, mark)
    s = out.summary
    res = summary(join(out.records, out.result.t0_ns, server["timings"]))
    hist_mean_ms = s["server"]["histograms"]["vllm:time_to_first_token_seconds"]["mean_s"] * 1000
    res.update({"rate_rps": rate, "valid": s["validity"]["valid"], "lag_p99_ms": s["latency"]["lag_ms"]["p99"],
                "server_entries_dropped": server["dropped"], "loadavg_1m_before_after": [load0[0], os.getloadavg()[0]],
                # the previous definition, for comparison with older notes: not a per-request figure
                "client_p99_minus_server_hist_mean_ms": s["latency"]["ttft_ms"]["p99"] - hist_mean_ms})
    return res


PCT = "linear percentiles"


def _fmt(d: dict) -> str:
    return " / ".join("—" if d[k] is None else f"{d[k]:.3f}" for k in ("p50", "p99", "max"))


def print_accuracy(columns: list[tuple[str, dict]]) -> None:
    print(f"\nTTFT accuracy at {columns[0][1]['rate_rps']:g} req/s (ms, p50 / p99 / max; {PCT}):")
    print("| | " + " | ".join(name for name, _ in columns) + " |\n|---|" + "---:|" * len(columns))
    rows = [("error = client TTFT - server TTFT", lambda r: _fmt(r["error_ms"])),
            ("send-side delay (server arrival - client send)", lambda r: _fmt(r["send_delay_ms"])),
            ("receive-side delay (client read - server write)", lambda r: _fmt(r["recv_delay_ms"])),
            ("client TTFT", lambda r: _fmt(r["client_ttft_ms"])),
            ("server TTFT (first-token write - arrival)", lambda r: _fmt(r["server_ttft_ms"])),
            ("requests joined / measured", lambda r: f"{r['joined']} / {r['requests']}"),
            ("schedule lag p99, run valid", lambda r: f"{r['lag_p99_ms']:.3f}, {r['valid']}"),
            ("load average (1 min) before, after", lambda r: "{:.2f}, {:.2f}".format(*r["loadavg_1m_before_after"]))]
    for label, cell in rows:
        print(f"| {label} | " + " | ".join(cell(r) for _, r in columns) + " |")


def ours_part(url: str, sim_pid: int, a: argparse.Namespace) -> dict:
    """Max sustained rate (pinned by default), then TTFT accuracy at half of it, pinned and not."""
    placement = None if a.no_pin else {os.getpid(): {a.client_cpu}, sim_pid: {a.sim_cpu}}
    pin = pinned(placement) if placement else contextlib.nullcontext(None)
    result: dict = {"pinning": "off (--no-pin)", "server_gauge_interval_s": GAUGE_INTERVAL_S[0]}
    print(f"server gauge sampling during these runs: "
          f"{'off' if not GAUGE_INTERVAL_S[0] else f'every {GAUGE_INTERVAL_S[0]:g} s'} (--gauge-interval-s)")
    with pin as now:
        if now:
            result["pinning"] = (f"client pid {os.getpid()} on CPU {sorted(now[os.getpid()])}, "
                                 f"simulator pid {sim_pid} on CPU {sorted(now[sim_pid])}")
        print(f"\nthis bench, max rate and TTFT accuracy: {result['pinning']}", flush=True)
        if a.capacity:
            result.update({"max_rate_rps": a.capacity, "points": [], "note": "--capacity given: no search"})
        else:
            result.update(max_rate(url, a.capacity_start, a.ttft_seconds))
        half = (result["max_rate_rps"] or a.capacity_start * 2) / 2
        result["half_rate_rps"] = half
        columns = [(f"pinned: client CPU {a.client_cpu}, sim CPU {a.sim_cpu}" if now else "not pinned",
                    ttft_accuracy(url, half, a.ttft_seconds))]
    if now:  # the same rate with the scheduler free to put both anywhere
        columns.append(("not pinned", ttft_accuracy(url, half, a.ttft_seconds)))
    result["ttft_accuracy"] = {name: col for name, col in columns}
    print_accuracy(columns)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tools", default="ours,vllm,guidellm,aiperf,inference-perf")
    ap.add_argument("--rate", type=float, default=50.0, help="offered rate for the CPU measurement, req/s")
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--skip-install", action="store_true", help="use .cache/venvs as they are")
    ap.add_argument("--no-capacity", action="store_true", help="skip this bench's max-rate search")
    ap.add_argument("--capacity-start", type=float, default=25.0, help="first rate of the max-rate search, req/s")
    ap.add_argument("--only", choices=("ours", "ttft"), help="ours: only this bench in the CPU table; "
                    "ttft: no CPU table, only the max-rate search and TTFT accuracy")
    ap.add_argument("--capacity", type=float, help="take this max sustained rate (req/s) instead of searching")
    ap.add_argument("--ttft-seconds", type=float, default=10.0, help="measured window of each TTFT-accuracy run, s")
    ap.add_argument("--gauge-interval-s", type=float, default=0.0,
                    help="the scenario's server_gauge_interval_s for the max-rate and accuracy runs: 0 (default) = "
                    "no /metrics sampling during the run, which would make the server render ~50 KB on its "
                    "event loop every interval, a stall inside some measured TTFTs; 1 = the bench's default")
    ap.add_argument("--client-cpu", type=int, default=0, help="CPU of this bench during max rate + TTFT accuracy")
    ap.add_argument("--sim-cpu", type=int, default=1, help="CPU of the simulator during max rate + TTFT accuracy")
    ap.add_argument("--no-pin", action="store_true", help="measure max rate and TTFT accuracy unpinned only")
    a = ap.parse_args()
    GAUGE_INTERVAL_S[0] = a.gauge_interval_s
    if a.only:
        a.tools = "ours" if a.only == "ours" else ""
    if not a.no_pin and a.client_cpu == a.sim_cpu:
        ap.error(f"--client-cpu and --sim-cpu are both {a.sim_cpu}: give them separate CPUs or pass --no-pin")
    rows = []
    # --timings-max-entries: room for one TTFT-accuracy run at any rate reached here (the ring keeps the newest)
    with sim_process("instant", "--timings-max-entries", "200000", api_key=None) as (url, sim_pid):
        print(f"simulator (instant) at {url}; {a.requests} requests at {a.rate:g} req/s, {IN_TOK} in / {OUT_TOK} out")
        for tool in [t for t in a.tools.split(",") if t]:
            row = measure(tool, url, a.rate, a.requests, a.skip_install)
            print(json.dumps(row), flush=True)
            rows.append(row)
        cap = None if a.no_capacity else ours_part(url, sim_pid, a)
    if rows:
        print("\n| tool | CPU-s per 1,000 requests | start-up CPU-s | note |\n|---|---:|---:|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['tool']} | — | — | {r['error'].splitlines()[-1][:120]} |")
        else:
            print(f"| {r['tool']} | {r['cpu_s_per_1k']:.2f} | {r['startup_cpu_s']:.2f} | served {r['served']:.0f} |")
    ok = [r for r in rows if "error" not in r and r["tool"] != "ours"]
    mine = next((r for r in rows if r["tool"] == "ours" and "error" not in r), None)
    if mine and ok:
        best = min(ok, key=lambda r: r["cpu_s_per_1k"])
        print(f"\nthis bench / best other ({best['tool']}): {mine['cpu_s_per_1k'] / best['cpu_s_per_1k']:.2f} "
              f"(target <= 0.5)")
    if cap:
        print(f"\nthis bench: {json.dumps(cap)}")


if __name__ == "__main__":
    main()
