"""Every runbook action by name, and `invoke`: the one entry point that validates parameters,
refuses targets that differ from the spec, runs the action and writes the audit record."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from contract.models import describe
from runbooks.actions import nodes, reports, server, tune, upgrade, workers
from runbooks.actions.context import ActionContext
from runbooks.actions.model import PlatformError, Refused, Report
from runbooks.actions.params import ActionParams
from runbooks.diagnose import engine


@dataclass(frozen=True)
class ActionDef:
    name: str
    fn: Callable[[ActionContext, Any], Report]
    params: type[ActionParams]
    mutating: bool
    case: str  # the runbook case, as named in the operations manual


ACTIONS: dict[str, ActionDef] = {a.name: a for a in [
    ActionDef("diagnose", engine.diagnose, engine.DiagnoseParams, False,
              "all: walks the symptoms and names the case"),
    ActionDef("slo-status", reports.slo_status, reports.SloStatusParams, False, "SLO dashboard"),
    ActionDef("restart-server", server.restart_server, server.RestartServerParams, True,
              "Runbook 1 case 1 (OOMKilled), Runbook 2 case 3 (KV fragmentation, --force)"),
    ActionDef("update-hf-token", server.update_hf_token, server.UpdateHfTokenParams, True,
              "Runbook 1 case 3 (model loading failure / bad HF token)"),
    ActionDef("drain-gpu-node", nodes.drain_gpu_node, nodes.DrainGpuNodeParams, True,
              "Runbook 1 case 2 (GPU driver crash, CrashLoopBackOff with CUDA error)"),
    ActionDef("gpu-node-failure", nodes.gpu_node_failure, nodes.GpuNodeFailureParams, True,
              "DR scenario 2 (GPU node failure)"),
    ActionDef("tune", tune.tune, tune.TuneParams, True,
              "Runbook 2 case 1 (queue backlog) and Performance Tuning"),
    ActionDef("scale", tune.scale, tune.ScaleParams, True, "Runbook 2 case 1 solution 1"),
    ActionDef("slow-pdfs", reports.slow_pdfs, reports.SlowPdfsParams, False,
              "Runbook 2 case 2 (large/complex PDFs)"),
    ActionDef("restart-workers", workers.restart_workers, workers.RestartWorkersParams, True,
              "Runbook 3 (circuit breaker stuck open)"),
    ActionDef("patch-workers", workers.patch_workers, workers.PatchWorkersParams, True,
              "Maintenance: worker security patching (rolling)"),
    ActionDef("upgrade-server", upgrade.upgrade_server, upgrade.UpgradeServerParams, True,
              "Maintenance: vLLM server upgrade with validation and rollback"),
]}


def get_action(name: str) -> ActionDef:
    try:
        return ACTIONS[name]
    except KeyError:
        raise Refused(f"unknown action {name!r}; known: {', '.join(sorted(ACTIONS))}") from None


def parse_params(action: ActionDef, raw: dict[str, Any]) -> ActionParams:
    try:
        return action.params.model_validate(raw)
    except ValidationError as exc:
        problems = describe(exc, root="params")
        raise Refused(f"{action.name}: bad parameters ({problems})") from exc


def invoke(ctx: ActionContext, name: str, raw: dict[str, Any]) -> Report:
    """Run one action; always leaves one audit record (refusals and failures included)."""
    record: dict[str, Any] = {"actor": ctx.actor, "action": name, "params": raw, "apply": ctx.apply}
    try:
        record["target"] = ctx.platform.target()
        action = get_action(name)
        params = parse_params(action, raw)
        record["params"] = params.model_dump(mode="json")
        if action.mutating:
            problems = ctx.platform.verify_target()
            if problems:
                raise Refused("the live target does not match the spec, nothing was changed: "
                              + "; ".join(problems))
        report = action.fn(ctx, params)
    except Refused as exc:
        report = Report(action=name, outcome="refused", summary=str(exc))
    except PlatformError as exc:
        report = Report(action=name, outcome="failed", summary=f"platform error, nothing more was "
                        f"changed: {exc}")
    except BaseException as exc:
        ctx.audit.append({**record, "outcome": "failed", "error": f"{type(exc).__name__}: {exc}"})
        raise
    ctx.audit.append({**record, "outcome": report.outcome, "summary": report.summary,
                      "case": report.case, "plan": [s.line() for s in report.plan],
                      "done": report.done, "restarted": report.data.get("restarted", [])})
    return report
