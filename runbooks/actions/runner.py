"""Run a plan safely: dry-run unless --apply, steps in order, compensation on failure.

An action builds its plan as :class:`Step` objects after checking preconditions; this module
is the only place that executes them. A step that fails (a :class:`StepFailed` from a check,
or a :class:`PlatformError`) stops the plan, and the ``undo`` of every step already done,
the failing one included, runs in reverse order: the deployment ends where it started.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from runbooks.cases import Case
from runbooks.context import ActionContext
from runbooks.model import Outcome, PlannedStep, PlatformError, Refused, Report
from runbooks.names import Action
from runbooks.platforms.base import ComponentState
from runbooks.suggestion import NextStep

FAILED_GRACE_S = 3.0


class StepFailed(Exception):
    """A check inside a plan did not pass (health, test inference, rollout)."""


@dataclass
class Step:
    verb: str
    target: str
    detail: str
    do: Callable[[], str | None]
    undo: Callable[[], str | None] | None = None
    restarts: str | None = None  # the component this step restarts (rate limit, audit)
    # False: when this step fails, keep what was done (e.g. a cordoned faulty node stays
    # cordoned even if the server is not healthy elsewhere yet) and report the failure.
    compensate: bool = True

    def planned(self) -> PlannedStep:
        return PlannedStep(verb=self.verb, target=self.target, detail=self.detail)


def run_plan(ctx: ActionContext, action: Action, steps: Sequence[Step], *, summary: str,
             case: Case | None = None, evidence: Sequence[str] = (),
             next_steps: Sequence[NextStep] = ()) -> Report:
    for component in dict.fromkeys(s.restarts for s in steps if s.restarts):
        ctx.check_restart_budget(component)
    plan = [s.planned() for s in steps]

    def report(outcome: Outcome, text: str, done: Sequence[str] = (),
               data: dict[str, Any] | None = None) -> Report:
        return Report(action=action, outcome=outcome, summary=text, case=case, plan=plan, done=list(done),
                      evidence=list(evidence), suggestions=list(next_steps), data=data or {})

    if not ctx.apply:
        return report("planned", f"would {summary}")
    done: list[str] = []
    restarted: list[str] = []
    completed: list[Step] = []
    for step in steps:
        completed.append(step)
        try:
            detail = step.do()
        except (StepFailed, PlatformError, Refused) as exc:
            # Refused mid-plan (e.g. permissions lost) still leaves earlier steps done: compensate.
            done.append(f"FAILED {step.verb} {step.target}: {exc}")
            if not step.compensate:
                return report("failed", f"{step.verb} {step.target} failed ({exc}); "
                              "the changes before it are kept on purpose", done,
                              {"restarted": restarted, "error": str(exc)})
            undone, undo_ok = _compensate(completed)
            done += undone
            outcome: Outcome = "rolled_back" if undo_ok else "failed"
            what = ("rolled back to the previous state" if undo_ok
                    else "compensation failed too: the deployment needs a human")
            return report(outcome, f"{step.verb} {step.target} failed ({exc}); {what}",
                          done, {"restarted": restarted, "error": str(exc)})
        if step.restarts:
            restarted.append(step.restarts)
        done.append(f"{step.verb} {step.target}" + (f": {detail}" if detail else ""))
    return report("applied", summary, done, {"restarted": restarted})


def _compensate(completed: list[Step]) -> tuple[list[str], bool]:
    lines, ok = [], True
    for step in reversed(completed):
        if step.undo is None:
            continue
        try:
            detail = step.undo()
            lines.append(f"undo {step.verb} {step.target}" + (f": {detail}" if detail else ""))
        except (StepFailed, PlatformError, Refused) as exc:
            ok = False
            lines.append(f"FAILED undo {step.verb} {step.target}: {exc}")
    return lines, ok


def wait_healthy(ctx: ActionContext, component: str, timeout_s: float | None = None) -> ComponentState:
    """Poll until the component is healthy; StepFailed with the last state when it is not."""
    limit = ctx.safety.ready_timeout_s if timeout_s is None else timeout_s
    start = ctx.clock()
    failed_since: float | None = None
    while True:
        state = ctx.platform.state(component)
        if state.healthy:
            return state
        now = ctx.clock()
        # A definitive failure (supervisord FATAL, ProgressDeadlineExceeded) ends the wait early,
        # once it has held for FAILED_GRACE_S: a condition left over from before the change
        # must not be mistaken for the new version's verdict.
        failed_since = (failed_since or now) if state.failed else None
        if failed_since is not None and now - failed_since >= FAILED_GRACE_S:
            raise StepFailed(f"{component} failed and will not become healthy: {state.line()}")
        if now - start >= limit:
            raise StepFailed(f"{component} not healthy after {limit:g} s: {state.line()}")
        ctx.sleep(ctx.safety.poll_interval_s)


def health_step(ctx: ActionContext, component: str, timeout_s: float | None = None) -> Step:
    limit = ctx.safety.ready_timeout_s if timeout_s is None else timeout_s
    return Step("check", component, f"healthy within {limit:g} s",
                lambda: wait_healthy(ctx, component, limit).line())
