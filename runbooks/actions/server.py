"""vLLM server down: restart after an OOM kill or a crash; a new HF token after a model-load
failure. KV-cache fragmentation of a healthy server is `restart-server --force`."""

from __future__ import annotations

from runbooks.actions.runner import Step, health_step, run_plan
from runbooks.cases import Case
from runbooks.context import ActionContext
from runbooks.diagnose.advice import memory_knob
from runbooks.diagnose.signatures import match_logs
from runbooks.model import Refused, Report
from runbooks.names import Action
from runbooks.params import RestartServerParams, UpdateHfTokenParams
from runbooks.suggestion import Suggestion

# A restart cannot fix these: the fault moves with the process (the GPU, the token).
_NOT_FIXED_BY_RESTART = {
    Case.SERVER_CRASHLOOP_CUDA: (Action.DRAIN_GPU_NODE, "move the server off the faulty GPU"),
    Case.SERVER_DOWN_MODEL_LOAD: (Action.UPDATE_HF_TOKEN, "after fixing the token"),
}


def restart_server(ctx: ActionContext, p: RestartServerParams) -> Report:
    comp = ctx.server_component(p.server)
    state = ctx.platform.state(comp)
    evidence = [state.line()]
    matches = match_logs(ctx.platform.logs(comp, 200))
    evidence += [m.evidence(comp) for m in matches[:3]]
    if state.healthy and not p.force:
        return Report(action=Action.RESTART_SERVER, outcome="noop", evidence=evidence,
                      summary=f"{comp} is healthy: nothing to restart (--force restarts a healthy "
                              "server, e.g. to clear KV-cache fragmentation)")
    blocking = next((m for m in matches if m.signature.case in _NOT_FIXED_BY_RESTART), None)
    if blocking and not p.force:
        action, why_that = _NOT_FIXED_BY_RESTART[blocking.signature.case]
        raise Refused(f"{comp}: its log shows '{blocking.signature.id}' ({blocking.signature.meaning}); "
                      f"a restart will not fix that: run `{Suggestion(action=action).line()} --apply ({why_that})`"
                      " (or --force to restart anyway)")
    # An OOM kill only with evidence (the same rule as diagnose): the platform's "OOMKilled"
    # (the kubelet's verdict, or the kernel log naming the pid: runbooks/platforms/oom.py) or an
    # out-of-memory line in the server's log. A bare SIGKILL is a kill ("kill -9"), nothing more.
    oom = (state.exit_reason or "").startswith("OOMKilled") or any(
        m.signature.case is Case.SERVER_DOWN_OOM for m in matches)
    why = p.reason or ("healthy server, forced (KV-cache fragmentation / maintenance)" if state.healthy
                       else f"{state.state}, last exit: {state.exit_reason or 'unknown'}")
    steps = [Step("restart", comp, why, lambda: ctx.platform.restart(comp), restarts=comp),
             health_step(ctx, comp, min(ctx.safety.ready_timeout_s, ctx.server(p.server).startup_budget_s))]
    knob = memory_knob(ctx.spec, ctx.server(p.server), ctx.platform.kind) if oom else None
    nxt = [knob] if knob else []
    return run_plan(ctx, Action.RESTART_SERVER, steps, summary=f"restart {comp} and wait for /health",
                    case=(Case.SERVER_DOWN_OOM if oom
                          else Case.KV_FRAGMENTATION if state.healthy else Case.SERVER_DOWN),
                    evidence=evidence, next_steps=nxt)


def update_hf_token(ctx: ActionContext, p: UpdateHfTokenParams, environ: dict[str, str] | None = None) -> Report:
    import os

    server = ctx.server(p.server)
    comp = ctx.server_component(p.server)
    ref = server.hf_token
    if ref is None:
        raise Refused(f"server {server.name!r} has no hf_token in the spec: it does not download "
                      "from Hugging Face, so a token cannot be the cause; run `runbook diagnose`")
    var = p.token_env or ref.env
    value = (os.environ if environ is None else environ).get(var, "")
    if not value:
        raise Refused(f"the new token is not in the environment variable {var}: export {var}=<token> "
                      "(regenerate it at huggingface.co/settings/tokens) and run again")
    state = ctx.platform.state(comp)
    matches = match_logs(ctx.platform.logs(comp, 300))
    evidence = [state.line()] + [m.evidence(comp) for m in matches[:3]]
    current = ctx.platform.secret_value(ref.name, ref.key)
    if current == value and state.healthy:
        return Report(action=Action.UPDATE_HF_TOKEN, outcome="noop", evidence=evidence,
                      summary=f"secret {ref.name}/{ref.key} already holds that token and {comp} is healthy")
    if not p.force and not any(m.signature.case is Case.SERVER_DOWN_MODEL_LOAD for m in matches):
        raise Refused(f"{comp}: no model-load or Hugging Face auth failure in its recent log; the "
                      "token is probably not the cause (run `runbook diagnose`, or --force)")
    steps = [
        Step("set-secret", f"{ref.name}/{ref.key}", f"new value from ${var} (never printed)",
             lambda: ctx.platform.set_secret_value(ref.name, ref.key, value),
             undo=(lambda: ctx.platform.set_secret_value(ref.name, ref.key, current))
             if current is not None else None),
        Step("restart", comp, "reload the model with the new token",
             lambda: ctx.platform.restart(comp), restarts=comp),
        health_step(ctx, comp, server.startup_budget_s),
    ]
    return run_plan(ctx, Action.UPDATE_HF_TOKEN, steps, case=Case.SERVER_DOWN_MODEL_LOAD, evidence=evidence,
                    summary=f"store the new Hugging Face token and restart {comp}")
