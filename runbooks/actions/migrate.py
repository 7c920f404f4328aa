"""The production rollout: 10 % -> 50 % -> 100 % of documents on the split cohort, judged live.

``runbook migrate --to 10|50|100`` moves the split share one step up (contract/migration.py:
the share lives in Redis next to the jobs stream and the router reads it on every document,
so nothing restarts). Before moving it, the `cohorts` gate (bench/gates/migration-cohorts.yaml)
must pass on the last window: both cohorts, the same documents' window, the rollout's criteria
with intervals; "too few documents to judge" refuses and says to wait. The first step (0 -> 10)
has no split cohort to judge yet. ``--to 100`` waits until the monolithic cohort's stream is
drained, then stops the monolithic pool (on Kubernetes the pool is the Pulumi program's: the
report names the spec change and `pulumi up`). ``--to 0`` is the manual abort.

``runbook migrate-guard`` judges the window every ``--every-s`` for ``--watch-s``: on a breach
(a criterion failed with certainty) it sets the share to 0 at once, writes its own audit
record, and pages. Every share change is in the audit log (the action's record names the share
before and after).
"""

from __future__ import annotations

from bench.gating.cohorts import CohortVerdict, Criteria, judge
from bench.gating.models import CohortsGate
from bench.gating.spec import GateFileError, load_gate_file
from contract.migration import MONOLITHIC, SHARE_STEPS, SPLIT
from runbooks.actions.runner import Step, StepFailed, run_plan
from runbooks.cases import Case
from runbooks.cohorts import CohortControl, kubernetes_cohort_control
from runbooks.context import ActionContext
from runbooks.model import Refused, Report
from runbooks.names import Action
from runbooks.params import MIGRATION_GATE, MigrateGuardParams, MigrateParams, WindowParams
from runbooks.suggestion import Suggestion


def criteria(gate_file: str) -> Criteria:
    try:
        gates = load_gate_file(gate_file).gates
    except GateFileError as exc:
        raise Refused(f"--gate {gate_file}: {exc}") from None
    for g in gates:
        if isinstance(g, CohortsGate):
            return g.criteria
    raise Refused(f"--gate {gate_file}: the gate file has no gate of kind `cohorts`; use {MIGRATION_GATE}")


def control(ctx: ActionContext, p: WindowParams) -> CohortControl:
    if ctx.migration is None:
        if ctx.platform.kind == "kubernetes":
            ctx.migration = kubernetes_cohort_control(ctx.spec, ctx.platform, p.redis_url)
            return ctx.migration
        raise Refused(f"the queue (Redis) of stack {ctx.spec.stack!r} is not reachable: start the stack "
                      f"(`splitstack up --engine sim --spec-override local.migration_monolithic_workers=N`) first")
    return ctx.migration


def judge_window(ctx: ActionContext, c: CohortControl, p: WindowParams) -> CohortVerdict:
    now = ctx.clock()
    return judge(c.samples(now, p.window_s, p.stuck_after_s), criteria(p.gate),
                 shadow=c.shadow_pairs(now, p.window_s))


def throughput(v: CohortVerdict, window_s: float) -> str:
    """Documents and pages per cohort over the window, per second."""
    return ", ".join(f"{t} {v.counts.get(t, 0)} documents, {v.pages.get(t, 0)} pages "
                     f"({v.pages.get(t, 0) / window_s:.2f} pages/s)" for t in (SPLIT, MONOLITHIC))


def _next_step(current: int) -> int | None:
    return next((s for s in SHARE_STEPS if s > current), None)


