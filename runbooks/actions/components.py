"""Restart any one component in place: the queue, Prometheus, an inference server, the workers
(rolling, one at a time) or one worker. What `splitstack restart COMPONENT` runs.

Checks before it acts (the component exists on this platform; what state it is in), restarts,
then waits for it to be healthy again. A worker restart drains: the worker gets SIGTERM alone
and finishes or releases its documents (stack/supervisor.py), so nothing waits for the queue's
visibility timeout. Restarting the queue keeps the jobs (Redis' append-only file); workers
reconnect and their acks are retried through the gap (worker/queue.py).
"""

from __future__ import annotations

from functools import partial

from runbooks.actions.runner import Step, health_step, run_plan
from runbooks.cases import Case
from runbooks.context import ActionContext
from runbooks.model import Report
from runbooks.names import Action
from runbooks.params import RestartComponentParams
from runbooks.platforms.base import WORKERS


def restart_component(ctx: ActionContext, p: RestartComponentParams) -> Report:
    units = ctx.platform.units(p.component)  # Refused, naming the known ones, for an unknown name
    state = ctx.platform.state(p.component)
    evidence = [state.line()]
    timeout = None
    if p.component.startswith("server-"):
        server = ctx.server(p.component[len("server-"):])
        timeout = min(ctx.safety.ready_timeout_s, server.startup_budget_s)
    why = p.reason or (f"{state.state}, last exit: {state.exit_reason}" if state.exit_reason
                       else f"{state.state}, operator's request")
    steps: list[Step] = []
    for unit in units:
        rolling = " (rolling: one at a time)" if p.component == WORKERS and len(units) > 1 else ""
        steps += [Step("restart", unit, why + rolling, partial(ctx.platform.restart, unit), restarts=unit),
                  health_step(ctx, unit, timeout)]
    return run_plan(ctx, Action.RESTART, steps, case=Case.COMPONENT_RESTART, evidence=evidence,
                    summary=f"restart {p.component} and wait until it is healthy")
