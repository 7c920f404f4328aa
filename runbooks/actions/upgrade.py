"""The vLLM server upgrade of requirement RUNBOOK-10 (docs/requirements.md): set the new version,
wait for the rollout, check /health and a test inference, and roll back automatically when either
check fails."""

from __future__ import annotations

import json

from runbooks.actions.runner import Step, StepFailed, health_step, run_plan, wait_healthy
from runbooks.cases import Case
from runbooks.context import ActionContext
from runbooks.model import Refused, Report
from runbooks.names import Action
from runbooks.params import UpgradeServerParams
from runbooks.platforms.specpatch import typed_changes
from runbooks.suggestion import Suggestion


def test_inference(ctx: ActionContext, comp: str, model: str, prompt: str) -> str:
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": 8}
    r = ctx.platform.http(comp, "POST", "/v1/chat/completions", body,
                          timeout_s=ctx.safety.test_inference_timeout_s)
    if r.status != 200:
        raise StepFailed(f"test inference: HTTP {r.status or 'no answer'}: {r.text[:200]}")
    try:
        content = json.loads(r.text)["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise StepFailed(f"test inference: not a chat completion ({exc}): {r.text[:200]}") from exc
    return f"HTTP 200, {len(content or '')} characters"


def upgrade_server(ctx: ActionContext, p: UpgradeServerParams) -> Report:
    server = ctx.server(p.server)
    comp = ctx.server_component(p.server)
    new = typed_changes(ctx.platform.spec, comp, dict(p.to))
    current = ctx.platform.settings(comp)
    changes = {k: v for k, v in new.items() if current.get(k) != v}
    state = ctx.platform.state(comp)
    evidence = [state.line(), "running: " + ", ".join(f"{k}={current.get(k)}" for k in new)]
    if not changes and state.healthy:
        return Report(action=Action.UPGRADE_SERVER, outcome="noop", evidence=evidence,
                      summary=f"{comp} already runs " + ", ".join(f"{k}={v}" for k, v in new.items()))
    if not state.healthy:
        raise Refused(f"{comp} is not healthy before the upgrade ({state.detail}): the checks after "
                      "it could not tell the new version's fault from the old one; fix it first "
                      "(`runbook diagnose`)")
    reach = ctx.platform.http(comp, "GET", "/v1/models", timeout_s=ctx.safety.test_inference_timeout_s)
    if reach.status != 200:
        raise Refused(f"{comp}: GET /v1/models answers HTTP {reach.status or 'nothing'} before the "
                      "upgrade, so the test inference after it could not pass and a good version "
                      f"would be rolled back; fix access first ({reach.text[:160]})")
    before = {k: current.get(k) for k in changes}
    budget = min(server.startup_budget_s, ctx.safety.ready_timeout_s)

    def rollback() -> str:
        ctx.platform.apply_settings(comp, before)
        healthy = wait_healthy(ctx, comp, budget)
        return "back to " + ", ".join(f"{k}={v}" for k, v in before.items()) + f"; {healthy.line()}"

    steps = [
        Step("upgrade", comp, ", ".join(f"{k}: {before[k]} -> {v}" for k, v in changes.items()),
             lambda: ctx.platform.apply_settings(comp, changes), undo=rollback),
        health_step(ctx, comp, budget),
        Step("test-inference", comp, f"POST /v1/chat/completions model={server.model.name}",
             lambda: test_inference(ctx, comp, server.model.name, p.prompt)),
    ]
    return run_plan(ctx, Action.UPGRADE_SERVER, steps, case=Case.VLLM_UPGRADE, evidence=evidence,
                    summary=f"upgrade {comp} to " + ", ".join(f"{k}={v}" for k, v in changes.items())
                            + " (automatic rollback if health or test inference fails)",
                    next_steps=[Suggestion(action=Action.DIAGNOSE, comment="watch the next 30 min (RUNBOOK-10)")])
