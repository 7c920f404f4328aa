"""`runbook` commands for the actions, generated from the action registry.

Each action in ``runbooks.registry.ACTIONS`` becomes a command: its help is the action's
summary, its options are the fields of its parameter model (descriptions as help, defaults from
the model), plus the options every action takes (target, audit, output) and ``--apply`` for
actions that change something. Adding an action is one registry entry; nothing here changes.

Exit status: 0 planned/applied/no-op/report, 1 failed or rolled back, 2 refused (bad input,
target not the spec's, precondition; nothing changed).
"""

from __future__ import annotations

import inspect
import time
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic.fields import FieldInfo

from contract.extras import MissingExtra
from contract.models import parse_assignments
from runbooks.audit import AuditLog as AuditLogFile
from runbooks.connect import build_context
from runbooks.model import PlatformError, Refused, Report
from runbooks.params import cli_flag, cli_spelling
from runbooks.registry import ACTIONS, ActionDef, invoke
from splitstack.cli.options import (
    Apply,
    AuditLog,
    KubeContext,
    Output,
    OutputOpt,
    PrometheusUrl,
    SpecOverride,
    Stack,
    check_http_url,
    epilog,
)
from splitstack.cli.terminal import echo

EXIT = {"planned": 0, "applied": 0, "noop": 0, "report": 0, "failed": 1, "rolled_back": 1, "refused": 2}


def _spec_overrides(items: list[str] | None) -> dict[str, Any]:
    try:
        return parse_assignments(items or [], "--spec-override", "queue.port=16400")
    except ValueError as exc:
        raise Refused(str(exc)) from None


def run(name: str, raw: dict[str, Any], stack: str, apply: bool, spec_override: list[str] | None,
        prometheus_url: str | None, kube_context: str | None, audit_log: Path | None, output: Output) -> None:
    """Invoke one action and print its report; exits with the report's code."""
    if prometheus_url is not None:
        check_http_url("--prometheus-url", prometheus_url)
    if audit_log is not None and audit_log.is_dir():  # '' is '.', a folder too
        echo(f"error: --audit-log {str(audit_log)!r}: is a folder; pass the JSONL file to append to", err=True)
        raise typer.Exit(2)
    try:
        ctx = build_context(stack, apply, _spec_overrides(spec_override), prometheus_url, kube_context, audit_log)
    except (Refused, PlatformError, MissingExtra) as exc:
        report = Report(action=name, outcome="refused" if isinstance(exc, Refused | MissingExtra) else "failed",
                        summary=str(exc))
    else:
        try:
            report = invoke(ctx, name, raw)
        except OSError as exc:
            if exc.filename is None or Path(exc.filename) not in (ctx.audit.path, *ctx.audit.path.parents):
                raise
            # the audit record is written before anything is done: nothing was changed
            echo(f"error: --audit-log {ctx.audit.path}: cannot write there ({exc.strerror or exc}); pass a "
                 "file in a folder you can write. Nothing was done.", err=True)
            raise typer.Exit(2) from None
    echo(report.model_dump_json(indent=1) if output is Output.json else report.render())
    raise typer.Exit(EXIT[report.outcome])


def _is_mapping(annotation: Any) -> bool:
    return typing.get_origin(annotation) is dict


def _scalar(annotation: Any) -> Any:
    """``str | None`` -> ``str``: typer takes the plain type and a None default."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 else str
    return annotation


def _bounds(field: FieldInfo) -> tuple[float | None, float | None]:
    """min/max of a numeric field from its ge/gt/le/lt, so the flag itself refuses a value out of
    range (exit 2 naming the flag) before the action's model sees it."""
    lo = hi = None
    for meta in field.metadata:
        lo = next((v for v in (getattr(meta, "ge", None), getattr(meta, "gt", None)) if v is not None), lo)
        hi = next((v for v in (getattr(meta, "le", None), getattr(meta, "lt", None)) if v is not None), hi)
    return lo, hi


def _option(name: str, field: FieldInfo) -> inspect.Parameter:
    """The typer option of one parameter-model field."""
    flag = cli_flag(name, field)
    required = field.is_required()
    default: Any = inspect.Parameter.empty if required else field.get_default(call_default_factory=True)
    help_text = field.description or ""
    if _is_mapping(field.annotation):
        annotation: Any = Annotated[list[str] | None, typer.Option(
            f"--{flag}", metavar=f"{cli_spelling(field, 'cli_key', 'KEY')}=VALUE", help=f"{help_text} Repeatable.")]
        default = inspect.Parameter.empty if required else None
    elif field.annotation is bool:
        annotation = Annotated[bool, typer.Option(f"--{flag}/--no-{flag}", help=help_text)]
    else:
        base = _scalar(field.annotation)
        lo, hi = _bounds(field)
        annotation = Annotated[base if required else base | None,
                               typer.Option(f"--{flag}", help=help_text, min=lo, max=hi)]
    return inspect.Parameter(f"p_{name}", inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=default)


