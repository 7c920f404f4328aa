"""Options that mean the same thing in every command line, declared once, and the help text
every command ends with (examples, exit codes).

One grammar (docs/cli.md lists it):
- ``--stack/-s NAME``: the stack (its spec is Pulumi.<NAME>.yaml; a local stack's state too).
- ``--url URL``: a server that is not a stack's; ``--prometheus-url URL``: a Prometheus.
- ``--spec-override KEY=VALUE``: read the spec with this field changed (as the local stack was
  started with); ``--set KEY=VALUE``: the change an action makes. Both repeatable.
- ``--output text|json``: what is printed; ``--out PATH``: the file or folder written.
- A bare number of seconds is a flag ending in ``-s`` (``--duration-s``, ``--timeout-s``); a
  Prometheus window takes its unit in the value (``--window 30d``).
- ``--apply``: act (without it, only the plan is printed).
"""


from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from enum import Enum
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Annotated

import typer


class Output(str, Enum):
    text = "text"
    json = "json"


Stack = Annotated[str, typer.Option("--stack", "-s", help="Stack name: its spec is Pulumi.<stack>.yaml.")]
OptionalStack = Annotated[str | None, typer.Option(
    "--stack", "-s", help="Stack name: its spec is Pulumi.<stack>.yaml (default local, unless --url).")]
Apply = Annotated[bool, typer.Option("--apply", help="Act; without it only the plan is printed.")]
SpecOverride = Annotated[list[str] | None, typer.Option(
    "--spec-override", help="KEY=VALUE dotted spec override, as the local stack was started with "
    "(e.g. queue.port=16400); repeatable.")]
PrometheusUrl = Annotated[str | None, typer.Option(
    "--prometheus-url", help="Prometheus base URL; default for a local stack: its own.")]
KubeContext = Annotated[str | None, typer.Option(
    "--kube-context", help="kubeconfig context (default: the current one).")]
AuditLog = Annotated[Path | None, typer.Option(
    "--audit-log", help="Audit JSONL; default: <state_dir>/audit.jsonl (local) or "
    "~/.local/state/splitstack/audit-<stack>.jsonl.")]
OutputOpt = Annotated[Output, typer.Option("--output", help="text or json.")]
# The target of every command that sends load (bench run, gate, sweep, locust run|master|worker):
# a stack by --stack, or any OpenAI-compatible server by --url with these beside it.
TargetUrl = Annotated[str | None, typer.Option(
    "--url", help="Any OpenAI-compatible server's base URL (without /v1), instead of a stack's server.")]
TargetModel = Annotated[str | None, typer.Option(
    "--model", help="Served model name (with --url; a stack's comes from its spec).")]
ApiKeyEnv = Annotated[str | None, typer.Option(
    "--api-key-env", metavar="VAR", help="Environment variable holding the server's API key (with --url; a "
    "stack's key comes from its state).")]
Tokenizer = Annotated[str | None, typer.Option(
    "--tokenizer", help="Hugging Face tokenizer directory (or a name in the local cache; overrides the scenario's). "
    "With /tokenize on the server: a client-side cross-check of its counts (a warning only). Without: what "
    "counts the prompts, and the outputs of answers without usage.")]

# Exit codes most commands share; a command with other codes states its own.
EXIT_DONE = "0 done; 2 bad input (the message names the input and the fix; nothing was changed)"


def epilog(*examples: str, exits: str = EXIT_DONE) -> str:
    """The end of a command's help: its examples and its exit codes.

    Typer's help joins single newlines, so each example is its own paragraph.
    """
    lines = [f"Example: {e}" for e in examples]
    return "\n\n".join([*lines, f"Exit codes: {exits}."])


def installed_version() -> str:
    try:
        return package_version("splitstack")
    except PackageNotFoundError:  # a checkout run with PYTHONPATH, never installed
        return "0+unknown (not installed; run `make setup`)"


def version_callback(prog: str) -> Callable[[bool], None]:
    """A ``--version`` option's callback: prints ``PROG VERSION`` and exits 0."""

    def show(value: bool) -> None:
        if value:
            typer.echo(f"{prog} {installed_version()}")
            raise typer.Exit(0)

    return show


def add_version(app: typer.Typer, prog: str, help_text: str, extra: Iterable[str] = ()) -> None:
    """Give ``app`` a root callback with ``--version`` (its help becomes the app's)."""

    @app.callback(help=help_text, epilog="\n\n".join(extra) or None)
    def root(version: Annotated[bool, typer.Option(
            "--version", is_eager=True, callback=version_callback(prog),
            help="Print the version and exit.")] = False) -> None:
        del version

# every long-running bench command (run, gate, sweep, locust run): see bench/progress.py
ProgressEvery = Annotated[float | None, typer.Option(
    "--progress-every-s", metavar="SECONDS", min=0, help="Without a terminal (CI, pipes): one progress line every "
    "SECONDS (default: $BENCH_PROGRESS_EVERY, else 10; 0: none). On a terminal: a live line with the ETA.")]


@contextmanager
def writing(flag: str, path: Path | str) -> Iterator[None]:
    """Exit 2 with the flag, the path and the reason when what a command writes there cannot be
    written (a folder that cannot exist such as /proc/x, no permission, a full disk)."""
    try:
        yield
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename and str(exc.filename) != str(path) else ""
        typer.echo(f"error: {flag} {path}: cannot write there{where}: {exc.strerror or exc}; "
                   f"pass a path in a folder you can write", err=True)
        raise typer.Exit(2) from None


def reading(flag: str, path: Path | str) -> str:
    """The text of the file a flag names, or exit 2 saying what is wrong with it."""
    p = Path(path)
    try:
        return p.read_text(errors="replace")
    except IsADirectoryError:
        reason = "is a folder, not a file"
    except FileNotFoundError:
        reason = "no such file"
    except (OSError, UnicodeDecodeError) as exc:
        reason = f"cannot read it ({getattr(exc, 'strerror', None) or exc})"
    typer.echo(f"error: {flag} {path}: {reason}", err=True)
    raise typer.Exit(2)


def check_http_url(flag: str, url: str) -> str:
    """``url`` if it is an http(s) URL with a host, else exit 2 naming ``flag``."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        typer.echo(f"error: {flag} {url!r}: not a URL ({exc}); give it like http://HOST:9090", err=True)
        raise typer.Exit(2) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        typer.echo(f"error: {flag} {url!r}: not an http(s) URL; give it like http://HOST:9090", err=True)
        raise typer.Exit(2)
    del port
    return url
