"""A PDF's page count read from its bytes without a PDF library (the command line's host need not
have PDFium): the ``/Count`` of the page tree's root, the ``/Type /Pages`` node without a ``/Parent``.

Best effort: a PDF whose page tree sits in compressed object streams gives None, and the worker
then checks the range itself (``bad_page_range`` dead letter, worker/pdfcheck.py)."""

from __future__ import annotations

import re
from pathlib import Path

# A /Type /Pages dictionary with its /Count, in either order, within one dictionary's text.
_PAGES = re.compile(rb"<<(?:(?!<<|>>).)*?/Type\s*/Pages\b(?:(?!<<|>>).)*?>>", re.S)
_COUNT = re.compile(rb"/Count\s+(\d+)")


def page_count(path: Path, max_bytes: int = 200 * 1024 * 1024) -> int | None:
    """Pages of the PDF at ``path``, or None when they cannot be read this way."""
    try:
        with path.open("rb") as f:
            data = f.read(max_bytes)
    except OSError:
        return None
    if not data.startswith(b"%PDF-"):
        return None
    roots = [node.group(0) for node in _PAGES.finditer(data) if b"/Parent" not in node.group(0)]
    counts = {int(m.group(1)) for node in roots for m in _COUNT.finditer(node)}
    return counts.pop() if len(counts) == 1 else None  # none, or revisions that disagree: not this way
