"""Worker circuit breakers stuck open, and the worker security-patch procedure: a
rolling restart or image change, one replica at a time, checked after each."""

from __future__ import annotations

from functools import partial

from prometheus_client.parser import text_string_to_metric_families

from contract.metrics import BREAKER_STATE, BreakerState
from runbooks.actions.runner import Step, StepFailed, health_step, run_plan, wait_healthy
from runbooks.cases import Case
from runbooks.context import ActionContext
from runbooks.diagnose.engine import server_fault
from runbooks.model import PlatformError, Refused, Report
from runbooks.names import Action
from runbooks.params import PatchWorkersParams, RestartWorkersParams
from runbooks.platforms.base import WORKERS
from runbooks.platforms.specpatch import typed_changes
from runbooks.suggestion import Suggestion


def breaker_states(ctx: ActionContext) -> tuple[dict[str, float], str]:
    """Breaker state per worker, and where it came from (Prometheus, else the workers' /metrics)."""
    if ctx.prometheus is not None:
        try:
            states = ctx.prometheus.breaker_states()
            if states:
                return states, f"Prometheus {ctx.prometheus.url}"
        except PlatformError:
            pass  # fall back to asking the workers directly
    out: dict[str, float] = {}
    for unit in ctx.platform.units(WORKERS):
        r = ctx.platform.http(unit, "GET", "/metrics", timeout_s=5)
        if r.status != 200:
            continue
        for family in text_string_to_metric_families(r.text):
            for sample in family.samples:
                if sample.name == BREAKER_STATE:
                    out[unit] = max(out.get(unit, 0.0), sample.value)
    return out, "the workers' /metrics"


def restart_workers(ctx: ActionContext, p: RestartWorkersParams) -> Report:
    server = ctx.server_component(None)
    s_state = ctx.platform.state(server)
    evidence = [s_state.line()]
    if not s_state.healthy:
        raise Refused(f"{server} is not healthy ({s_state.detail}): the breakers are open because "
                      "of it and a worker restart cannot help; run `runbook restart-server` first")
    states, source = breaker_states(ctx)
    open_ = sorted(k for k, v in states.items() if v >= BreakerState.open)
    if not p.force:
        # /health answers, but does the server answer completions? A hung or failing server
        # opens every breaker, and restarting the workers only drops their documents' progress.
        fault = server_fault(ctx, server)
        if fault is not None:
            raise Refused(f"{server} answers /health but not completions ({'; '.join(fault.evidence)}): "
                          "the breakers are open because of it and a worker restart cannot help; run "
                          "`runbook restart-server --force` (or pass --force to restart the workers anyway)")
    w_state = ctx.platform.state(WORKERS)
    evidence += [w_state.line(), f"breaker state from {source}: " + (
        ", ".join(f"{k}={BreakerState(int(v)).name}" for k, v in sorted(states.items())) or "no data")]
    if not open_ and w_state.healthy and not p.force:
        return Report(action=Action.RESTART_WORKERS, outcome="noop", evidence=evidence,
                      summary="no worker breaker is open and every worker is healthy")
    steps: list[Step] = []
    for unit in ctx.platform.units(WORKERS):
        steps += [Step("restart", unit, "resets its circuit breaker (rolling: one at a time)",
                       partial(ctx.platform.restart, unit), restarts=unit),
                  health_step(ctx, unit)]

    def breakers_closed() -> str:
        deadline = ctx.clock() + ctx.safety.breaker_close_timeout_s
        while True:
            now, _ = breaker_states(ctx)
            still = sorted(k for k, v in now.items() if v >= BreakerState.open)
            if not still:
                return "no breaker open"
            if ctx.clock() >= deadline:
                raise StepFailed(f"breakers still open after {ctx.safety.breaker_close_timeout_s:g} s: "
                                 f"{', '.join(still)}")
            ctx.sleep(ctx.safety.poll_interval_s)

    steps.append(Step("check", WORKERS, "no circuit breaker open", breakers_closed, compensate=False))
    return run_plan(ctx, Action.RESTART_WORKERS, steps, case=Case.BREAKER_STUCK_OPEN, evidence=evidence,
                    summary=f"restart {len(steps) // 2} worker unit(s) one at a time to reset open breakers",
                    next_steps=[Suggestion(action=Action.TUNE,
                                           params={"set": {"circuit_breaker.recovery_timeout_s": "30"}},
                                           comment="if it recurs: the recovery timeout is too long")])


def patch_workers(ctx: ActionContext, p: PatchWorkersParams) -> Report:
    tag = typed_changes(ctx.platform.spec, WORKERS, {"image_tag": p.image_tag})["image_tag"]
    state = ctx.platform.state(WORKERS)
    current = ctx.platform.settings(WORKERS)["image_tag"]
    evidence = [state.line(), f"workers run image tag {current} (replicas report {state.version or 'n/a'})"]
    if current == tag and state.version == tag and state.healthy:
        return Report(action=Action.PATCH_WORKERS, outcome="noop", evidence=evidence,
                      summary=f"every worker already runs {tag} and is healthy")
    if not state.healthy:
        raise Refused(f"workers are not healthy before the patch ({state.detail}): a rolling update "
                      "would take healthy replicas down too; run `runbook diagnose` first")

    def undo() -> str:
        ctx.platform.apply_settings(WORKERS, {"image_tag": current})
        wait_healthy(ctx, WORKERS)
        return f"image tag back to {current}"

    def all_patched() -> str:
        version = ctx.platform.state(WORKERS).version
        if version != tag:
            raise StepFailed(f"replicas report {version!r}, expected {tag!r}")
        return f"all replicas on {tag}"

    steps = [Step("set-image", WORKERS, f"{current} -> {tag}, rolling, one replica at a time",
                  lambda: ctx.platform.apply_settings(WORKERS, {"image_tag": tag}), undo=undo),
             health_step(ctx, WORKERS),
             Step("check", WORKERS, f"every replica runs {tag}", all_patched)]
    return run_plan(ctx, Action.PATCH_WORKERS, steps, case=Case.WORKER_SECURITY_PATCH, evidence=evidence,
                    summary=f"roll the workers to image tag {tag} with zero downtime",
                    next_steps=["re-scan the image to confirm the CVE is gone"])
