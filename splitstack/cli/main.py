"""The `splitstack` command: wires the packages' commands together; no logic of its own."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from bench.demo import DEMO_WORKERS, run_demo
from contract.cluster_fit import ClusterFitError, check_cluster_fit
from contract.models import parse_assignments
from contract.spec import DeploymentMode, Engine, LocalRuntime
from contract.spec_loader import SpecError, available_stacks, load_file, load_stack, project_root, stack_file
from contract.spec_schema import SCHEMA_PATH, render_schema
from runbooks.names import Action
from splitstack.cli import bench as bench_cli
from splitstack.cli import cluster as cluster_cli
from splitstack.cli import images as images_cli
from splitstack.cli import infra as infra_cli
from splitstack.cli import runbook as runbook_cli
from splitstack.cli import runbook_actions
from splitstack.cli import sim as sim_cli
from splitstack.cli import slo as slo_cli
from splitstack.cli import worker as worker_cli
from splitstack.cli.options import Output, OutputOpt, SpecOverride, Stack, add_version, epilog
from splitstack.cli.terminal import SafeConsole
from stack.components import SetupError
from stack.launcher import LocalStack, StackError
from stack.podman import PodmanError
from stack.presets import engine_overrides
from stack.topology import mode_overrides

app = typer.Typer(no_args_is_help=True)
add_version(app, "splitstack", "Provision, run and operate the split-container pipeline.")
spec_app = typer.Typer(no_args_is_help=True, help="The deployment spec (Pulumi.<stack>.yaml).")
app.add_typer(spec_app, name="spec")
console = SafeConsole()
err = SafeConsole(stderr=True)

StackOpt = Stack


RuntimeOpt = Annotated[LocalRuntime | None, typer.Option(
    help="process: the checkout's Python; podman: the simulator and the workers from their images "
         "(`make images`). Overrides local.runtime.")]


def _overrides(engine: Engine | None, workers: int | None, runtime: LocalRuntime | None = None,
               spec_override: list[str] | None = None, mode: DeploymentMode | None = None) -> dict:
    try:
        out: dict = parse_assignments(spec_override or [], "--spec-override", "queue.port=16400")
    except ValueError as exc:
        err.print(f"[red]{escape(str(exc))}[/red]", markup=True, highlight=False)
        raise typer.Exit(2) from None
    out.update(engine_overrides(engine) if engine is not None else {})
    if mode is not None:
        out.update(mode_overrides(mode))
    if workers is not None:
        out["worker_pool.replicas"] = workers
    if runtime is not None:
        out["local.runtime"] = runtime.value
    return out


def _local(stack: str, engine: Engine | None = None, workers: int | None = None,
           runtime: LocalRuntime | None = None, spec_override: list[str] | None = None,
           mode: DeploymentMode | None = None) -> LocalStack:
    try:
        spec = load_stack(stack, overrides=_overrides(engine, workers, runtime, spec_override, mode))
    except SpecError as exc:
        err.print(f"[red]{escape(str(exc))}[/red]")
        raise typer.Exit(2) from None
    if spec.target.value != "local":
        err.print(f"[red]stack {stack!r} has target {spec.target.value!r}; `splitstack up` runs "
                  "only target 'local' stacks (use `pulumi up` for Kubernetes)[/red]")
        raise typer.Exit(2)
    return LocalStack(spec, project_root())


@app.command(epilog=epilog("splitstack up --stack local --engine sim --workers 2",
                           "splitstack up --engine sim --workers 2 --mode monolithic",
                           exits="0 healthy; 1 a component failed to start (nothing is left running); 2 bad input"))
def up(
    stack: StackOpt = "local",
    engine: Annotated[Engine | None, typer.Option(help="Override the engine of the first server.")] = None,
    workers: Annotated[int | None, typer.Option(min=0, help="Override worker_pool.replicas.")] = None,
    runtime: RuntimeOpt = None,
    spec_override: SpecOverride = None,
    mode: Annotated[DeploymentMode | None, typer.Option(
        help="Override deployment_mode. monolithic: each worker gets an engine of its own (with "
             "--engine sim, the simulator's private engines with the server's profile) and no shared "
             "server runs.")] = None,
) -> None:
    """Start the local stack (health-gated); on failure nothing is left running."""
    local = _local(stack, engine, workers, runtime, spec_override, mode)
    t0 = time.monotonic()
    try:
        # a loading line quotes the component's log: escaped, never read as rich markup
        state = local.up(lambda c, m: console.print(f"[cyan]{c}[/cyan] {escape(m)}", soft_wrap=True))
    except (SetupError, StackError, PodmanError) as exc:
        err.print(f"[red]up failed:[/red] {exc}")
        raise typer.Exit(1) from None
    console.print(f"[green]stack {stack!r} healthy in {time.monotonic() - t0:.1f} s[/green]")
    console.print(f"state and logs: {local.paths.root}", soft_wrap=True, highlight=False)
    _print_status(local)
    del state


@app.command(epilog=epilog("splitstack down --stack local"))
def down(stack: StackOpt = "local") -> None:
    """Stop everything the local stack started (also after a crash of the launcher)."""
    local = _local(stack)
    started = time.monotonic()
    if not local.supervisor.running():
        console.print(f"stack {stack!r}: supervisord is not running; sweeping what it may have left")

    def stopped(component: str, seconds: float, state: str) -> None:
        console.print(f"stopped {component} in {seconds:.1f} s" + ("" if state == "STOPPED" else f" ({state})"))

    strays = local.down(on_stopped=stopped)
    if strays:
        console.print(f"swept {len(strays)} processes outside supervisord: {strays}", soft_wrap=True)
    console.print(f"[green]stack {stack!r} is down[/green] ({time.monotonic() - started:.1f} s)")


def _print_status(local: LocalStack) -> bool:
    rows = local.status()
    if not rows:
        console.print("the local stack is not running (`splitstack up` starts it)")
        return False
    table = Table("component", "process", "pid", "health", "url")
    table.columns[4].overflow = "fold"
    for r in rows:
        health = "[green]ok[/green]" if r["healthy"] else f"[red]{r['detail']}[/red]"
        table.add_row(r["component"], r["process"], str(r["pid"] or "-"), health, r["url"])
    console.print(table)
    console.print(f"deployment mode: {local.deployment_mode() or 'unknown'}")
    console.print(f"logs: {local.paths.logs}", soft_wrap=True, highlight=False)
    console.print("(`splitstack logs COMPONENT` shows one)", highlight=False)
    return all(r["healthy"] for r in rows)


@app.command(epilog=epilog("splitstack status --stack local",
                           exits="0 every component healthy; 1 one is not (or the stack is not running); 2 bad input"))
def status(stack: StackOpt = "local", output: OutputOpt = Output.text) -> None:
    """Each component's process state, health and URL; exit 1 if any is unhealthy."""
    local = _local(stack)
    if output is Output.json:
        rows = local.status()
        typer.echo(json.dumps({"stack": stack, "running": bool(rows), "deployment_mode": local.deployment_mode(),
                               "healthy": bool(rows) and all(r["healthy"] for r in rows), "components": rows,
                               "logs": str(local.paths.logs)}, indent=2, default=str))
        if not rows or not all(r["healthy"] for r in rows):
            raise typer.Exit(1)
        return
    if not _print_status(local):
        raise typer.Exit(1)


