"""The worker's run-time settings: the deployment spec's worker_pool/queue plus the few things
that only the environment knows (URLs, the API key, this replica's index and port)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from contract.enums import InProcessBackend
from contract.inputs import forbidden_dirs, input_roots
from contract.outputs import local_output_dir
from contract.spec import DeploymentMode, Spec, Target, WorkerBackend
from contract.spec_loader import project_root
from contract.worker_env import (
    ENV_DRAIN_TIMEOUT,
    ENV_METRICS_PORT,
    ENV_OUTPUT_DIR,
    ENV_RSS_FRACTION,
    ENV_SERVER_URL,
    ENV_URL_ALLOWLIST,
    redis_password_env,
    with_password,
)


class ConfigError(Exception):
    """A setting the worker needs is missing; the message names it and how to set it."""


class WorkerSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    spec: Spec
    index: int = Field(ge=0, description="Replica index (local port offset, consumer name).")
    server_url: str = Field(description="Base URL of the inference server; empty when the "
                            "engine runs in the worker process (monolithic mode).")
    redis_url: str
    output_dir: Path = Field(description="Kind directory: the outputs; kind s3: the local "
                             "folder where outputs are staged before their upload.")
    api_key: str | None = None
    metrics_port: int = Field(ge=0, le=65535, description="0 = pick a free port (tests).")
    consumer: str = Field(description="Consumer name in the group: unique per process.")
    url_allowlist: tuple[str, ...] = Field(
        default=(), description="URL prefixes a job's source may start with; empty = paths only.")
    input_roots: tuple[Path, ...] = Field(
        default=(), description="Folders a job's path must resolve into (contract/inputs.py).")
    forbidden_dirs: tuple[Path, ...] = Field(
        default=(), description="Folders a job's path must never resolve into (the stack's secrets).")
    drain_timeout_s: float = Field(
        default=15.0, gt=0,
        description="On SIGTERM, how long in-flight jobs may run before they are released back "
        "to the queue (below supervisord's stopwaitsecs=20 and a pod's grace period of 30 s).")
    rss_limit_fraction: float = Field(
        default=0.9, gt=0, le=1,
        description="Exit for a process recycle when RSS exceeds this share of "
        "worker_pool.memory_limit_mib (supervisord / Kubernetes restart it).")

    model_path: str | None = Field(
        default=None, description="Monolithic in-process engine: the model it loads.")

    @property
    def in_process(self) -> InProcessBackend | None:
        """The in-process engine backend, or None when requests go over HTTP (split mode, and
        monolithic mode's private-server twin)."""
        if self.spec.deployment_mode is not DeploymentMode.monolithic:
            return None
        backend = self.spec.worker_pool.in_process.backend
        return None if backend is InProcessBackend.private_server else backend

    @property
    def mode(self) -> str:
        """What the metrics and logs say the worker runs as: split, or monolithic/<backend>."""
        if self.spec.deployment_mode is DeploymentMode.split:
            return "split"
        return f"monolithic/{self.spec.worker_pool.in_process.backend.value}"

    @property
    def topology(self) -> str:
        """The migration cohort this worker belongs to: split or monolithic (contract/migration.py)."""
        return "split" if self.spec.deployment_mode is DeploymentMode.split else "monolithic"

    @property
    def pool(self):
        return self.spec.worker_pool

    @property
    def backend(self) -> WorkerBackend:
        return self.spec.worker_pool.backend

    @property
    def model_name(self) -> str:
        return self.spec.worker_server.model.name


def settings_from_env(spec: Spec, index: int, env: dict[str, str] | None = None) -> WorkerSettings:
    env = dict(os.environ if env is None else env)
    mono = spec.deployment_mode is DeploymentMode.monolithic
    in_process = mono and spec.worker_pool.in_process.backend is not InProcessBackend.private_server
    if mono and not in_process and not env.get(ENV_SERVER_URL):
        raise ConfigError(
            "worker_pool.in_process.backend 'private-server': set "
            f"{ENV_SERVER_URL} to this worker's own engine (the local stack sets it per worker)")
    local = spec.target is Target.local
    server = spec.worker_server
    server_url = "" if in_process else env.get(ENV_SERVER_URL) or (
        f"http://{spec.local.host}:{server.port}" if local
        else f"http://{server.name}.{spec.namespace}.svc.cluster.local:{server.port}")
    redis_url = with_password(env.get(spec.queue.url_env) or (
        f"redis://{spec.local.host}:{spec.queue.port}/0" if local
        else f"redis://redis.{spec.namespace}.svc.cluster.local:{spec.queue.port}/0"),
        env.get(redis_password_env(spec)))
    out = env.get(ENV_OUTPUT_DIR)
    if not out:
        if not local:
            raise ConfigError(f"set {ENV_OUTPUT_DIR} to the mounted output volume")
        out = str(local_output_dir(spec, project_root()))
    api_key = None
    if server.api_key is not None and not in_process:
        api_key = env.get(server.api_key.env)
        if not api_key:
            raise ConfigError(
                f"inference server {server.name!r} requires an API key: set the environment "
                f"variable {server.api_key.env} (the stack launcher passes it to the workers)")
    port = int(env.get(ENV_METRICS_PORT) or (spec.worker_pool.metrics_port + (index if local else 0)))
    allow = tuple(p.strip() for p in env.get(ENV_URL_ALLOWLIST, "").split(",") if p.strip())
    extra: dict = {}
    if env.get(ENV_DRAIN_TIMEOUT):
        extra["drain_timeout_s"] = float(env[ENV_DRAIN_TIMEOUT])
    if env.get(ENV_RSS_FRACTION):
        extra["rss_limit_fraction"] = float(env[ENV_RSS_FRACTION])
    model_path = None
    if in_process:
        from worker.inprocess import EngineUnavailable, resolve_model_path
        try:
            model_path = resolve_model_path(spec.worker_pool.in_process.model_path,
                                            server.model.source, env)
        except EngineUnavailable as exc:
            raise ConfigError(str(exc)) from None
    root = project_root()
    return WorkerSettings(
        model_path=model_path,
        **extra,
        spec=spec, index=index, server_url=server_url, redis_url=redis_url, output_dir=Path(out),
        api_key=api_key, metrics_port=port, url_allowlist=allow,
        input_roots=tuple(input_roots(spec, root)), forbidden_dirs=tuple(forbidden_dirs(spec, root)),
        consumer=f"{socket.gethostname()}-w{index}-{os.getpid()}",
    )
