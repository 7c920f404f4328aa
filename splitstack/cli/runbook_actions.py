"""`runbook` commands for the actions (mounted by splitstack/cli/runbook.py: `register(app)`).

Only wiring: each command turns its options into the action's parameters and calls
`runbooks.actions.registry.invoke`. Exit status: 0 planned/applied/no-op/report, 1 failed or
rolled back, 2 refused (bad input, target not the spec's, precondition; nothing changed).
"""

from __future__ import annotations

import os
import time
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from runbooks.actions.model import Refused, Report

EXIT = {"planned": 0, "applied": 0, "noop": 0, "report": 0, "failed": 1, "rolled_back": 1, "refused": 2}


class Output(str, Enum):
    text = "text"
    json = "json"


Stack = Annotated[str, typer.Option("--stack", help="Deployment spec: Pulumi.<stack>.yaml.")]
Apply = Annotated[bool, typer.Option("--apply", help="Act; without it only the plan is printed.")]
SpecOverride = Annotated[list[str] | None, typer.Option(
    "--spec-override", help="KEY=VALUE dotted spec override, as the local stack was started with "
    "(e.g. queue.port=16400); repeatable.")]
PromUrl = Annotated[str | None, typer.Option(
    "--prometheus-url", help="Prometheus base URL; default for a local stack: its own.")]
KubeContext = Annotated[str | None, typer.Option(
    "--kube-context", help="kubeconfig context (default: the current one).")]
AuditLogOpt = Annotated[Path | None, typer.Option(
    "--audit-log", help="Audit JSONL; default: <state_dir>/audit.jsonl (local) or "
    "~/.local/state/splitstack/audit-<stack>.jsonl.")]
Out = Annotated[Output, typer.Option("--output", help="text or json.")]
Server = Annotated[str | None, typer.Option("--server", help="Server name from the spec "
                                               "(default: the workers' server).")]


def _overrides(items: list[str] | None) -> dict[str, Any]:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise Refused(f"--spec-override {item!r}: expected KEY=VALUE, e.g. queue.port=16400")
        out[key] = yaml.safe_load(value)
    return out


def build_context(stack: str, apply: bool, spec_override: list[str] | None, prometheus_url: str | None,
                  kube_context: str | None, audit_log: Path | None):
    from contract.spec import Target
    from contract.spec_loader import SpecError, load_stack, project_root
    from runbooks.actions.context import ActionContext
    from runbooks.audit import AuditLog
    from runbooks.diagnose.signals import Signals
    from stack.presets import with_presets

    root = project_root()
    try:
        # As `splitstack up --engine sim` does: an engine override brings its preset (context
        # length, vision) so the spec matches the running stack.
        spec = load_stack(stack, root, overrides=with_presets(_overrides(spec_override)))
    except SpecError as exc:
        raise Refused(str(exc)) from exc
    if spec.target is Target.local:
        from runbooks.platforms.local import LocalPlatform
        from stack.launcher import LocalStack

        local = LocalStack(spec, root)
        platform: Any = LocalPlatform(local)
        default_audit = local.paths.audit_log
        prometheus_url = prometheus_url or f"http://{spec.local.host}:{spec.observability.prometheus_port}"
    else:
        from runbooks.platforms.kubernetes import KubernetesPlatform

        platform = KubernetesPlatform.from_kubeconfig(spec, kube_context)
        default_audit = Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state")) \
            / "splitstack" / f"audit-{spec.stack}.jsonl"
    return ActionContext(spec=spec, platform=platform, audit=AuditLog(audit_log or default_audit, time.time),
                         apply=apply, prometheus=Signals(prometheus_url) if prometheus_url else None)


def run(name: str, raw: dict[str, Any], stack: str, apply: bool, spec_override: list[str] | None,
        prometheus_url: str | None, kube_context: str | None, audit_log: Path | None,
        output: Output) -> None:
    from runbooks.actions.model import PlatformError
    from runbooks.actions.registry import invoke

    try:
        ctx = build_context(stack, apply, spec_override, prometheus_url, kube_context, audit_log)
    except (Refused, PlatformError) as exc:
        report = Report(action=name, outcome="refused" if isinstance(exc, Refused) else "failed",
                        summary=str(exc))
    else:
        report = invoke(ctx, name, {k: v for k, v in raw.items() if v is not None})
    typer.echo(report.model_dump_json(indent=1) if output is Output.json else report.render())
    raise typer.Exit(EXIT[report.outcome])