@app.command(epilog=epilog("splitstack restart workers --reason 'stuck after deploy'",
                           exits="0 restarted and healthy; 1 failed (rolled back where it could); 2 refused"))
def restart(
    component: Annotated[str, typer.Argument(help="queue, prometheus, server-<name>, workers, worker-<i>.")],
    stack: StackOpt = "local",
    reason: Annotated[str, typer.Option(help="Why, for the audit log.")] = "",
) -> None:
    """Restart one component and wait until it is healthy (the `runbook restart` action, applied
    and audited; workers drain first, one at a time)."""
    runbook_actions.run(Action.RESTART, {"component": component, "reason": reason}, stack, True, None,
                        None, None, None, Output.text)


@app.command(epilog=epilog("splitstack logs worker-0 --lines 100", "splitstack logs server-vlm --follow"))
def logs(
    component: Annotated[str | None, typer.Argument(help="Component; omit to list them.")] = None,
    stack: StackOpt = "local",
    lines: Annotated[int, typer.Option("--lines", "-n", help="Lines to show.", min=1)] = 50,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Follow the log.")] = False,
) -> None:
    """Show a component's log."""
    local = _local(stack)
    logs_dir = local.paths.logs
    available = sorted(p.stem for p in logs_dir.glob("*.log")) if logs_dir.is_dir() else []
    if component is None:
        console.print("\n".join(available) or "no logs yet")
        return
    path = local.paths.log(component)
    if not path.is_file():
        err.print(f"[red]no log for {component!r}; known: {', '.join(available) or 'none'}[/red]")
        raise typer.Exit(2)
    cmd = ["tail", f"-n{lines}"] + (["-F"] if follow else []) + [str(path)]
    raise typer.Exit(subprocess.call(cmd))


@app.command(epilog=epilog("splitstack demo", "splitstack demo --engine vllm --runtime podman",
                           exits="the gate's: 0 go, 1 no-go, 2 invalid run or the stack failed to start"))
