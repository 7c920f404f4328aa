"""How the local stack starts worker replica ``i``: its command line and environment."""

from __future__ import annotations

import json
from pathlib import Path

from contract.spec import Spec
from contract.worker_env import (
    ENV_METRICS_PORT,
    ENV_OUTPUT_DIR,
    ENV_SERVER_URL,
    ENV_SPEC_FILE,
    redis_password_env,
)
from stack.component import BuildContext, Component, HealthCheck
from stack.secrets import api_key_file, output_store_key_files, queue_url_display, redis_password_file
from stack.topology import worker_engine_url
from worker.config import WorkerSettings

# supervisord's SIGTERM-to-SIGKILL time: the worker's own drain time plus its release and exit.
DRAIN_S = int(WorkerSettings.model_fields["drain_timeout_s"].default)
STOP_WAIT_S = DRAIN_S + 5


def write_resolved_spec(spec: Spec, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(spec.model_dump(mode="json", exclude_none=True), indent=1))
    return path


def _with_absolute_state_dir(spec: Spec, ctx: BuildContext) -> Spec:
    """The spec with the state folder as an absolute path: the worker resolves its input roots,
    the secrets folder it must refuse and its outputs to the same folders wherever it runs (in a
    container the project root is another folder; the state folder is mounted at its own path)."""
    return spec.model_copy(update={"local": spec.local.model_copy(update={"state_dir": str(ctx.paths.root)})})


def worker_component(ctx: BuildContext, i: int, *, name: str | None = None, port: int | None = None,
                     spec_file: str = "worker-spec.json", extra_env: dict[str, str] | None = None) -> Component:
    """Worker replica ``i``; the migration's monolithic pool passes its own program name, port,
    spec file and environment (stack/migration.py)."""
    spec = ctx.spec
    port = spec.worker_pool.metrics_port + i if port is None else port
    host = spec.local.host
    env = {
        spec.queue.url_env: queue_url_display(spec),  # the password comes in its own variable
        ENV_OUTPUT_DIR: str(ctx.paths.data / spec.output_store.path),
        # Explicit, because the launcher may run with CLI overrides the worker's own spec load
        # does not see; the port must match the Prometheus target and the health check.
        ENV_METRICS_PORT: str(port),
        # The spec exactly as the launcher resolved it (CLI overrides such as ports included):
        # the worker must not re-read a Pulumi file that says something else.
        ENV_SPEC_FILE: str(write_resolved_spec(_with_absolute_state_dir(spec, ctx),
                                               ctx.paths.config / spec_file)),
        "OMP_NUM_THREADS": "1",  # MinerU's numpy/PIL work must not oversubscribe the cores
        "MALLOC_ARENA_MAX": "2",  # fewer glibc arenas: bounded RSS with to_thread rendering
    }
    env.update(extra_env or {})
    engine_url = worker_engine_url(spec, i)
    if engine_url is not None:  # None: the engine runs in the worker process
        env[ENV_SERVER_URL] = engine_url
    secrets = {redis_password_env(spec): redis_password_file(ctx.paths),
               **output_store_key_files(spec, ctx.paths)}
    ref, key_file = spec.worker_server.api_key, api_key_file(spec, ctx.paths)
    if ref is not None and ctx.api_key and key_file is not None:
        secrets[ref.env] = key_file
    argv = [ctx.python, "-m", "splitstack.cli.worker_process", "--stack", spec.stack, "--index", str(i)]
    url = f"http://{host}:{port}"
    return Component(
        name or f"worker-{i}", "worker", argv, HealthCheck("http", f"{url}/readyz"), url, port,
        env=env, autorestart=True, priority=400, cwd=ctx.project_root, secrets=secrets,
        term_leader_only=True, stop_wait_s=STOP_WAIT_S,
    )
