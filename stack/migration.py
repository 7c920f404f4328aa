"""The production rollout on the local stack: both topologies at once.

With ``local.migration_monolithic_workers: N`` (deployment_mode split), the stack runs, beside
the split pool and its shared server:

* ``router``: reads the jobs stream with the workers' group and forwards each document to the
  split or the monolithic cohort's stream by the split share (worker/router.py);
* ``engine-w<i>`` and ``mono-worker-<i>``, i < N: the monolithic pool, each worker with its own
  engine (the private-server twin, stack/topology.py), metrics ports after the split workers';
* every worker reads its cohort's stream (``SPLITSTACK_MIGRATION_COHORTS=1``).

`runbook migrate --to 100` stops the ``mono-worker-*`` and ``engine-w*`` programs.
"""

from __future__ import annotations

from dataclasses import replace

from contract.enums import InProcessBackend
from contract.migration import ENV_COHORT_STREAMS
from contract.spec import DeploymentMode, Spec
from contract.worker_env import redis_password_env
from stack.component import BuildContext, Component, HealthCheck, SetupError
from stack.secrets import queue_url_display, redis_password_file
from stack.topology import private_engine_components
from stack.workers import worker_component

MONO_WORKER_PREFIX = "mono-worker-"
ROUTER = "router"


def monolithic_pool_spec(spec: Spec) -> Spec:
    """The spec the monolithic cohort's workers run with."""
    pool = spec.worker_pool
    return spec.model_copy(update={
        "deployment_mode": DeploymentMode.monolithic,
        "worker_pool": pool.model_copy(update={
            "replicas": spec.local.migration_monolithic_workers,
            "in_process": pool.in_process.model_copy(update={"backend": InProcessBackend.private_server})}),
    })


def mono_worker_port(spec: Spec, i: int) -> int:
    return spec.worker_pool.metrics_port + spec.worker_pool.replicas + i


def router_port(spec: Spec) -> int:
    return mono_worker_port(spec, spec.local.migration_monolithic_workers)


def with_migration(ctx: BuildContext, components: list[Component]) -> list[Component]:
    """``components`` plus the migration's router and monolithic pool, the split workers reading
    their cohort's stream; unchanged when the stack is not migrating."""
    spec = ctx.spec
    n = spec.local.migration_monolithic_workers
    if n == 0:
        return components
    if spec.deployment_mode is not DeploymentMode.split:
        raise SetupError(f"local.migration_monolithic_workers={n} runs the monolithic pool beside the split "
                         "one: set deployment_mode split (or local.migration_monolithic_workers 0)")
    cohort = {ENV_COHORT_STREAMS: "1"}
    out = [replace(c, env={**c.env, **cohort}) if c.role == "worker" else c for c in components]
    mono = replace(ctx, spec=monolithic_pool_spec(spec))
    out += private_engine_components(mono)
    out += [worker_component(mono, i, name=f"{MONO_WORKER_PREFIX}{i}", port=mono_worker_port(spec, i),
                             spec_file="worker-spec-monolithic.json", extra_env=cohort) for i in range(n)]
    port = router_port(spec)
    url = f"http://{spec.local.host}:{port}"
    password_env = redis_password_env(spec)
    argv = [ctx.python, "-m", "worker.router", "--redis-url", queue_url_display(spec), "--stream", spec.queue.stream,
            "--group", spec.queue.group, "--host", spec.local.host, "--health-port", str(port),
            "--password-env", password_env]
    out.append(Component(ROUTER, "worker", argv, HealthCheck("http", f"{url}/healthz"), url, port,
                         priority=350, cwd=ctx.project_root,
                         secrets={password_env: redis_password_file(ctx.paths)}))
    return out