def demo(
    stack: StackOpt = "local",
    engine: Annotated[Engine, typer.Option(
        help="sim: pipeline gate with 2 MinerU workers; vllm: chat gate.")] = Engine.sim,
    gate: Annotated[str | None, typer.Option(help="Gate file name in bench/gates (default per engine).")] = None,
    runtime: RuntimeOpt = None,
) -> None:
    """Up, a real request, Prometheus scraping it, the go/no-go gate and its report, down.

    Exits with the gate's code: 0 go, 1 no-go, 2 invalid run (or the stack failed to start).
    """
    local = _local(stack, engine, DEMO_WORKERS[engine], runtime)
    try:
        result = run_demo(local, console.print, gate, console=err)
    except (SetupError, StackError, ValueError, RuntimeError) as exc:
        err.print(f"[red]demo failed:[/red] {exc}")
        raise typer.Exit(2) from None
    bench_cli.print_gate_run(result.summary, result.gates, result.paths)
    raise typer.Exit(result.exit_code)


@spec_app.command("show", epilog=epilog("splitstack spec show --stack dev", "splitstack spec show --output json"))
def spec_show(stack: StackOpt = "local", output: OutputOpt = Output.text) -> None:
    """Print the resolved spec (defaults filled in) as JSON: highlighted on a terminal (text), or
    plain and never wrapped (json, for a pipe or jq)."""
    try:
        spec = load_stack(stack)
    except SpecError as exc:
        err.print(f"[red]{escape(str(exc))}[/red]")
        raise typer.Exit(2) from None
    if output is Output.json:
        typer.echo(spec.model_dump_json(indent=2))
    else:
        console.print_json(spec.model_dump_json())


@spec_app.command("validate", epilog=epilog("splitstack spec validate", "splitstack spec validate --stack dev",
                                                  "splitstack spec validate ./my-stack.yaml",
                                                  exits="0 every stack valid; 1 one is not (each problem named); "
                                                  "2 a stack or file that does not exist"))
def spec_validate(
    targets: Annotated[list[str] | None, typer.Argument(
        metavar="[STACK|FILE]...", help="Stack names or spec files (a path ending in .yaml/.yml); "
        "default: every Pulumi.<stack>.yaml here.")] = None,
    stack: Annotated[list[str] | None, typer.Option(
        "--stack", "-s", help="Stack name (repeatable); same as naming it as an argument.")] = None,
) -> None:
    """Validate stacks or spec files: the spec's own rules, then, for target kubernetes, whether
    it fits its cluster (contract/cluster_fit.py)."""
    failed = missing = False
    for name in [*(stack or []), *(targets or [])] or available_stacks():
        try:
            problems = check_cluster_fit(_load_target(name))
        except (FileNotFoundError, SpecError) as exc:
            missing = missing or isinstance(exc, FileNotFoundError)
            failed = failed or isinstance(exc, SpecError)
            err.print(str(exc), style="red", markup=False)
            continue
        if problems:
            failed = True
            err.print(str(ClusterFitError(name, problems)), style="red", markup=False)
        else:
            console.print(f"[green]ok[/green] {name}")
    if missing or failed:
        raise typer.Exit(2 if missing else 1)


def _load_target(name: str):
    """A stack name (Pulumi.<name>.yaml in the project) or the path of a spec file."""
    path = Path(name)
    known = ", ".join(available_stacks())
    if path.suffix not in (".yaml", ".yml") and "/" not in name:
        if not stack_file(name).is_file():
            raise FileNotFoundError(f"{name}: no stack of that name ({stack_file(name).name} is missing); "
                                    f"known stacks: {known}; or pass a spec file's path")
        return load_stack(name)
    if not path.is_file():
        raise FileNotFoundError(f"{name}: no such file; pass a spec file or a stack name ({known})")
    stem = path.name.removesuffix(path.suffix)
    return load_file(path, stem.removeprefix("Pulumi.") if stem.startswith("Pulumi.") else stem)


@spec_app.command("schema", epilog=epilog("splitstack spec schema --write"))
def spec_schema(
    write: Annotated[bool, typer.Option(help=f"Write {SCHEMA_PATH.name} instead of printing.")] = False,
) -> None:
    """Export the spec's JSON schema (committed as contract/spec.schema.json)."""
    text = render_schema()
    if write:
        SCHEMA_PATH.write_text(text)
        console.print(f"wrote {SCHEMA_PATH}")
    else:
        sys.stdout.write(text)


# Sub-commands owned by the other command lines (each also has its own console script).
app.add_typer(sim_cli.app, name="sim")
app.add_typer(slo_cli.app, name="slo")
app.add_typer(runbook_cli.app, name="runbook")
app.add_typer(infra_cli.app, name="infra")
app.add_typer(bench_cli.app, name="bench")
app.add_typer(images_cli.app, name="images")
app.add_typer(cluster_cli.app, name="cluster")
worker_cli.register(app)
worker_cli.register_dead_letters(app)


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
