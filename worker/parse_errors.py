"""Turn an exception raised while MinerU (or PDFium under it) parsed one document into that
document's permanent failure, naming the page and the library's own message.

Anything MinerU raises on a document other than our own failures (the inference client's
transient and answer errors, which pass through it unchanged) is about that document: the same
bytes fail the same way on every worker, so retrying or blaming the worker (``poison``) is wrong.
The page is read from the failing frames' own locals (``page_index`` of MinerU's per-page loop,
``start_page_id``/``end_page_id`` of its render window): MinerU offers no hook to learn it, and
patching it is what this worker avoids (see docs/worker.md).
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType

from worker.errors import PermanentError

MESSAGE_CHARS = 300
_RENDER_MODULES = ("pdf_image_tools", "pdf_reader", "pypdfium2")


def _frames(tb: TracebackType | None):
    while tb is not None:
        yield tb.tb_frame
        tb = tb.tb_next


def failing_pages(exc: BaseException) -> tuple[int, int] | None:
    """0-based (first, last) pages the failing code was working on, innermost frame first."""
    found: tuple[int, int] | None = None
    for frame in _frames(exc.__traceback__):
        if "mineru" not in frame.f_code.co_filename:
            continue
        local = frame.f_locals
        if isinstance(local.get("page_index"), int):
            found = (local["page_index"], local["page_index"])
        elif isinstance(local.get("start_page_id"), int) and isinstance(local.get("end_page_id"), int):
            found = (local["start_page_id"], local["end_page_id"])
    return found


def raised_in(exc: BaseException) -> str:
    """The innermost library function on the failing path, e.g. 'mineru.utils.cut_image.cut_image'."""
    last = ""
    for frame in _frames(exc.__traceback__):
        module = frame.f_globals.get("__name__", "")
        if module.startswith(("mineru", "pypdfium2", "PIL")):
            last = f"{module}.{frame.f_code.co_name}"
    return last


def is_render_failure(exc: BaseException) -> bool:
    return any(m in f.f_code.co_filename for f in _frames(exc.__traceback__) for m in _RENDER_MODULES) \
        or type(exc).__module__.startswith("pypdfium2")


def page_words(pages: tuple[int, int] | None, first_page_index: int) -> str:
    """'page 7' / 'pages 7-9' in the original document's 1-based numbering ('' if unknown)."""
    if pages is None:
        return ""
    first, last = pages[0] + first_page_index + 1, pages[1] + first_page_index + 1
    return f"page {first}" if first == last else f"pages {first}-{last}"


def document_failure(exc: Exception, source: str, first_page_index: int, library: str,
                     unrenderable: Callable[[int, int], list[int] | None] | None = None) -> PermanentError:
    """The permanent failure of the document ``source`` for an exception MinerU raised on it.

    MinerU renders pages in windows: a failure names the window, not the page. For a render
    failure, ``unrenderable(first, last)`` (worker/pdfcheck.py) renders each page of the window
    alone, and the reason names the pages that fail and the ones that render. The document
    is dead-lettered whole either way: a document with a page that cannot be parsed gets no
    partial output (the partial-failure policy of docs/worker.md)."""
    pages = failing_pages(exc)
    where = page_words(pages, first_page_index)
    message = " ".join(str(exc).split())[:MESSAGE_CHARS] or "(no message)"
    if isinstance(exc, TimeoutError) and is_render_failure(exc):
        kind, what = "render_timeout", "rendering took longer than MinerU's render timeout"
    elif is_render_failure(exc):
        kind, what = "render_failed", "PDFium could not render it"
        bad = unrenderable(*pages) if unrenderable is not None and pages is not None and pages[0] != pages[1] else None
        if bad:
            good = [i for i in range(pages[0], pages[1] + 1) if i not in bad]  # type: ignore[index]
            where = ", ".join(page_words((i, i), first_page_index) for i in bad)
            what = "PDFium could not render it" + (
                f" ({', '.join(page_words((i, i), first_page_index) for i in good)} of the same render "
                "window render)" if good else "")
    else:
        kind, what = "parse_failed", f"{library} failed on it"
    if message.endswith("(PDFium: Success)") or message == "Success":
        message = message.replace("(PDFium: Success)", "").strip() + " (PDFium gives no reason)"
    origin = raised_in(exc)
    return PermanentError(kind, f"{source}: {where or 'the document'}: {what}: "
                                f"{type(exc).__name__}: {message}" + (f" (in {origin})" if origin else ""))
