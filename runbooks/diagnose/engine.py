"""`diagnose`: walk the symptoms and name the runbook case, with its evidence and the command.

Order of the walk (requirements RUNBOOK-1 and RUNBOOK-5, docs/requirements.md): is the server
up (process/pod state, exit reason, log signatures), what does the GPU say, what do the
Prometheus signals say (queue depth, running, KV usage, TTFT p95, breaker state, whether
documents still finish and requests still get answers), are the workers healthy. Every finding
carries the evidence that produced it; the first finding by priority (runbooks/cases.py) is the
case reported, its heading the summary.

It reads the stack that runs (a local stack's recorded spec, runbooks/connect.py), counts the
queue once (every worker reports the same consumer group), calls a kill an OOM kill only with
evidence (runbooks/platforms/oom.py), knows that an open breaker closes within seconds of the
server answering again (worker/breaker.py), names a stall and a hung server, and drops any next
step the target would refuse (runbooks/diagnose/advice.py), saying so.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from contract.metrics import CHAT_ENDPOINT
from contract.spec import DeploymentMode, Spec
from runbooks.cases import Case
from runbooks.context import ActionContext
from runbooks.diagnose.advice import memory_knob, refusal
from runbooks.diagnose.signals import load_thresholds
from runbooks.diagnose.signatures import match_logs
from runbooks.gpu.probe import probe
from runbooks.model import PlatformError, Refused, Report
from runbooks.names import Action
from runbooks.params import DiagnoseParams
from runbooks.platforms.base import QUEUE, WORKERS, HttpResult, server_component
from runbooks.suggestion import NextStep, Suggestion, render

COMPLETION_PROBES = 3  # diagnose's own 1-token completions to a server whose /health answers
# The GPU probe is a `runbook` command of its own (splitstack/cli/runbook.py), not an action: a step in words.
GPU_PROBE = "runbook gpu-probe"


@dataclass
class Finding:
    case: Case
    commands: list[NextStep]
    evidence: list[str] = field(default_factory=list)
    probed: bool = False  # from diagnose's own completions (not from Prometheus' windows)


def diagnose(ctx: ActionContext, p: DiagnoseParams) -> Report:
    try:
        th = load_thresholds(p.thresholds)
    except ValueError as exc:
        raise Refused(str(exc)) from exc
    # The spec the platform runs now: a rollback to monolithic runs no shared server.
    spec = getattr(ctx.platform, "spec", None) or ctx.spec
    findings: list[Finding] = []
    evidence: list[str] = []
    servers_down: set[str] = set()
    servers_up: set[str] = set()
    platform_ok = True
    try:
        if spec.deployment_mode is DeploymentMode.monolithic:
            evidence.append("deployment_mode monolithic: every worker runs its own engine; no shared "
                            "inference server to check")
        for server in spec.inference_servers if spec.deployment_mode is DeploymentMode.split else []:
            if server.replicas == 0:
                continue
            comp = server_component(server.name)
            f = _server(ctx, spec, comp, p.log_lines, evidence)
            if f:
                findings.append(f)
                servers_down.add(comp)
            else:
                servers_up.add(comp)
                findings += _completions(ctx, spec, comp, th, evidence)
        findings += _nodes(ctx, evidence)
        findings += _queue(ctx, evidence)
        w = _workers(ctx, spec, evidence)
    except PlatformError as exc:
        platform_ok = False
        evidence.append(f"{ctx.platform.target()}: {exc}")
        if ctx.platform.kind == "local":
            findings.append(Finding(Case.STACK_DOWN, [f"splitstack up --stack {spec.stack}"]))
        else:
            findings.append(Finding(Case.PLATFORM_UNREACHABLE,
                                    [Suggestion(action=Action.DIAGNOSE, comment="once the platform answers")]))
        w = []
    if p.gpu:
        findings += _gpu(ctx, evidence)
    signals = _prometheus(ctx, th, evidence, findings, servers_down,
                          workers_down=any(f.case is Case.WORKERS_DOWN for f in w),
                          platform_ok=platform_ok, servers_up=servers_up)
    waiting = signals.get("waiting")
    if waiting is not None and waiting > th["queue_waiting_max"] and any(f.case is Case.SERVER_HUNG for f in findings):
        # Completions that wait behind a queue of requests are slow, not lost: a backlog.
        findings = [f for f in findings if f.case is not Case.SERVER_HUNG or not f.probed]
        evidence.append(f"diagnose's completions waited behind {waiting:g} waiting requests: a backlog "
                        "(queue-backlog), not a hang")
    findings += w
    if not findings:
        findings.append(Finding(Case.HEALTHY, []))
    evidence += _reconcile(ctx, signals, findings)
    findings.sort(key=lambda f: f.case.priority)
    top = findings[0]
    nxt: list[NextStep] = []
    for step in {render(c): c for f in findings for c in f.commands}.values():  # once each, first first
        why_not = refusal(spec, ctx.platform.kind, step)
        if why_not:
            evidence.append(f"not suggested: `{step if isinstance(step, str) else step.line()}` ({why_not})")
        else:
            nxt.append(step)
    return Report(
        action=Action.DIAGNOSE, outcome="report", case=top.case, summary=top.case.heading,
        evidence=evidence + [e for f in findings for e in f.evidence], suggestions=nxt,
        data={"cases": [f.case for f in findings], "signals": signals, "thresholds": th})


def _reconcile(ctx: ActionContext, signals: dict[str, Any], findings: list[Finding]) -> list[str]:
    """Where the platform's view and Prometheus' disagree, say which is which, so the report never
    states one thing beside evidence of the opposite without the reason."""
    notes = []
    cases = {f.case for f in findings}
    workers_up = signals.get("workers_up")
    if ctx.spec.worker_pool.replicas == 0 and workers_up:
        notes.append(f"workers: Prometheus sees {workers_up:g} worker(s) up although the spec read says "
                     "worker_pool.replicas = 0: the spec read is not the one this stack runs with (pass the "
                     "--spec-override values it was started with)")
    if Case.WORKERS_DOWN in cases and workers_up:
        notes.append(f"workers: Prometheus still sees {workers_up:g} up: its last scrape predates the failure "
                     "(the platform's state above is current)")
    if cases & {Case.SERVER_DOWN, Case.SERVER_DOWN_OOM, Case.SERVER_DOWN_MODEL_LOAD, Case.SERVER_CRASHLOOP_CUDA} \
            and signals.get("server_up") == 1:
        notes.append("inference server: Prometheus still sees it up: its last scrape predates the failure "
                     "(the platform's state above is current)")
    return notes


def _server(ctx: ActionContext, spec: Spec, comp: str, lines: int, evidence: list[str]) -> Finding | None:
    state = ctx.platform.state(comp)
    evidence.append(state.line())
    matches = match_logs(ctx.platform.logs(comp, lines))
    if state.healthy:
        return None
    sig = [m.evidence(comp) for m in matches[:3]]
    cases = {m.signature.case for m in matches}
    reason = state.exit_reason or ""
    if Case.SERVER_CRASHLOOP_CUDA in cases:
        return Finding(Case.SERVER_CRASHLOOP_CUDA, [Suggestion(action=Action.DRAIN_GPU_NODE), GPU_PROBE], sig)
    if Case.SERVER_DOWN_MODEL_LOAD in cases:
        return Finding(Case.SERVER_DOWN_MODEL_LOAD, [Suggestion(action=Action.UPDATE_HF_TOKEN)], sig)
    # An OOM only with evidence: the kubelet's OOMKilled, the kernel log naming the pid (the
    # local platform checks it), or an out-of-memory error in the server's own log. A bare
    # SIGKILL is a kill, nothing more.
    if "OOMKilled" in reason or Case.SERVER_DOWN_OOM in cases:
        server = spec.server(comp[len("server-"):])
        knob = memory_knob(spec, server, ctx.platform.kind)
        return Finding(Case.SERVER_DOWN_OOM, [Suggestion(action=Action.RESTART_SERVER), *([knob] if knob else [])],
                       sig + [f"{comp}: exit reason {reason or 'n/a'}"])
    return Finding(Case.SERVER_DOWN, [Suggestion(action=Action.RESTART_SERVER)],
                   sig + [f"{comp}: {state.state}, exit reason {reason or 'n/a'}"])


def _nodes(ctx: ActionContext, evidence: list[str]) -> list[Finding]:
    if ctx.platform.kind == "local":
        return []
    lost = [n for n in ctx.platform.nodes() if not n.ready]
    return [Finding(Case.GPU_NODE_FAILURE, [Suggestion(action=Action.GPU_NODE_FAILURE)],
                    [f"node {n.name} NotReady: {n.conditions.get('Ready', '')}" for n in lost])] if lost else []


def _queue(ctx: ActionContext, evidence: list[str]) -> list[Finding]:
    """Redis, where the platform runs it as a component of its own (the local stack's queue)."""
    try:
        state = ctx.platform.state(QUEUE)
    except Refused:
        return []  # not a component of this platform (a managed Redis)
    evidence.append(state.line())
    if state.healthy:
        return []
    if state.state in ("starting", "running") and not state.failed:
        return [Finding(Case.QUEUE_DOWN, [], [f"{QUEUE}: {state.state} again after it stopped; the "
                                           "workers reconnect and retry their acks by themselves"])]
    return [Finding(Case.QUEUE_DOWN, [Suggestion(action=Action.RESTART, params={"component": QUEUE})],
                    [f"{QUEUE}: {state.state}, last exit {state.exit_reason or 'n/a'}; the workers wait for it "
                     "(no job is lost: Redis keeps them in its append-only file)"])]


def _workers(ctx: ActionContext, spec: Spec, evidence: list[str]) -> list[Finding]:
    """Each worker (or the Deployment) that is not ready, by why: its process is down (a
    worker fault), it is starting again, or it is alive and waiting on the server or the
    queue (their fault: found by their own checks, never a reason to restart the workers)."""
    if spec.worker_pool.replicas == 0:
        evidence.append("workers: none in the spec (worker_pool.replicas = 0)")
        return []
    state = ctx.platform.state(WORKERS)
    evidence.append(state.line())
    if state.healthy:
        return []
    units = ctx.platform.units(WORKERS)
    parts = [ctx.platform.state(u) for u in units] if len(units) > 1 or units != [WORKERS] else [state]
    out: list[Finding] = []
    for part in parts:
        if part.healthy:
            continue
        why = part.detail.lower()
        line = f"{part.name}: {part.state} ({part.detail})" + (
            f", last exit: {part.exit_reason}" if part.exit_reason else "")
        alive = part.state == "running" and not part.failed
        if alive and any(k in why for k in _SERVER_WORDS):
            evidence.append(f"{line}: waiting on the inference server, not a worker fault")
        elif alive and "redis" in why:
            evidence.append(f"{line}: waiting on the queue, not a worker fault")
        elif (part.state == "starting" or (alive and any(k in why for k in _STARTING_WORDS))) \
                and not part.failed:
            out.append(Finding(Case.WORKERS_STARTING, [], [f"{line}; its documents were taken over by the "
                                                        "other workers (worker/queue.py)"]))
        else:
            command = (Suggestion(action=Action.RESTART_WORKERS) if part.name == WORKERS
                       else Suggestion(action=Action.RESTART, params={"component": part.name}))
            out.append(Finding(Case.WORKERS_DOWN, [command], [line]))
    return out


# What a worker's /readyz says when the server, not the worker, is the cause (worker/runner.py).
_SERVER_WORDS = ("circuit breaker open", "/v1/models", "1-token completion", "server lists")
# ... and while it starts (the process is up, its port not yet, or MinerU still loading).
_STARTING_WORDS = ("connecterror", "connection refused", "starting", "mineru is loading")


def server_fault(ctx: ActionContext, comp: str) -> Finding | None:
    """``server-hung`` or ``server-errors`` from diagnose's own completions to ``comp`` (None: it
    answers them), with the default thresholds; for actions that must not act on the workers
    while the server is at fault."""
    spec = getattr(ctx.platform, "spec", None) or ctx.spec
    found = _completions(ctx, spec, comp, load_thresholds(), [])
    return found[0] if found else None


def _completions(ctx: ActionContext, spec: Spec, comp: str, th: dict[str, Any],
                 evidence: list[str]) -> list[Finding]:
    """Ask a server whose /health answers for COMPLETION_PROBES 1-token completions at once
    (what the workers need of it): none answered in ``completion_timeout_s`` is a hang (a
    partial one too: some answered, some not), most answered 5xx is a failing server. The
    freshest evidence there is: no scrape interval or rate window to wait for."""
    server = spec.server(comp[len("server-"):])
    body = {"model": server.model.name, "max_tokens": 1,
            "messages": [{"role": "user", "content": "ping"}]}
    timeout_s = float(th["completion_timeout_s"])
    def ask(_i: int) -> HttpResult:
        try:
            return ctx.platform.http(comp, "POST", CHAT_ENDPOINT, body, timeout_s)
        except PlatformError as exc:  # through a proxy (Kubernetes): its timeout is the server's
            return HttpResult(0, str(exc))

    with ThreadPoolExecutor(COMPLETION_PROBES) as pool:
        results = list(pool.map(ask, range(COMPLETION_PROBES)))
    hung = [r for r in results if r.status == 0 and ("timeout" in r.text.lower() or "timed out" in r.text.lower())]
    failed = [r for r in results if r.status >= 500]
    answered = [r for r in results if r.status == 200]
    seen = (f"diagnose's {COMPLETION_PROBES} 1-token completions to {comp}: {len(answered)} answered, "
            f"{len(hung)} got no answer in {timeout_s:g} s, {len(failed)} answered 5xx")
    evidence.append(seen)
    restart = Suggestion(action=Action.RESTART_SERVER, params={"force": True},
                         comment="its /health answers but its completions do not: a restart clears a hung "
                                 f"or failing engine (check `splitstack logs {comp}` first)")
    if hung:
        return [Finding(Case.SERVER_HUNG, [restart], [f"{comp}: {len(hung)} of {COMPLETION_PROBES} completions "
                                                    f"got no answer in {timeout_s:g} s while /health answers"],
                        probed=True)]
    if len(failed) * 2 > COMPLETION_PROBES:
        first = failed[0]
        return [Finding(Case.SERVER_ERRORS, [restart], [f"{comp}: {len(failed)} of {COMPLETION_PROBES} completions "
                                                      f"answered HTTP {first.status}: {first.text[:120]}"])]
    return []


def _gpu(ctx: ActionContext, evidence: list[str]) -> list[Finding]:
    result = probe(ctx.nvml, use_real=ctx.use_real_nvml)
    if not result.available:
        evidence.append(f"GPU probe (this machine): {result.reason}")
        return []
    evidence.append("GPU probe (this machine): " + result.summary().splitlines()[0])
    out = []
    for g in result.gpus:
        if g.lost or (g.ecc_volatile_uncorrected or 0) > 0 or g.remapping_failed:
            out.append(Finding(Case.SERVER_CRASHLOOP_CUDA, [Suggestion(action=Action.DRAIN_GPU_NODE), GPU_PROBE],
                               [f"GPU {g.index} {g.uuid}: lost={g.lost}, uncorrected ECC "
                                f"{g.ecc_volatile_uncorrected}, remapping failed {g.remapping_failed}"]))
        elif g.memory_total_mib and g.memory_used_mib and g.memory_used_mib / g.memory_total_mib > 0.98:
            evidence.append(f"GPU {g.index}: memory {g.memory_used_mib:.0f}/{g.memory_total_mib:.0f} MiB used")
    for e in result.xid_events:
        out.append(Finding(Case.SERVER_CRASHLOOP_CUDA, [Suggestion(action=Action.DRAIN_GPU_NODE)],
                           [f"GPU {e.gpu_index} Xid {e.xid}: {e.meaning}"]))
    return out


def _prometheus(ctx: ActionContext, th: dict[str, Any], evidence: list[str],
                findings: list[Finding], servers_down: set[str], workers_down: bool = False,
                platform_ok: bool = True, servers_up: set[str] | None = None) -> dict[str, Any]:
    if ctx.prometheus is None:
        evidence.append("Prometheus: not configured (pass --prometheus-url); signals skipped")
        return {}
    try:
        s = ctx.prometheus.snapshot(th["rate_window"], th["stall_window"])
    except PlatformError as exc:
        evidence.append(f"Prometheus: {exc}")
        return {}
    evidence.append("Prometheus: " + ", ".join(f"{k}={_fmt(v)}" for k, v in s.items()))
    if s["server_up"] == 0 and servers_up:
        # The platform just found it healthy: the last scrape predates its start (a restart, a
        # return to split). Prometheus decides only when the platform could not be asked.
        evidence.append("Prometheus: up{job=\"inference-server\"} == 0 is older than the platform's "
                        f"state ({', '.join(sorted(servers_up))} healthy): its last scrape predates the start")
    elif s["server_up"] == 0 and not servers_down and not platform_ok:
        findings.append(Finding(Case.SERVER_DOWN, [Suggestion(action=Action.RESTART_SERVER)],
                                ["Prometheus: up{job=\"inference-server\"} == 0"]))
    server = ctx.spec.worker_server
    waiting, running, kv = s["waiting"], s["running"], s["kv_usage"]
    if waiting is not None and waiting > th["queue_waiting_max"]:
        peak = s.get("running_peak") if s.get("running_peak") is not None else running
        findings.append(Finding(Case.QUEUE_BACKLOG, [recommend_knob(ctx, peak, kv, th)], [
            f"vllm:num_requests_waiting = {waiting:g} > {th['queue_waiting_max']} "
            f"(running {_fmt(running)}, peak {_fmt(peak)} of max_num_seqs {server.max_num_seqs})"]))
    if kv is not None and kv > th["kv_usage_max"]:
        findings.append(Finding(Case.KV_FRAGMENTATION, [Suggestion(action=Action.RESTART_SERVER, params={"force": True},
                                                                   comment="clears the KV cache")], [
            f"vllm:kv_cache_usage_perc = {kv:.2f} > {th['kv_usage_max']}"
            + (f", preemptions {s['preemptions_per_s']:.2f}/s" if s.get("preemptions_per_s") else "")]))
    ttft = s["ttft_p95_s"]
    backlog = any(f.case is Case.QUEUE_BACKLOG for f in findings)
    if ttft is not None and ttft > th["ttft_p95_max_s"] and not backlog:
        findings.append(Finding(Case.LARGE_PDFS, [Suggestion(action=Action.SLOW_PDFS)], [
            f"TTFT p95 = {ttft:.2f} s > {th['ttft_p95_max_s']} s with no queue backlog"]))
    elif ttft is not None and ttft > th["ttft_p95_max_s"]:
        evidence.append(f"TTFT p95 = {ttft:.2f} s > {th['ttft_p95_max_s']} s (explained by the backlog)")
    server_up = bool(servers_up) or (not servers_down and s["server_up"] != 0)
    _flow(ctx, th, s, findings, server_up, workers_down)
    return s


def _flow(ctx: ActionContext, th: dict[str, Any], s: dict[str, Any], findings: list[Finding],
          server_up: bool, workers_down: bool) -> None:
    """Is work moving? A hung or failing server, a stuck or recovering breaker, a stall."""
    window = th["stall_window"]
    comp = f"server-{ctx.spec.worker_server.name}"
    waiting = (s.get("queue_lag") or 0) + (s.get("queue_pending") or 0)
    finished = s.get("finished_recent")
    stalled = waiting > 0 and finished is not None and finished <= 0
    stall_line = (f"{waiting:g} document(s) waiting (lag {_fmt(s.get('queue_lag'))}, pending "
                  f"{_fmt(s.get('queue_pending'))}) and none finished in the last {window}")
    timeouts, errors = s.get("timeouts_recent") or 0, s.get("errors_recent") or 0
    answered = s.get("answered_recent")
    unanswered = answered is not None and answered <= 0
    oldest, deadline = s.get("oldest_request_s"), s.get("deadline_s")
    overdue = oldest is not None and deadline is not None and deadline > 0 and oldest > deadline + 1
    breaker = s.get("breaker_max")
    is_open = breaker is not None and breaker >= th["breaker_open_value"]
    evidence = [stall_line] if stalled else []
    if is_open:
        evidence.append(f"mineru_vllm_circuit_breaker_state = {breaker:g} (open) on at least one worker")
    restart_force = Suggestion(action=Action.RESTART_SERVER, params={"force": True},
                               comment="its /health answers but its requests do not: a restart clears a hung "
                                       f"engine (check `splitstack logs {comp}` first)")
    if server_up and (overdue or (timeouts > 0 and unanswered)):
        what = [f"{timeouts:g} request(s) timed out in the last {window} and none got an answer "
                f"(deadline {_fmt(deadline)} s)"] if timeouts > 0 else []
        if overdue:
            what.append(f"a request has waited {oldest:.0f} s, past its deadline of {deadline:.0f} s")
        findings.append(Finding(Case.SERVER_HUNG, [restart_force], what + evidence))
        return
    if server_up and errors > 0 and unanswered:
        findings.append(Finding(Case.SERVER_ERRORS, [restart_force], [
            f"{errors:g} request(s) failed (5xx, 4xx or connection) in the last {window} and none "
            "got an answer"] + evidence))
        return
    if is_open and server_up:
        open_all_along = (s.get("breaker_open_all_along") or 0) >= th["breaker_open_value"]
        up_all_along = s.get("server_up_all_along") == 1
        idle = (s.get("requests_recent") or 0) <= 0
        if open_all_along and up_all_along and idle:
            findings.append(Finding(Case.BREAKER_STUCK_OPEN, [Suggestion(action=Action.RESTART_WORKERS)], evidence + [
                f"open for all of the last {window} while the server was up and no request was sent: "
                "a breaker closes within seconds of the server answering /v1/models, so this one is stuck"]))
        else:
            findings.append(Finding(Case.BREAKER_RECOVERING, [], evidence + [
                "within its recovery window: a breaker lets a trial through as soon as the server "
                "answers /v1/models, and closes on its success (worker/breaker.py); run diagnose again "
                "in a minute if it stays open"]))
        return
    known = any(f.case in (Case.SERVER_HUNG, Case.SERVER_ERRORS) for f in findings)  # diagnose's own completions
    if stalled and server_up and not workers_down and not known:
        findings.append(Finding(Case.PIPELINE_STALLED, [Suggestion(
            action=Action.RESTART_WORKERS, params={"force": True},
            comment="the server answers and no breaker is open, yet nothing finishes: the workers are stuck")],
            evidence))


def recommend_knob(ctx: ActionContext, running: float | None, kv: float | None,
                   th: dict[str, Any]) -> Suggestion:
    """The knob that relieves a backlog, from where the limit is (requirement RUNBOOK-6's three remedies)."""
    spec = ctx.spec
    server = spec.worker_server
    pool = spec.worker_pool
    slots = server.max_num_seqs * max(server.replicas, 1)
    offered = pool.replicas * pool.concurrency_per_worker
    if pool.replicas and offered > slots:
        per_worker = max(1, slots // pool.replicas)
        return Suggestion(action=Action.TUNE, params={"set": {"concurrency_per_worker": str(per_worker)}},
                          comment=f"workers offer {offered} in-flight requests for {slots} batch slots")
    if kv is not None and kv > th["kv_usage_max"]:
        return Suggestion(action=Action.SCALE,
                          params={"component": server_component(server.name), "replicas": server.replicas + 1},
                          comment=f"KV cache full ({kv:.2f}): more batch slots need more GPU memory")
    if running is not None and running >= server.max_num_seqs:  # the peak over the window
        return Suggestion(action=Action.TUNE, params={"set": {"max_num_seqs": str(server.max_num_seqs * 2)}},
                          comment=f"the batch is capped at max_num_seqs={server.max_num_seqs} while the KV cache "
                                  f"has room ({_fmt(kv)})")
    return Suggestion(action=Action.TUNE,
                      params={"set": {"max_num_batched_tokens": str(server.max_num_batched_tokens * 2)}},
                      comment="prefill budget per step limits admission (RUNBOOK-6: more throughput per step)")


def _fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3g}"
