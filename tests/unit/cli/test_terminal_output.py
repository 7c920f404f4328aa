"""Output a terminal can trust: a name holding escape sequences is shown escaped, never sent."""

from __future__ import annotations

import importlib
import io
import pkgutil

from rich.console import Console
from typer.testing import CliRunner

import splitstack.cli
from splitstack.cli import worker as worker_cli
from splitstack.cli.terminal import SafeConsole, printable

EVIL = "/data/x\x1b[2J\x1b[31mred\x9b0m\u202etxt.pdf"


def test_control_characters_and_bidi_overrides_are_shown_escaped() -> None:
    assert printable(EVIL) == "/data/x\\x1b[2J\\x1b[31mred\\x9b0m\\u202etxt.pdf"
    assert printable("a\tb\nc é 文") == "a\tb\nc é 文"


def test_the_jobs_table_on_a_terminal_carries_no_escape_of_a_name(monkeypatch) -> None:
    buf = io.StringIO()
    monkeypatch.setattr(worker_cli, "console", SafeConsole(file=buf, force_terminal=True, width=200))
    worker_cli._table([{"job_id": "j1", "state": "done", "source": EVIL, "output": f"/out/{EVIL}"},
                       {"job_id": "j2", "state": "dead_lettered", "reason": f"{EVIL}: not a PDF"}])
    shown = buf.getvalue()
    assert "\x1b[2J" not in shown and "\x9b" not in shown and "\u202e" not in shown
    assert shown.count("\\x1b[2J") == 3
    assert "\x1b[" in shown  # the table's own styles still reach the terminal


def test_a_plain_line_with_a_name_is_escaped() -> None:
    import typer

    app = typer.Typer()

    @app.command()
    def show() -> None:
        from splitstack.cli.terminal import echo
        echo(f"job-1\t{EVIL}")

    out = CliRunner().invoke(app, []).output
    assert "\x1b" not in out and "job-1\t/data/x\\x1b[2J" in out


def test_every_console_of_the_command_lines_escapes() -> None:
    consoles = {}
    for info in pkgutil.iter_modules(splitstack.cli.__path__):
        module = importlib.import_module(f"splitstack.cli.{info.name}")
        consoles |= {f"splitstack.cli.{info.name}.{name}": value for name, value in vars(module).items()
                     if isinstance(value, Console)}
    assert {"splitstack.cli.main.console", "splitstack.cli.worker.err"} <= set(consoles)  # the walk finds them
    plain = [name for name, value in consoles.items() if not isinstance(value, SafeConsole)]
    assert plain == [], f"plain Consoles: {plain}"
