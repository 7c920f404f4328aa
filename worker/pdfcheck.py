"""Look at a PDF before any request is sent: the permanent failures (worker/errors.py) are found here,
cheaply, so a bad file is dead-lettered with a reason a person can act on."""

from __future__ import annotations

import io
import threading

import pypdfium2 as pdfium

from worker.errors import PermanentError
from worker.jobs import PageRange

# PDFium is not thread-safe; MinerU guards its own calls with a lock of its own, ours is separate
# because we only touch documents in the worker's event-loop thread or under this lock.
_PDFIUM_LOCK = threading.RLock()


def inspect_pdf(data: bytes, source: str, max_pages: int, limit_field: str = "worker_pool.max_pages") -> int:
    """The page count of a readable PDF, else :class:`PermanentError` naming what is wrong.

    Reasons name the file, its size and what is wrong, never its bytes: a file that is not a
    PDF may be anything (a key, a password file), and reasons end up in the dead-letter stream,
    the job record and the logs."""
    if len(data) == 0:
        raise PermanentError("empty", f"{source}: the file is empty (0 bytes); upload the PDF again")
    if b"%PDF-" not in data[:1024]:
        raise PermanentError(
            "not_pdf", f"{source}: not a PDF ({len(data)} bytes, no '%PDF-' header in the first "
            "1 KiB); only PDF files can be parsed"
        )
    with _PDFIUM_LOCK:
        try:
            doc = pdfium.PdfDocument(data)
        except pdfium.PdfiumError as exc:
            text = str(exc)
            if "password" in text.lower():
                raise PermanentError(
                    "encrypted", f"{source}: the PDF is encrypted with a password ({text}); "
                    "submit a decrypted copy"
                ) from None
            raise PermanentError("corrupt", f"{source}: PDFium cannot open the file ({text})") from None
        try:
            pages = len(doc)
        finally:
            doc.close()
    if pages == 0:
        raise PermanentError("no_pages", f"{source}: the PDF has no pages")
    if pages > max_pages:
        raise PermanentError(
            "too_many_pages", f"{source}: {pages} pages is over {limit_field}={max_pages}; "
            f"split the file or raise {limit_field}"
        )
    return pages


def check_range(pages: PageRange, page_count: int, source: str) -> None:
    if pages.last > page_count:
        raise PermanentError(
            "bad_page_range", f"{source}: page range {pages.first}-{pages.last} is outside the "
            f"document's {page_count} pages"
        )


def extract_pages(data: bytes, pages: PageRange) -> bytes:
    """A new PDF holding only ``pages`` (1-based, inclusive)."""
    with _PDFIUM_LOCK:
        src = pdfium.PdfDocument(data)
        out = pdfium.PdfDocument.new()
        try:
            out.import_pages(src, pages=list(range(pages.first - 1, pages.last)))
            buf = io.BytesIO()
            out.save(buf)
            return buf.getvalue()
        finally:
            out.close()
            src.close()
