"""`splitstack infra ...`: render the Pulumi program's objects and the single-host Compose file.

Mount with ``app.add_typer(splitstack.cli.infra.app, name="infra")``. Nothing here calls the Pulumi CLI:
``render`` runs the real program under mocks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
import yaml

from contract.extras import MissingExtra, require
from contract.spec_loader import SpecError, load_stack, project_root
from infra.compose import HEADER, ComposeError, compose_document, validate_compose, write_compose
from infra.policy.rules import check_all
from splitstack.cli.options import Output, OutputOpt, Stack, epilog, writing
from splitstack.cli.terminal import echo

app = typer.Typer(help="Kubernetes manifests and Docker Compose from the deployment spec.",
                  no_args_is_help=True)


def _load(stack: str):
    try:
        return load_stack(stack)
    except SpecError as exc:
        echo(str(exc), err=True)
        raise typer.Exit(2) from None


def _refuse(stack: str, exc: Exception) -> typer.Exit:
    echo(f"stack {stack!r}: {exc}", err=True)
    return typer.Exit(2)


def _pulumi_module(stack: str, module: str, command: str):
    """A module that runs the Pulumi program under mocks (the `infra` extra)."""
    try:
        return require(module, "infra", f"`splitstack infra {command}` (the Pulumi program under mocks)")
    except MissingExtra as exc:
        raise _refuse(stack, exc) from None


@app.command(epilog=epilog("splitstack infra render --stack dev --out rendered --validate",
                           exits="0 written and every rule passed; 1 a policy rule or schema failed (files written); "
                           "2 bad input or a stack that does not fit its cluster"))
def render(
    stack: Stack = "dev",
    out: Annotated[Path, typer.Option(help="Folder for one YAML file per object.")] = Path(
        "rendered"),
    validate: Annotated[bool, typer.Option(
        help="Also validate against Kubernetes 1.30..newest schemas (needs kubernetes-validate)."
    )] = False,
) -> None:
    """Write every Kubernetes object `pulumi up` would create (captured under mocks)."""

    spec = _load(stack)
    render_mod = _pulumi_module(stack, "infra.render", "render")
    try:
        result = render_mod.capture(spec, project_root())
    except ValueError as exc:
        raise _refuse(stack, exc) from None
    with writing("--out", out):
        files = render_mod.write_manifests(result, out)
    echo(f"wrote {len(result.objects)} objects ({len(files)} files) to {out}")
    violations = [f"[{rule}] {v}" for rule, vs in check_all(result.objects).items() for v in vs]
    problems = []
    if validate:
        try:
            manifests = require("infra.policy.manifests", "dev", "`--validate` (Kubernetes schemas)")
        except MissingExtra as exc:
            echo(str(exc), err=True)
            raise typer.Exit(2) from None
        problems = manifests.validate_all(result.objects)
    for line in violations + problems:
        echo(line, err=True)
    if violations or problems:
        raise typer.Exit(1)


@app.command(epilog=epilog("splitstack infra plan --stack prod",
                           exits="0 it fits; 2 it does not fit its cluster, or bad input"))
def plan(stack: Stack = "dev", output: OutputOpt = Output.text) -> None:
    """What `pulumi up` would create (nodes by zone, GPUs, pods per node, storage, operators,
    images, cloud resources), or why the stack does not fit its cluster (exit 2)."""

    spec = _load(stack)
    plan_mod = _pulumi_module(stack, "infra.plan", "plan")
    try:
        result = plan_mod.build_plan(spec, project_root())
    except ValueError as exc:
        raise _refuse(stack, exc) from None
    if output is Output.json:
        echo(json.dumps(plan_mod.plan_dict(result), indent=2, default=str))
    else:
        echo(plan_mod.render_plan(result), nl=False)
    if not result.fits:
        raise typer.Exit(2)


@app.command(epilog=epilog("splitstack infra compose --stack dev --out deploy/compose.yaml"))
def compose(
    stack: Stack = "dev",
    out: Annotated[Path | None, typer.Option(
        help="Compose file to write (prometheus/ goes beside it); stdout if omitted.")] = None,
) -> None:
    """Docker Compose for one GPU host, validated against the Compose specification schema."""

    spec = _load(stack)
    try:
        if out is None:
            document = compose_document(spec)
            problems = validate_compose(document)
            if problems:
                raise ComposeError("; ".join(problems))
            echo(HEADER.format(stack=stack) + yaml.safe_dump(document, sort_keys=False))
            return
        with writing("--out", out):
            files = write_compose(spec, project_root(), out)
    except (ComposeError, MissingExtra) as exc:
        raise _refuse(stack, exc) from None
    echo(f"wrote {out} and {len(files) - 1} Prometheus files beside it; run "
               f"`docker compose -p splitstack-{stack} -f {out} up -d`")
