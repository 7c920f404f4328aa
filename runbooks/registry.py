"""Every runbook action by name, and `invoke`: the one entry point that validates parameters,
refuses targets that differ from the spec, runs the action and writes the audit record."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from contract.models import describe
from runbooks.actions import components, migrate, nodes, reports, rollback, server, tune, upgrade, workers
from runbooks.context import ActionContext
from runbooks.diagnose import engine
from runbooks.model import PlatformError, Refused, Report
from runbooks.names import Action
from runbooks.params import PARAMS, ActionParams


@dataclass(frozen=True)
class ActionDef:
    """One runbook action: adding one is its name (runbooks/names.py), its params model
    (runbooks/params.py), its function and this entry.

    The `runbook` command line is generated from it: the command's help is ``summary``, its
    options are the params model's fields (with their descriptions), and mutating actions get
    ``--apply``.
    """

    name: Action
    fn: Callable[[ActionContext, Any], Report]
    mutating: bool
    summary: str  # what it does: the command's help
    case: str  # the situation it handles, as the runbook pages describe it

    @property
    def params(self) -> type[ActionParams]:
        return PARAMS[self.name]


ACTIONS: dict[str, ActionDef] = {a.name: a for a in [
    ActionDef(Action.DIAGNOSE, engine.diagnose, False,
              "Walk the symptoms and name the runbook case, with evidence and the command to run.",
              "any: walks the symptoms and names the case"),
    ActionDef(Action.SLO_STATUS, reports.slo_status, False,
              "Attainment, error budget left and burn rate of every SLO (slo/objectives.yaml).",
              "an SLO alert: how much budget is left"),
    ActionDef(Action.RESTART, components.restart_component, True,
              "Restart one component (queue, prometheus, server-<name>, workers rolling, worker-<i>) "
              "and wait until it is healthy.",
              "a component that stopped or misbehaves; `splitstack restart COMPONENT` runs this"),
    ActionDef(Action.RESTART_SERVER, server.restart_server, True,
              "Restart the inference server and wait for /health.",
              "inference server down or OOMKilled; KV-cache fragmentation of a healthy server (--force)"),
    ActionDef(Action.UPDATE_HF_TOKEN, server.update_hf_token, True,
              "Store a new Hugging Face token in the server's secret and restart it.",
              "model loading fails with a bad or expired Hugging Face token"),
    ActionDef(Action.DRAIN_GPU_NODE, nodes.drain_gpu_node, True,
              "Cordon the faulty GPU node and move the server to a spare one.",
              "GPU driver crash: the server crash-loops with a CUDA error or an Xid"),
    ActionDef(Action.GPU_NODE_FAILURE, nodes.gpu_node_failure, True,
              "Cordon NotReady GPU nodes and reschedule the server.",
              "a GPU node failed (NotReady)"),
    ActionDef(Action.TUNE, tune.tune, True,
              "Change server or worker knobs (max_num_batched_tokens, max_num_seqs, gpu_memory_utilization, "
              "concurrency_per_worker, circuit_breaker.recovery_timeout_s...); the old value is restored on "
              "failure.",
              "queue backlog; performance tuning"),
    ActionDef(Action.SCALE, tune.scale, True,
              "Scale the inference server (bounded by GPUs) or the workers.",
              "queue backlog: more replicas"),
    ActionDef(Action.SLOW_PDFS, reports.slow_pdfs, False,
              "The slowest documents, with pages and seconds per page.",
              "large or complex PDFs slow the pipeline"),
    ActionDef(Action.RESTART_WORKERS, workers.restart_workers, True,
              "Rolling restart of the workers to reset stuck-open circuit breakers.",
              "circuit breakers stuck open after the server recovered"),
    ActionDef(Action.PATCH_WORKERS, workers.patch_workers, True,
              "Roll the workers to a new image tag with zero downtime.",
              "maintenance: worker security patch (rolling)"),
    ActionDef(Action.UPGRADE_SERVER, upgrade.upgrade_server, True,
              "Set the server's version, check /health and a test inference, roll back on failure.",
              "maintenance: vLLM server upgrade with validation and rollback"),
    ActionDef(Action.ROLLBACK, rollback.rollback, True,
              "Roll back to monolithic workers (--to monolithic: each worker runs the model, no "
              "shared server) or return to split (--to split); the dry run shows the change, the "
              "GPUs needed and whether the cluster fits.",
              "the split architecture must be rolled back (or restored): deployment_mode"),
    ActionDef(Action.MIGRATE, migrate.migrate, True,
              "Move the split share of documents one step (--to 10, 50, 100; 0 aborts) when the live "
              "cohorts gate passes on the last window; --to 100 then stops the monolithic pool.",
              "production rollout: both topologies at once, a share of documents on split"),
    ActionDef(Action.MIGRATE_GUARD, migrate.migrate_guard, True,
              "Judge both cohorts every --every-s for --watch-s; on a breach set the split share to 0 "
              "and page.",
              "production rollout: automatic abort"),
]}


assert set(ACTIONS) == set(Action), "every action name needs its registry entry"


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