def register(app: typer.Typer) -> None:
    """Add the action commands to the `runbook` app."""

    @app.command("actions")
    def list_actions() -> None:
        """Every action and the runbook case it handles."""
        from runbooks.actions.registry import ACTIONS

        for a in ACTIONS.values():
            typer.echo(f"{a.name:18} {'changes' if a.mutating else 'read-only':9} {a.case}")

    @app.command("audit-log")
    def audit_log_cmd(last: Annotated[int, typer.Option(help="How many records.")] = 20,
                      action: Annotated[str | None, typer.Option(help="Only this action.")] = None,
                      stack: Stack = "local", spec_override: SpecOverride = None,
                      kube_context: KubeContext = None, audit_log: AuditLogOpt = None) -> None:
        """The last runbook runs: when, who, what, outcome (read-only)."""
        from runbooks.audit import AuditLog

        path = audit_log
        if path is None:
            try:
                path = build_context(stack, False, spec_override, None, kube_context, None).audit.path
            except Refused as exc:
                typer.echo(f"error: {exc}", err=True)
                raise typer.Exit(2) from None
        rows = [r for r in AuditLog(path, time.time).records() if action in (None, r.get("action"))]
        for r in rows[-last:]:
            mode = "apply" if r.get("apply") else "dry-run"
            typer.echo(f"{r.get('time', '?')} {r.get('actor', '?')} {r.get('action')} [{mode}] "
                       f"{r.get('outcome')}: {r.get('summary', r.get('error', ''))}")
        if not rows:
            typer.echo(f"no records in {path}")

    @app.command("diagnose")
    def diagnose_cmd(stack: Stack = "local", spec_override: SpecOverride = None,
                     prometheus_url: PromUrl = None, kube_context: KubeContext = None,
                     audit_log: AuditLogOpt = None, output: Out = Output.text,
                     threshold: Annotated[list[str] | None, typer.Option(
                         help="NAME=VALUE override of runbooks/diagnose/thresholds.yaml.")] = None,
                     log_lines: Annotated[int, typer.Option(help="Log lines scanned.")] = 300,
                     gpu: Annotated[bool, typer.Option(help="Probe this machine's GPUs.")] = True) -> None:
        """Walk the symptoms and name the runbook case, with evidence and the command to run."""
        th = dict(t.split("=", 1) for t in threshold or [] if "=" in t)
        bad = [t for t in threshold or [] if "=" not in t]
        if bad:
            typer.echo(f"error: --threshold {bad[0]!r}: expected NAME=VALUE", err=True)
            raise typer.Exit(2)
        run("diagnose", {"thresholds": th, "log_lines": log_lines, "gpu": gpu}, stack, False,
            spec_override, prometheus_url, kube_context, audit_log, output)

    @app.command("slo-status")
    def slo_status_cmd(stack: Stack = "local", spec_override: SpecOverride = None,
                       prometheus_url: PromUrl = None, audit_log: AuditLogOpt = None,
                       output: Out = Output.text,
                       window: Annotated[str | None, typer.Option(help="e.g. 30d")] = None,
                       current: Annotated[str, typer.Option(help="Burn-rate window.")] = "1h") -> None:
        """Attainment, error budget left and burn rate of every SLO (slo/objectives.yaml)."""
        run("slo-status", {"window": window, "current": current}, stack, False, spec_override,
            prometheus_url, None, audit_log, output)

    @app.command("restart-server")
    def restart_server_cmd(server: Server = None, apply: Apply = False,
                           force: Annotated[bool, typer.Option(help="Restart a healthy server too.")] = False,
                           reason: Annotated[str, typer.Option(help="Why (audit log).")] = "",
                           stack: Stack = "local", spec_override: SpecOverride = None,
                           prometheus_url: PromUrl = None, kube_context: KubeContext = None,
                           audit_log: AuditLogOpt = None, output: Out = Output.text) -> None:
        """Runbook 1 case 1 / Runbook 2 case 3: restart the inference server, wait for /health."""
        run("restart-server", {"server": server, "force": force, "reason": reason}, stack, apply,
            spec_override, prometheus_url, kube_context, audit_log, output)

    @app.command("update-hf-token")
    def update_hf_token_cmd(server: Server = None, apply: Apply = False,
                            token_env: Annotated[str | None, typer.Option(
                                help="Env var holding the new token (default: the spec's).")] = None,
                            force: Annotated[bool, typer.Option()] = False,
                            stack: Stack = "local", spec_override: SpecOverride = None,
                            kube_context: KubeContext = None, audit_log: AuditLogOpt = None,
                            output: Out = Output.text) -> None:
        """Runbook 1 case 3: store a new Hugging Face token in the server's secret and restart it."""
        run("update-hf-token", {"server": server, "token_env": token_env, "force": force}, stack,
            apply, spec_override, None, kube_context, audit_log, output)

    @app.command("drain-gpu-node")
    def drain_cmd(server: Server = None, apply: Apply = False,
                  node: Annotated[str | None, typer.Option(help="Node (default: the server's).")] = None,
                  force: Annotated[bool, typer.Option()] = False,
                  stack: Stack = "local", spec_override: SpecOverride = None,
                  kube_context: KubeContext = None, audit_log: AuditLogOpt = None,
                  output: Out = Output.text) -> None:
        """Runbook 1 case 2: cordon the faulty GPU node and move the server to a spare one."""
        run("drain-gpu-node", {"server": server, "node": node, "force": force}, stack, apply,
            spec_override, None, kube_context, audit_log, output)

    @app.command("gpu-node-failure")
    def node_failure_cmd(server: Server = None, apply: Apply = False, stack: Stack = "local",
                         spec_override: SpecOverride = None, kube_context: KubeContext = None,
                         audit_log: AuditLogOpt = None, output: Out = Output.text) -> None:
        """DR scenario 2: cordon NotReady GPU nodes and reschedule the server."""
        run("gpu-node-failure", {"server": server}, stack, apply, spec_override, None, kube_context,
            audit_log, output)

    @app.command("tune")
    def tune_cmd(set_: Annotated[list[str], typer.Option("--set", help="KNOB=VALUE (spec field), repeatable.")],
                 server: Server = None, apply: Apply = False, stack: Stack = "local",
                 spec_override: SpecOverride = None, kube_context: KubeContext = None,
                 audit_log: AuditLogOpt = None, output: Out = Output.text) -> None:
        """Performance tuning: max_num_batched_tokens, max_num_seqs, gpu_memory_utilization,
        concurrency_per_worker, circuit_breaker.recovery_timeout_s... (old value restored on failure)."""
        from runbooks.actions.tune import parse_assignments

        try:
            changes = parse_assignments(set_)
        except Refused as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
        run("tune", {"server": server, "set": changes}, stack, apply, spec_override, None,
            kube_context, audit_log, output)

    @app.command("scale")
    def scale_cmd(component: Annotated[str, typer.Option(help="server-<name> or workers.")],
                  replicas: Annotated[int, typer.Option(help="Replicas wanted.")],
                  apply: Apply = False, stack: Stack = "local", spec_override: SpecOverride = None,
                  kube_context: KubeContext = None, audit_log: AuditLogOpt = None,
                  output: Out = Output.text) -> None:
        """Runbook 2 case 1 solution 1: scale the server (GPU-bounded) or the workers."""
        run("scale", {"component": component, "replicas": replicas}, stack, apply, spec_override,
            None, kube_context, audit_log, output)

    @app.command("slow-pdfs")
    def slow_pdfs_cmd(top: Annotated[int, typer.Option(help="How many.")] = 20,
                      stack: Stack = "local", spec_override: SpecOverride = None,
                      kube_context: KubeContext = None, audit_log: AuditLogOpt = None,
                      output: Out = Output.text) -> None:
        """Runbook 2 case 2: the slowest documents, with pages and seconds per page."""
        run("slow-pdfs", {"top": top}, stack, False, spec_override, None, kube_context, audit_log, output)

    @app.command("restart-workers")
    def restart_workers_cmd(apply: Apply = False,
                            force: Annotated[bool, typer.Option(help="Even with no breaker open.")] = False,
                            stack: Stack = "local", spec_override: SpecOverride = None,
                            prometheus_url: PromUrl = None, kube_context: KubeContext = None,
                            audit_log: AuditLogOpt = None, output: Out = Output.text) -> None:
        """Runbook 3: rolling restart of the workers to reset stuck-open circuit breakers."""
        run("restart-workers", {"force": force}, stack, apply, spec_override, prometheus_url,
            kube_context, audit_log, output)

    @app.command("patch-workers")
    def patch_workers_cmd(image_tag: Annotated[str, typer.Option(help="Patched image tag.")],
                          apply: Apply = False, stack: Stack = "local",
                          spec_override: SpecOverride = None, kube_context: KubeContext = None,
                          audit_log: AuditLogOpt = None, output: Out = Output.text) -> None:
        """Security patch: roll the workers to a new image tag with zero downtime."""
        run("patch-workers", {"image_tag": image_tag}, stack, apply, spec_override, None,
            kube_context, audit_log, output)

    @app.command("upgrade-server")
    def upgrade_cmd(to: Annotated[list[str], typer.Option(
                        "--to", help="image_tag=v0.33.0 | sim_profile=NAME | extra_args=[...] (YAML).")],
                    server: Server = None, apply: Apply = False, stack: Stack = "local",
                    spec_override: SpecOverride = None, kube_context: KubeContext = None,
                    audit_log: AuditLogOpt = None, output: Out = Output.text) -> None:
        """vLLM upgrade: set the version, check /health and a test inference, roll back on failure."""
        from runbooks.actions.tune import parse_assignments

        try:
            changes = {k: yaml.safe_load(v) if k == "extra_args" else v
                       for k, v in parse_assignments(to).items()}
        except Refused as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
        run("upgrade-server", {"server": server, "to": changes}, stack, apply, spec_override, None,
            kube_context, audit_log, output)
