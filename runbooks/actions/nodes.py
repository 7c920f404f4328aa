"""Server down from a GPU driver crash (CrashLoopBackOff with "CUDA error") and disaster-recovery
scenario 2 (GPU node failure): cordon the node, move the server's pods off it, make sure another
GPU node can take them. Never uncordons a node after a successful move: it is the faulty one."""

from __future__ import annotations

from runbooks.actions.runner import Step, health_step, run_plan
from runbooks.cases import Case
from runbooks.context import ActionContext
from runbooks.diagnose.signatures import match_logs
from runbooks.model import Refused, Report
from runbooks.names import Action
from runbooks.params import DrainGpuNodeParams, GpuNodeFailureParams
from runbooks.platforms.base import NodeState


def _spare(nodes: list[NodeState], leaving: set[str]) -> list[NodeState]:
    return [n for n in nodes if n.name not in leaving and n.ready and n.schedulable
            and n.gpu_allocatable > 0]


def _move_steps(ctx: ActionContext, comp: str, node: str, force: bool) -> list[Step]:
    return [
        Step("cordon", node, "no new pods on the faulty GPU node",
             lambda: ctx.platform.cordon(node, True), undo=lambda: ctx.platform.cordon(node, False)),
        Step("evict" if not force else "force-delete", comp, f"its pods on {node} reschedule elsewhere",
             lambda: ", ".join(ctx.platform.evict_component_pods(comp, node, force)) or "no pods left"),
    ]


def drain_gpu_node(ctx: ActionContext, p: DrainGpuNodeParams) -> Report:
    comp = ctx.server_component(p.server)
    state = ctx.platform.state(comp)
    matches = [m for m in match_logs(ctx.platform.logs(comp, 300))
               if m.signature.case is Case.SERVER_CRASHLOOP_CUDA]
    evidence = [state.line()] + [m.evidence(comp) for m in matches[:3]]
    nodes = ctx.platform.nodes()
    node = p.node or (state.nodes[0] if state.nodes else None)
    if node is None:
        raise Refused(f"{comp} has no pod on any node; give --node NAME")
    this = next((n for n in nodes if n.name == node), None)
    if this is None:
        raise Refused(f"node {node!r} is not in the cluster (nodes: {', '.join(n.name for n in nodes)})")
    if not this.schedulable and node not in state.nodes:
        return Report(action=Action.DRAIN_GPU_NODE, outcome="noop", evidence=evidence,
                      summary=f"{node} is already cordoned and runs no {comp} pod")
    if not matches and not p.force:
        raise Refused(f"{comp}: no CUDA/Xid signature in its recent log, so this is not a GPU driver "
                      "crash; run `runbook diagnose` (or --force to drain anyway)")
    spare = _spare(nodes, {node})
    if not spare:
        raise Refused(f"no other ready, schedulable GPU node: draining {node} would leave {comp} "
                      f"Pending. Reboot {node} (the fallback of requirement RUNBOOK-3) or add a GPU node "
                      "(raise gpu_node_pool.node_count and `pulumi up`)")
    evidence.append(f"spare GPU nodes: {', '.join(n.name for n in spare)}")
    steps = [*_move_steps(ctx, comp, node, False), _final_health(ctx, comp, p.server)]
    return run_plan(ctx, Action.DRAIN_GPU_NODE, steps, case=Case.SERVER_CRASHLOOP_CUDA, evidence=evidence,
                    summary=f"cordon {node} and move {comp} to {spare[0].name}",
                    next_steps=[f"reboot {node} or reset its GPU, then `kubectl uncordon {node}`"])


def _final_health(ctx: ActionContext, comp: str, server: str | None) -> Step:
    step = health_step(ctx, comp, ctx.server(server).startup_budget_s)
    step.detail += " on another node (a failure here keeps the node cordoned)"
    step.compensate = False
    return step


def gpu_node_failure(ctx: ActionContext, p: GpuNodeFailureParams) -> Report:
    comp = ctx.server_component(p.server)
    state = ctx.platform.state(comp)
    nodes = ctx.platform.nodes()
    lost = [n for n in nodes if not n.ready]
    evidence = [state.line()] + [f"node {n.name}: NotReady ({n.conditions.get('Ready', 'no Ready condition')})"
                                 for n in lost]
    if not lost:
        return Report(action=Action.GPU_NODE_FAILURE, outcome="noop", evidence=evidence,
                      summary="every GPU node is Ready: no node failure to handle")
    hosting = [n for n in lost if n.name in state.nodes]
    todo = [n for n in lost if n.schedulable or n.name in state.nodes]
    if not todo:
        return Report(action=Action.GPU_NODE_FAILURE, outcome="noop", evidence=evidence,
                      summary="failed nodes are cordoned and run no server pod")
    spare = _spare(nodes, {n.name for n in lost})
    nxt = [] if spare else ["raise gpu_node_pool.node_count in the spec and `pulumi up` (no spare GPU node)"]
    steps: list[Step] = []
    for n in todo:
        # Pods on a node that stopped answering never finish terminating: delete them (grace 0).
        steps += _move_steps(ctx, comp, n.name, force=True)
    if hosting and spare:
        steps.append(_final_health(ctx, comp, p.server))
    evidence.append(f"spare GPU nodes: {', '.join(n.name for n in spare) or 'none'}")
    return run_plan(ctx, Action.GPU_NODE_FAILURE, steps, case=Case.GPU_NODE_FAILURE, evidence=evidence,
                    summary=f"cordon {', '.join(n.name for n in todo)} and reschedule {comp}",
                    next_steps=nxt)
