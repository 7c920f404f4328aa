"""`splitstack cluster up|down|status`: the local Kubernetes cluster (stack/cluster/).

Mount with ``app.add_typer(splitstack.cli.cluster.app, name="cluster")``.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from contract.extras import MissingExtra
from contract.spec_loader import SpecError, load_stack, project_root
from splitstack.cli.options import epilog
from stack.cluster.cluster import LocalCluster
from stack.cluster.nodes import ShapeError
from stack.component import SetupError

app = typer.Typer(help="The local Kubernetes cluster: etcd, API server, controller manager, scheduler "
                       "and kwok nodes shaped from a stack's spec, on loopback.", no_args_is_help=True)
console = Console()
err = Console(stderr=True)


def _fail(exc: Exception, code: int = 2) -> typer.Exit:
    err.print(f"[red]{exc}[/red]")
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
