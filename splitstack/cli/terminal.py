"""Output a terminal can trust: every text our commands print passes through here.

Names and reasons come from outside (a PDF's file name, a job record in Redis, a dead letter, a
log line): a name holding ``ESC [2J`` would clear the screen of whoever lists the jobs, a
``ESC ]8;;`` a hidden link. :func:`printable` shows each control character as an escape
(``\\x1b``, ``\\u202e``) instead of sending it; rich's own colours and cursor moves are not
text, so :class:`SafeConsole` escapes the text of what it renders and nothing else. Every
console of the command lines is a SafeConsole, and plain lines go through :func:`echo`.
JSON output needs nothing: ``json.dumps`` escapes control characters already.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from typing import Any

import typer
from rich.console import Console
from rich.segment import Segment

_KEEP = {"\n", "\t"}
# Format characters that reorder or hide text (bidi overrides and isolates, zero-width joiners
# are harmless and kept): a name must read as it is.
_BIDI = {chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C)}


def _escape(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every control character (C0 but newline and tab, DEL, C1) and every bidi
    override written as a visible escape."""
    if text.isprintable():
        return text
    return "".join(
        _escape(ch) if ch not in _KEEP and (unicodedata.category(ch) == "Cc" or ch in _BIDI) else ch
        for ch in text)


class SafeConsole(Console):
    """A rich Console whose rendered text has its control characters escaped (the styles and
    control segments rich adds itself are untouched)."""

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return super()._render_buffer(
            seg if seg.control else Segment(printable(seg.text), seg.style, seg.control) for seg in buffer)


def echo(message: Any = "", err: bool = False, nl: bool = True) -> None:
    """``typer.echo`` of a plain line, its control characters escaped."""
    typer.echo(printable(str(message)), err=err, nl=nl)