def migrate(ctx: ActionContext, p: MigrateParams) -> Report:
    c = control(ctx, p)
    if c.finished:
        return finish(ctx, c, p)
    current = c.share()
    evidence = [f"split share now: {current} %"]
    if p.to == current:
        return Report(action=Action.MIGRATE, outcome="noop", summary=f"the split share is {current} % already",
                      case=Case.MIGRATION, evidence=evidence)
    if p.to != 0 and p.to != _next_step(current):
        raise Refused(f"--to {p.to}: the share moves one step at a time (10, 50, 100) and is {current} %; "
                      f"run `runbook migrate --to {_next_step(current)}` first")
    steps: list[Step] = []
    if p.to != 0 and current > 0:
        verdict = judge_window(ctx, c, p)
        evidence += [f"gate {p.gate} on the last {p.window_s:g} s ({verdict.counts}): {verdict.judgement}",
                     *verdict.lines(), f"throughput: {throughput(verdict, p.window_s)}"]
        if verdict.judgement == "fail":
            raise Refused(f"the cohorts gate fails on the last window, the share stays {current} %: "
                          + "; ".join(x.name for x in verdict.checks if x.judgement == "fail")
                          + "; run `runbook migrate --to 0 --apply` (or let migrate-guard abort)")
        if verdict.judgement == "too_few":
            raise Refused(f"too few documents to judge in the last {p.window_s:g} s ({verdict.counts}); "
                          "wait for more traffic (or a longer --window-s) and run again")

        def check() -> str:
            again = judge_window(ctx, c, p)
            if again.judgement != "pass":
                raise StepFailed(f"the cohorts gate now says {again.judgement}: " + "; ".join(again.lines()))
            return f"{p.gate}: pass ({again.counts})"
        steps.append(Step("check", f"gate {p.gate}", "pass on the last window, both cohorts", check))
    elif p.to != 0:
        evidence.append("no split cohort yet: the first step has nothing to compare")

    def set_share() -> str:
        return f"share {c.set_share(p.to)} % -> {p.to} %"

    if p.shadow is not None and p.shadow != c.shadow_share():
        was = c.shadow_share()
        steps.append(Step("set", "shadow sample", f"{was} % -> {p.shadow} % of documents also processed by the "
                          "other cohort", lambda: f"shadow {c.set_shadow_share(p.shadow or 0)} % -> {p.shadow} %",
                          undo=lambda: f"shadow back to {c.set_shadow_share(was)} %"))
    steps.append(Step("set", "split share", f"{current} % -> {p.to} % of documents (live: the router reads it "
                      "on every document)", set_share, undo=lambda: f"share back to {c.set_share(current)} %"))
    if p.to == 100:
        def drain() -> str:
            waited = 0.0
            while (left := c.backlog(MONOLITHIC)) > 0:
                if waited >= p.drain_timeout_s:
                    raise StepFailed(f"the monolithic cohort still holds {left} document(s) after "
                                     f"{p.drain_timeout_s:g} s")
                ctx.sleep(1.0)
                waited += 1.0
            return "the monolithic cohort's stream is drained"

        steps.append(Step("wait", "monolithic cohort", "its stream drained (documents already routed to it)",
                          drain))
        if c.decommission_change is None:
            steps.append(Step("stop", "monolithic pool", "decommission: its workers (and engines) stop",
                              lambda: "stopped " + (", ".join(c.decommission()) or "nothing"), compensate=False))
        else:  # the pool is the deployment program's: the change that removes it, not a step here
            evidence.append(f"the monolithic pool is not stopped here: {c.decommission_change}")
    return run_plan(ctx, Action.MIGRATE, steps, case=Case.MIGRATION, evidence=evidence,
                    summary=f"move the split share {current} % -> {p.to} %",
                    next_steps=([f"decommission the monolithic pool: {c.decommission_change}"]
                                if p.to == 100 and c.decommission_change else [])
                    + ["runbook migrate-guard --watch-s 600 --apply  # abort on a breach"]
                    + ([f"runbook migrate --to {_next_step(p.to)}  # after a window that passes"]
                       if _next_step(p.to) and p.to else []))


def finish(ctx: ActionContext, c: CohortControl, p: MigrateParams) -> Report:
    """After `pulumi up` ended a cluster's migration (no router, the workers back on the jobs
    stream): the entries left in the cohort streams go back to the jobs stream, the share goes."""
    if p.to != 100:
        raise Refused(f"the migration of {ctx.spec.stack!r} has ended (migration.monolithic_workers is 0 and "
                      "`pulumi up` removed the router): there is no share to move; `runbook migrate --to 100 "
                      "--apply` returns what the cohort streams still hold to the jobs stream")
    left = {t: c.leftovers(t) for t in (SPLIT, MONOLITHIC)}

    def move() -> str:
        moved = c.return_leftovers()
        return f"returned {moved[SPLIT]} split and {moved[MONOLITHIC]} monolithic entries; the share is removed"

    return run_plan(ctx, Action.MIGRATE, [Step("move", "cohort streams", f"{left[SPLIT]} split and {left[MONOLITHIC]} "
                                          "monolithic entries back to the jobs stream (the workers read it now); "
                                          "drop the share", move, compensate=False)],
                    case=Case.MIGRATION, evidence=[f"the split share was {c.share()} %; the cluster runs no router"],
                    summary="end the migration: return the cohort streams' entries to the jobs stream")


def migrate_guard(ctx: ActionContext, p: MigrateGuardParams) -> Report:
    c = control(ctx, p)
    if c.finished:
        raise Refused(f"the migration of {ctx.spec.stack!r} has ended: nothing to guard")
    start = ctx.clock()
    judged: list[str] = []
    while True:
        share = c.share()
        verdict = judge_window(ctx, c, p)
        t = ctx.clock() - start
        judged.append(f"t+{t:.0f} s share {share} %: {verdict.judgement} {verdict.counts}")
        if verdict.judgement == "fail" and share > 0:
            breach = "; ".join(line for line, x in zip(verdict.lines(), verdict.checks) if x.judgement == "fail")
            if not ctx.apply:
                return Report(action=Action.MIGRATE_GUARD, outcome="planned", case=Case.MIGRATION, evidence=judged,
                              summary=f"would abort: set the split share {share} % -> 0 % ({breach})")
            old = c.set_share(0)
            ctx.audit.append({"actor": ctx.actor, "action": "migrate-abort", "apply": True,
                              "target": ctx.platform.target(), "outcome": "applied",
                              "params": {"share_before": old, "share_after": 0}, "summary": breach})
            paged = c.page(f"migration aborted on {ctx.spec.stack}: split share {old} % -> 0 %: {breach}")
            return Report(action=Action.MIGRATE_GUARD, outcome="rolled_back", case=Case.MIGRATION, evidence=judged,
                          summary=f"aborted: split share {old} % -> 0 % ({breach})",
                          done=[f"set split share {old} % -> 0 %", paged],
                          data={"share_before": old, "aborted_after_s": round(t, 3)},
                          suggestions=[Suggestion(action=Action.DIAGNOSE),
                                       Suggestion(action=Action.MIGRATE, params={"to": 10},
                                                  comment="once the cause is fixed")])
        if ctx.clock() - start + p.every_s > p.watch_s:
            return Report(action=Action.MIGRATE_GUARD, outcome="report", case=Case.MIGRATION, evidence=judged,
                          summary=f"no breach in {len(judged)} judgement(s); the split share is {share} %")
        ctx.sleep(p.every_s)
