"""High latency from a queue backlog, and performance tuning: change a knob
(max_num_batched_tokens, gpu_memory_utilization, worker concurrency, breaker recovery...) or the
replica count, validated by the spec model, with the old value restored if health fails."""

from __future__ import annotations

from runbooks.actions.runner import Step, health_step, run_plan, wait_healthy
from runbooks.cases import Case
from runbooks.context import ActionContext
from runbooks.model import Refused, Report
from runbooks.names import Action
from runbooks.params import ScaleParams, TuneParams
from runbooks.platforms.base import WORKERS
from runbooks.platforms.specpatch import SERVER_SETTINGS, WORKER_SETTINGS, typed_changes
from runbooks.suggestion import Suggestion


def _component_for(ctx: ActionContext, keys: set[str], server: str | None) -> str:
    if keys <= set(SERVER_SETTINGS) - {"image_tag", "sim_profile", "extra_args"}:
        return ctx.server_component(server)
    if keys <= set(WORKER_SETTINGS) - {"image_tag"}:
        return WORKERS
    raise Refused(f"cannot tune {', '.join(sorted(keys))} together: server knobs are "
                  f"{', '.join(s for s in SERVER_SETTINGS if s not in ('image_tag', 'sim_profile', 'extra_args'))}; "
                  f"worker knobs are {', '.join(s for s in WORKER_SETTINGS if s != 'image_tag')} "
                  "(versions change with upgrade-server / patch-workers)")


def tune(ctx: ActionContext, p: TuneParams) -> Report:
    comp = _component_for(ctx, set(p.set), p.server)
    new = typed_changes(ctx.platform.spec, comp, p.set)  # the spec's own validation
    current = ctx.platform.settings(comp)
    changes = {k: v for k, v in new.items() if current.get(k) != v}
    evidence = [f"{comp} now: " + ", ".join(f"{k}={current.get(k)}" for k in new)]
    if not changes:
        return Report(action=Action.TUNE, outcome="noop", evidence=evidence,
                      summary=f"{comp} already runs with " + ", ".join(f"{k}={v}" for k, v in new.items()))
    before = {k: current.get(k) for k in changes}

    def undo() -> str:
        ctx.platform.apply_settings(comp, before)
        wait_healthy(ctx, comp)
        return ", ".join(f"{k}={v}" for k, v in before.items())

    steps = [
        Step("set", comp, ", ".join(f"{k}: {before[k]} -> {v}" for k, v in changes.items())
             + " (restarts it)", lambda: ctx.platform.apply_settings(comp, changes), undo=undo),
        health_step(ctx, comp),
    ]
    return run_plan(ctx, Action.TUNE, steps, evidence=evidence, case=Case.TUNING,
                    summary=f"set {', '.join(f'{k}={v}' for k, v in changes.items())} on {comp}",
                    next_steps=[Suggestion(action=Action.DIAGNOSE,
                                           comment="watch queue depth, KV usage and TTFT p95 afterwards")])


def scale(ctx: ActionContext, p: ScaleParams) -> Report:
    spec = ctx.spec
    if ctx.platform.kind == "local":
        ctx.platform.scale(p.component, p.replicas)  # the local platform refuses, naming the fix
    if p.component == WORKERS:
        ceiling = spec.worker_pool.max_replicas or max(spec.worker_pool.replicas, 12)
        if p.replicas > ceiling:
            raise Refused(f"workers: {p.replicas} replicas is above worker_pool.max_replicas "
                          f"({ceiling}); more workers only queue at the server (requirement CAP-5 caps at 12)")
    else:
        server = ctx.server(p.component.removeprefix("server-"))
        pool = spec.gpu_node_pool
        gpus = pool.total_gpus * (pool.slices_per_gpu if pool.gpu_sharing != "none" else 1) if pool else 0
        need = p.replicas * server.tensor_parallel_size
        if pool is not None and need > gpus:
            raise Refused(f"{p.component}: {p.replicas} replicas need {need} GPUs, the pool has "
                          f"{gpus}; raise gpu_node_pool.node_count and `pulumi up` first")
    state = ctx.platform.state(p.component)
    current = len(state.pids_or_pods)
    evidence = [state.line()]
    if current == p.replicas and state.healthy:
        return Report(action=Action.SCALE, outcome="noop", evidence=evidence,
                      summary=f"{p.component} already runs {p.replicas} healthy replicas")
    steps = [Step("scale", p.component, f"{current} -> {p.replicas} replicas",
                  lambda: ctx.platform.scale(p.component, p.replicas),
                  undo=lambda: ctx.platform.scale(p.component, current))]
    if p.replicas > 0:
        steps.append(health_step(ctx, p.component))
    return run_plan(ctx, Action.SCALE, steps, evidence=evidence, case=Case.QUEUE_BACKLOG,
                    summary=f"scale {p.component} to {p.replicas}")