def _common(mutating: bool) -> list[inspect.Parameter]:
    kw = inspect.Parameter.KEYWORD_ONLY
    params = [
        inspect.Parameter("stack", kw, annotation=Stack, default="local"),
        inspect.Parameter("spec_override", kw, annotation=SpecOverride, default=None),
        inspect.Parameter("prometheus_url", kw, annotation=PrometheusUrl, default=None),
        inspect.Parameter("kube_context", kw, annotation=KubeContext, default=None),
        inspect.Parameter("audit_log", kw, annotation=AuditLog, default=None),
        inspect.Parameter("output", kw, annotation=OutputOpt, default=Output.text),
    ]
    if mutating:
        params.insert(0, inspect.Parameter("apply", kw, annotation=Apply, default=False))
    return params


def _raw_params(action: ActionDef, values: dict[str, Any]) -> dict[str, Any]:
    """The action's parameters from the command's values (KEY=VALUE lists become dicts)."""
    raw: dict[str, Any] = {}
    for name, field in action.params.model_fields.items():
        value = values[f"p_{name}"]
        if value is None:
            continue
        if _is_mapping(field.annotation):
            flag = f"--{cli_flag(name, field)}"
            try:
                value = parse_assignments(value, flag, cli_spelling(field, "cli_example", "KEY=VALUE"),
                                          yaml_values=False, key_name=cli_spelling(field, "cli_key", "KEY"))
            except ValueError as exc:
                echo(f"error: {exc}", err=True)
                raise typer.Exit(2) from None
        raw[name] = value
    return raw


def action_command(action: ActionDef) -> Callable[..., None]:
    """A typer command function for ``action`` (its signature is built from the params model)."""

    def command(**values: Any) -> None:
        run(action.name, _raw_params(action, values), values["stack"], values.get("apply", False),
            values["spec_override"], values["prometheus_url"], values["kube_context"], values["audit_log"],
            values["output"])

    fields = [_option(n, f) for n, f in action.params.model_fields.items()]
    fields.sort(key=lambda p: p.default is not inspect.Parameter.empty)  # required options first
    command.__signature__ = inspect.Signature(fields + _common(action.mutating))  # type: ignore[attr-defined]
    command.__doc__ = f"{action.summary}\n\nHandles: {action.case}."
    command.__name__ = action.name.replace("-", "_")
    return command


ACTION_EXITS = ("0 planned, applied, nothing to do or reported; 1 failed or rolled back; 2 refused (bad input, "
                "a target that is not the spec's, a precondition not met; nothing changed)")


def action_epilog(action: ActionDef) -> str:
    """Examples for a generated action command: the dry run (with the required options, spelled
    from their fields' cli_example) and, for an action that changes something, the same with --apply."""
    required = []
    for name, field in action.params.model_fields.items():
        if field.is_required():
            value = cli_spelling(field, "cli_example", "VALUE")
            required.append(f"--{cli_flag(name, field)} {value if ' ' not in value else repr(value)}")
    base = " ".join([f"runbook {action.name}", *required, "--stack local"])
    examples = [base, f"{base} --apply"] if action.mutating else [base, f"{base} --output json"]
    return epilog(*examples, exits=ACTION_EXITS)


def register(app: typer.Typer) -> None:
    """Add a command per action, plus `actions` and `audit-log`, to the `runbook` app."""

    @app.command("actions", epilog=epilog("runbook actions", exits="0 listed"))
    def list_actions() -> None:
        """Every action and the situation it handles."""
        for a in ACTIONS.values():
            echo(f"{a.name:18} {'changes' if a.mutating else 'read-only':9} {a.case}")

    @app.command("audit-log", epilog=epilog("runbook audit-log --last 5 --action restart-server"))
    def audit_log_cmd(last: Annotated[int, typer.Option(help="How many records.", min=1)] = 20,
                      action: Annotated[str | None, typer.Option(help="Only this action.")] = None,
                      stack: Stack = "local", spec_override: SpecOverride = None,
                      kube_context: KubeContext = None, audit_log: AuditLog = None) -> None:
        """The last runbook runs: when, who, what, outcome (read-only)."""
        path = audit_log
        if path is not None and not path.is_file():  # one named by hand must exist; the default may not yet
            echo(f"error: --audit-log {path}: {'is a folder, not a file' if path.is_dir() else 'no such file'}; "
                 "pass the JSONL file the actions write (see `runbook audit-log --help`)", err=True)
            raise typer.Exit(2)
        if action is not None and action not in ACTIONS:
            echo(f"error: --action {action!r}: no such action (known: {', '.join(sorted(ACTIONS))})", err=True)
            raise typer.Exit(2)
        if path is None:
            try:
                path = build_context(stack, False, _spec_overrides(spec_override), None, kube_context).audit.path
            except (Refused, PlatformError, MissingExtra) as exc:
                echo(f"error: {exc}", err=True)
                raise typer.Exit(2) from None
        rows = [r for r in AuditLogFile(path, time.time).records() if action in (None, r.get("action"))]
        for r in rows[-last:]:
            mode = "apply" if r.get("apply") else "dry-run"
            echo(f"{r.get('time', '?')} {r.get('actor', '?')} {r.get('action')} [{mode}] "
                       f"{r.get('outcome')}: {r.get('summary', r.get('error', ''))}")
        if not rows:
            echo(f"no records in {path}")

    for action in ACTIONS.values():
        app.command(action.name, epilog=action_epilog(action))(action_command(action))
