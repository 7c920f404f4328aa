"""The rollback: switch between the split architecture and monolithic workers, and back.

``runbook rollback --to monolithic`` is the one-flag rollback (``deployment_mode``): every
worker runs the model itself (a GPU each) and no shared inference server runs;
``--to split`` returns. The dry run prints the plan: the flag, the worker pool, the server
stopped or started, the GPUs the target mode needs and whether the cluster fits
(contract/cluster_fit.py). ``--apply`` performs it through the platform
(:meth:`~runbooks.platforms.base.Platform.set_deployment_mode`: new engines first, workers
rolled one at a time, each draining, then the old engines stopped), checks the result, and
switches back if a step fails.

Documents in flight are not lost: a worker stopped by the switch finishes its documents or
releases them to the queue within its drain time (worker/runner.py), and a document whose
worker died is reclaimed after queue.visibility_timeout_s (the queue's claim mechanism).
"""

from __future__ import annotations

from contract.cluster_fit import check_cluster_fit
from contract.spec import DeploymentMode, Spec
from contract.spec_rules import gpu_slots_needed
from runbooks.actions.runner import Step, StepFailed, run_plan, wait_healthy
from runbooks.cases import Case
from runbooks.context import ActionContext
from runbooks.model import Refused, Report
from runbooks.names import Action
from runbooks.params import RollbackParams
from runbooks.platforms.base import WORKERS
from runbooks.platforms.specpatch import effective_spec
from runbooks.suggestion import Suggestion
from stack.topology import mode_overrides

GATE = "rollback"  # bench/gates/rollback.yaml


def target_spec(spec: Spec, to: DeploymentMode) -> Spec:
    """The spec after the switch; Refused, naming the rule, when it would be invalid (e.g. a
    GPU pool too small for one GPU per worker)."""
    overrides: dict[str, object] = {"deployment_mode": to.value}
    if spec.target.value == "local":
        overrides = dict(mode_overrides(to))
    elif to is DeploymentMode.monolithic:
        overrides["worker_pool.in_process.backend"] = "vlm-vllm-engine"
    return effective_spec(spec, overrides)


def describe_change(before: Spec, after: Spec) -> list[str]:
    """What the switch changes, one line each (the dry run's evidence)."""
    w = after.worker_pool
    server = after.worker_server
    lines = [f"deployment_mode: {before.deployment_mode.value} -> {after.deployment_mode.value}"]
    if after.deployment_mode is DeploymentMode.monolithic:
        lines.append(f"worker pool: {w.replicas} worker(s), each loads {server.model.name!r} "
                     f"itself ({w.in_process.backend.value})")
        lines.append(f"inference server {server.name!r}: stopped (monolithic runs no shared server)")
    else:
        lines.append(f"worker pool: {w.replicas} CPU-only worker(s) calling server {server.name!r}")
        lines.append(f"inference server {server.name!r}: started, {server.replicas} replica(s)")
    if after.target.value == "kubernetes":
        pool = after.gpu_node_pool
        have = f"{pool.total_gpus} GPU(s) in node pool {pool.instance_type}" if pool else "no GPU pool"
        lines.append(f"GPUs needed: {gpu_slots_needed(after)} (before: {gpu_slots_needed(before)}); "
                     f"the cluster has {have}")
        problems = check_cluster_fit(after)
        lines.append("cluster fit: " + ("fits" if not problems
                                        else "; ".join(str(p) for p in problems)))
    else:
        engines = (f"{w.replicas} private engine(s) engine-w<i>, one per worker (the simulator "
                   "twin of in-process engines)"
                   if after.worker_pool.in_process.backend.value == "private-server"
                   and after.deployment_mode is DeploymentMode.monolithic else "no private engines")
        lines.append(f"local stack: {engines}; no GPUs")
    return lines


def _workers_serve_mode(ctx: ActionContext, mode: DeploymentMode) -> str:
    state = wait_healthy(ctx, WORKERS)
    return state.line() + f"; every worker ready in mode {mode.value}"


def rollback(ctx: ActionContext, p: RollbackParams) -> Report:
    before = ctx.platform.spec
    current = before.deployment_mode
    evidence = [f"running: deployment_mode {current.value} on {ctx.platform.target()}"]
    gate_next = f"bench gate --gate {GATE} --stack {before.stack}"
    if current is p.to:
        checks = [Step("check", WORKERS, f"ready in mode {p.to.value}",
                       lambda: _workers_serve_mode(ctx, p.to))]
        report = run_plan(ctx, Action.ROLLBACK, checks, case=Case.ROLLBACK, evidence=evidence,
                          summary=f"check that the stack runs deployment_mode {p.to.value} (it does)",
                          next_steps=[gate_next])
        if report.outcome == "applied":
            report.outcome = "noop"
        return report
    after = target_spec(before, p.to)
    change = describe_change(before, after)
    evidence += change
    if after.target.value == "kubernetes" and check_cluster_fit(after):
        raise Refused(f"deployment_mode {p.to.value} does not fit the cluster: "
                      + "; ".join(str(x) for x in check_cluster_fit(after))
                      + "; add GPU nodes (gpu_node_pool.node_count) or fewer workers first")

    if ctx.apply and ctx.platform.kind == "kubernetes":
        # Nothing to compensate: refused before any change (the platform says what to run).
        ctx.platform.set_deployment_mode(p.to)
    changed = [False]

    def switch() -> str:
        changed[0] = True
        try:
            return "; ".join(ctx.platform.set_deployment_mode(p.to)) or "nothing to change"
        except Refused:
            changed[0] = False  # refused before it changed anything
            raise

    def switch_back() -> str:
        if not changed[0]:
            return "nothing was changed"
        return "; ".join(ctx.platform.set_deployment_mode(current)) or "nothing to change"

    def check_mode() -> str:
        if ctx.platform.spec.deployment_mode is not p.to:
            raise StepFailed(f"the platform still reports deployment_mode "
                             f"{ctx.platform.spec.deployment_mode.value}")
        return _workers_serve_mode(ctx, p.to)

    steps = [
        Step("set", "deployment_mode", f"{current.value} -> {p.to.value}: "
             + "; ".join(change[1:]) + "; workers rolled one at a time, each drains its documents "
             "(finished or released to the queue)", switch, undo=switch_back, restarts=WORKERS),
        Step("check", WORKERS, f"ready in mode {p.to.value}", check_mode),
    ]
    return run_plan(ctx, Action.ROLLBACK, steps, case=Case.ROLLBACK, evidence=evidence,
                    summary=f"switch deployment_mode {current.value} -> {p.to.value} "
                            "(switched back if the workers are not ready after it)",
                    next_steps=[gate_next + "  # the rollback's gates: health, errors, no lost documents",
                                Suggestion(action=Action.DIAGNOSE)])
