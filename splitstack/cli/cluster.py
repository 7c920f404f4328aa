"""`splitstack cluster up|down|status`: the local Kubernetes cluster (stack/cluster/).

Mount with ``app.add_typer(splitstack.cli.cluster.app, name="cluster")``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.markup import escape
from rich.table import Table

from contract.extras import MissingExtra, require
from contract.spec_loader import SpecError, load_stack, project_root
from splitstack.cli.options import epilog
from splitstack.cli.terminal import SafeConsole
from stack.cluster.cluster import LocalCluster
from stack.cluster.nodes import ShapeError
from stack.cluster.tools import go_tools
from stack.component import SetupError

app = typer.Typer(help="The local Kubernetes cluster: etcd, API server, controller manager, scheduler "
                       "and kwok nodes shaped from a stack's spec, on loopback.", no_args_is_help=True)
console = SafeConsole()
err = SafeConsole(stderr=True)


def _fail(exc: Exception, code: int = 2) -> typer.Exit:
    err.print(f"[red]{escape(str(exc))}[/red]")
    return typer.Exit(code)


@app.command("up", epilog=epilog("splitstack cluster up --shape dev",
                                 "splitstack cluster up --shape prod --timeout-s 300",
                                 exits="0 up and every node Ready; 1 a component failed; 2 bad input"))
def up(
    shape: Annotated[str, typer.Option(
        "--shape", help="Stack whose node pools the nodes copy (machine type, GPUs, labels, taints, "
                        "the CPU pool the program would create): dev, prod or any stack on eks/gke/aks.")] = "dev",
    timeout_s: Annotated[float, typer.Option("--timeout-s", min=1, help="Longest wait for health.")] = 180,
) -> None:
    """Start a fresh cluster (an empty etcd) and create the nodes of --shape."""
    try:
        spec = load_stack(shape)
    except SpecError as exc:
        raise _fail(exc) from None
    cluster = LocalCluster(project_root(), log=lambda line: console.print(f"[cyan]cluster[/cyan] {line}"))
    try:
        cluster.up(spec, timeout_s=timeout_s)
    except (ShapeError, MissingExtra) as exc:
        raise _fail(exc) from None
    except SetupError as exc:
        raise _fail(exc, 1) from None
    _print(cluster)
    console.print(f"export KUBECONFIG={cluster.kubeconfig}")


@app.command("down", epilog=epilog("splitstack cluster down", exits="0 stopped (or was not running)"))
def down() -> None:
    """Stop every process of the cluster."""
    stopped = LocalCluster(project_root()).down()
    console.print(f"stopped: {', '.join(stopped) or 'nothing was running'}")


@app.command("status", epilog=epilog("splitstack cluster status", exits="0 running and healthy; 1 not"))
def status() -> None:
    """Each component's health and each node's readiness and allocatable."""
    cluster = LocalCluster(project_root())
    try:
        healthy = _print(cluster)
    except SetupError as exc:
        raise _fail(exc, 1) from None
    raise typer.Exit(0 if healthy else 1)


def _print(cluster: LocalCluster) -> bool:
    st = cluster.status()
    if not st.running:
        console.print("the local cluster is not running (`splitstack cluster up`)")
        return False
    table = Table("component", "healthy", "detail")
    for name, (ok, detail) in st.components.items():
        table.add_row(name, "yes" if ok else "[red]no[/red]", detail)
    console.print(table)
    nodes = Table("node", "ready", "cpu", "memory", "nvidia.com/gpu", "pods")
    for name, ready, alloc in st.nodes:
        nodes.add_row(name, "yes" if ready else "[red]no[/red]", alloc.get("cpu", ""),
                      alloc.get("memory", ""), alloc.get("nvidia.com/gpu", "-"), alloc.get("pods", ""))
    console.print(nodes)
    console.print(f"API server {st.server}; kubeconfig {st.kubeconfig}")
    return all(ok for ok, _ in st.components.values()) and all(r for _, r, _ in st.nodes)


PulumiAction = Literal["preview", "up", "refresh", "destroy"]


@app.command("pulumi", epilog=epilog("splitstack cluster pulumi preview --stack localk8s",
                                     "splitstack cluster pulumi up --stack localk8s",
                                     exits="0 the engine succeeded; 1 it failed; 2 bad input or no cluster"))
def pulumi_cmd(
    action: Annotated[PulumiAction, typer.Argument(help="preview, up, refresh or destroy.")],
    stack: Annotated[str, typer.Option("--stack", "-s", help="Stack to deploy to the local cluster.")] = "localk8s",
    work_dir: Annotated[Path | None, typer.Option(
        help="Where the stack's state, plugin cache and copy of its Pulumi.<stack>.yaml live "
             "(default .state/pulumi/<stack>; edit the copy there for day-2 changes).")] = None,
) -> None:
    """The real Pulumi engine (the CLI and provider of `make tools`) on a stack, against the local
    cluster: the program runs inline (docs/cluster.md says why)."""
    root = project_root()
    cluster = LocalCluster(root)
    if not cluster.supervisor.running():
        raise _fail(RuntimeError("the local cluster is not running: `splitstack cluster up --shape dev` first"))
    try:
        # The infra extra (pulumi) is needed here only: `splitstack` itself runs without it.
        automation = require("infra.automation", "infra", "running the Pulumi engine")
        command_error = require("pulumi.automation", "infra", "running the Pulumi engine").CommandError
        load_stack(stack)
        session = automation.PulumiSession(stack, root, work_dir or root / ".state" / "pulumi" / stack,
                                go_tools(root), cluster.kubeconfig)
        session.prepare()
        handle = session.stack_handle()
    except (SpecError, SetupError, MissingExtra) as exc:
        raise _fail(exc) from None
    console.print(f"[cyan]pulumi[/cyan] {action} --stack {stack} (work dir {session.work_dir})")
    run = {"preview": handle.preview, "up": handle.up, "refresh": handle.refresh, "destroy": handle.destroy}[action]
    try:
        run(on_output=lambda line: console.print(line, markup=False, highlight=False), color="never")
    except command_error:
        err.print(f"[red]pulumi {action} failed; its output is above[/red]")
        raise typer.Exit(1) from None
