"""How long Ctrl-C takes to stop `bench locust run --processes 2`, under CPU load.

Starts the instant simulator, then N times: `bench locust run chat-smoke --processes 2`, waits
until the master logs "All users spawned" (+1 s of load), sends SIGINT to `bench` alone (as a
terminal's Ctrl-C does: the Locust processes run in their own sessions), and prints per run the
exit code, when the master and each worker exited and when `bench` itself exited (seconds after
the SIGINT), and whether the workers drained. ``--busy K`` adds K busy-loop processes for the
duration (bounded: they are killed at the end), to reproduce a loaded CI machine.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/locust_ctrl_c.py --runs 10 --busy 4
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

from sim.servers import API_KEY, sim_server  # noqa: E402


def one_run(url: str, out: Path, limit_s: float, after_spawn_s: float) -> dict:
    env = {**os.environ, "SIM_KEY": API_KEY}
    argv = [sys.executable, "-m", "splitstack.cli.bench", "locust", "run", "chat-smoke", "--processes", "2",
            "--url", url, "--model", "tiny", "--api-key-env", "SIM_KEY", "--users", "2", "--duration-s", "120",
            "--out", str(out)]
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = out / "logs" / "master.log"
    end = time.monotonic() + 120
    while "All users spawned" not in (log.read_text() if log.exists() else ""):
        if proc.poll() is not None or time.monotonic() > end:
            proc.kill()
            return {"error": "never loaded", "stderr": proc.communicate()[1][-2000:]}
        time.sleep(0.2)
    time.sleep(after_spawn_s)
    kids = {p.pid: p for p in psutil.Process(proc.pid).children(recursive=True)}
    names = {}
    for pid, p in kids.items():
        cmd = " ".join(p.cmdline())
        names[pid] = "worker" if "--worker" in cmd else ("master" if "--master" in cmd else "other")
    t0 = time.monotonic()
    print(f'SIGINT at {time.time():.3f}', flush=True)
    proc.send_signal(signal.SIGINT)
    gone: dict[int, float] = {}
    while time.monotonic() - t0 < limit_s:
        for pid, p in kids.items():
            if pid not in gone:
                try:
                    if p.status() == psutil.STATUS_ZOMBIE:
                        gone[pid] = time.monotonic() - t0
                except psutil.NoSuchProcess:
                    gone[pid] = time.monotonic() - t0
        if proc.poll() is not None and len(gone) == len(kids):
            break
        time.sleep(0.05)
    bench_s = time.monotonic() - t0 if proc.poll() is not None else None
    left = [pid for pid in kids if pid not in gone]
    for pid in left:
        try:
            kids[pid].kill()
        except psutil.NoSuchProcess:
            pass
    if proc.poll() is None:
        proc.kill()
    _, err = proc.communicate()
    man = out / "locust-records" / "collection.json"
    drained = None
    if man.exists():
        drained = [w["drained"] for w in json.loads(man.read_text())["workers"]]
    return {"rc": proc.returncode, "bench_exit_s": None if bench_s is None else round(bench_s, 2),
            "exits_s": sorted((names[pid], round(t, 2)) for pid, t in gone.items()),
            "left_running": [names[pid] for pid in left], "drained": drained,
            "stderr_tail": err[-1500:]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--busy", type=int, default=0, help="busy-loop processes during the runs")
    ap.add_argument("--limit-s", type=float, default=90.0, help="give up on one stop after this long")
    ap.add_argument("--after-spawn-s", type=float, default=1.0,
                    help="Ctrl-C this long after the master logged all users spawned (the test waits 1 s)")
    ap.add_argument("--keep", type=Path, default=None, help="keep every run's folder (logs) here")
    a = ap.parse_args()
    busy = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(a.busy)]
    try:
        with sim_server("--profile", "instant", "--model-name", "tiny") as srv:
            base = a.keep or Path(tempfile.mkdtemp(prefix="ctrlc-"))
            for i in range(a.runs):
                r = one_run(srv.url, base / f"run{i}", a.limit_s, a.after_spawn_s)
                print(f"run {i}: load {os.getloadavg()[0]:.1f} {json.dumps(r)}", flush=True)
    finally:
        for b in busy:
            b.kill()
            b.wait()


if __name__ == "__main__":
    main()
