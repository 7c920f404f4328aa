"""`splitstack images build|push|check`: the stack's images, built and pushed with podman.

Mount with ``app.add_typer(splitstack.cli.images.app, name="images")``; the work is in
stack/images.py.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from contract.spec import Spec
from contract.spec_loader import SpecError, load_stack, project_root
from splitstack.cli.options import epilog
from splitstack.cli.terminal import SafeConsole
from stack.component import SetupError
from stack.images import BaseKind, Built, ImageName, build_images
from stack.podman import PodmanError
from stack.registry import check_images, push_images

app = typer.Typer(help="Container images (images/*/Containerfile), built with podman.", no_args_is_help=True)
console = SafeConsole()
err = SafeConsole(stderr=True)


def _check_base(value: str, option: str) -> None:
    if value in (BaseKind.public.value, BaseKind.debootstrap.value) or "/" in value or ":" in value:
        return
    err.print(f"[red]{option} {escape(repr(value))}: expected 'public', 'debootstrap' or an image reference such as "
              "registry.example.com/python:3.11-slim-bookworm[/red]")
    raise typer.Exit(2)


@app.command("build", epilog=epilog("splitstack images build",
                                    "splitstack images build --base debootstrap --only worker",
                                    exits="0 built; 1 a build failed; 2 bad input"))
def build(
    stack: Annotated[str, typer.Option("--stack", "-s", help="Stack whose spec names the images and tags.")] = "local",
    base: Annotated[str, typer.Option(help="Base of the worker and simulator images: 'public' "
                                           "(python:3.11-slim-bookworm), 'debootstrap' (Debian's Python "
                                           "3.11, no registry needed) or an image reference.")] = "public",
    only: Annotated[list[ImageName] | None, typer.Option(help="Build only these images (repeatable).")] = None,
    vllm_base: Annotated[str | None, typer.Option(
        help="Base of the inference-server image (default: vllm/vllm-openai at the spec's image_tag), "
             "e.g. a registry mirror of it.")] = None,
) -> None:
    """Build the images; exit 1 when a build failed or nothing could be built, 2 on bad input.

    With --base debootstrap the inference-server image is skipped (its base comes from a registry),
    which is said, not an error."""
    _check_base(base, "--base")
    if vllm_base is not None:
        _check_base(vllm_base, "--vllm-base")
    try:
        spec = load_stack(stack)
    except SpecError as exc:
        err.print(f"[red]{escape(str(exc))}[/red]")
        raise typer.Exit(2) from None
    try:
        report = build_images(spec, project_root(), base=base, only=only or (), vllm_base=vllm_base,
                              progress=lambda line: console.print(f"[cyan]images[/cyan] {line}"))
    except (SetupError, PodmanError) as exc:
        err.print(f"[red]images build failed:[/red] {exc}")
        raise typer.Exit(1) from None
    for item in report.images:
        if isinstance(item, Built):
            console.print(f"[green]built[/green] {item.name}: {item.ref}, {item.size_bytes / 1e6:.0f} MB, "
                          f"in {item.seconds:.1f} s, on {item.base}", soft_wrap=True)
        else:
            console.print(f"[yellow]skipped[/yellow] {item.name}: {item.ref}: {item.reason}", soft_wrap=True)
    if not any(isinstance(item, Built) for item in report.images):
        raise typer.Exit(1)


TlsVerify = Annotated[bool, typer.Option("--tls-verify/--no-tls-verify",
                                         help="HTTPS with certificate checks (--no-tls-verify: plain "
                                              "HTTP, for a registry on loopback).")]


def _stack(stack: str) -> Spec:
    try:
        return load_stack(stack)
    except SpecError as exc:
        err.print(f"[red]{escape(str(exc))}[/red]")
        raise typer.Exit(2) from None


@app.command("push", epilog=epilog("splitstack images push",
                                   "splitstack images push --stack dev",
                                   exits="0 pushed, digests recorded; 1 a push failed; 2 bad input"))
def push(
    stack: Annotated[str, typer.Option("--stack", "-s", help="Stack whose images.registry receives them.")] = "dev",
    tls_verify: TlsVerify = True,
) -> None:
    """Push every image the stack runs to images.registry (podman), and record each digest in
    images/lock/<stack>.json: the rendered objects then name the images by digest."""
    spec = _stack(stack)
    try:
        pushed, lock = push_images(spec, project_root(), tls_verify=tls_verify,
                                   progress=lambda line: console.print(f"[cyan]images[/cyan] {line}"))
    except ValueError as exc:
        err.print(f"[red]{escape(str(exc))}[/red]")
        raise typer.Exit(2) from None
    except (SetupError, PodmanError) as exc:
        err.print(f"[red]images push failed:[/red] {exc}")
        raise typer.Exit(1) from None
    for p in pushed:
        console.print(f"[green]pushed[/green] {p.image.source} -> {p.target} {p.digest} ({p.image.who})",
                      soft_wrap=True)
    console.print(f"digests recorded in {lock.relative_to(project_root())}")


@app.command("check", epilog=epilog("splitstack images check",
                                    "splitstack images check --stack dev",
                                    exits="0 the registry holds every image as pushed; 2 it does not, or bad input"))
def check(
    stack: Annotated[str, typer.Option("--stack", "-s", help="Stack whose images to look up.")] = "dev",
    tls_verify: TlsVerify = True,
) -> None:
    """Ask images.registry for every image the stack runs, by tag, and compare its digest with the
    recorded one: a missing tag or another image under it is refused before `pulumi up`."""
    spec = _stack(stack)
    if spec.images.registry is None:
        console.print(f"stack {stack!r} sets no images.registry: its objects name the spec's repositories by tag")
        return
    problems = check_images(spec, tls_verify=tls_verify)
    for line in problems:
        err.print(f"[red]{escape(line)}[/red]", soft_wrap=True)
    if problems:
        raise typer.Exit(2)
    console.print(f"{spec.images.registry} holds every image of stack {stack!r} as pushed")
