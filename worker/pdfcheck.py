"""Look at a PDF before any request is sent: the permanent failures (worker/errors.py) are found here,
cheaply, so a bad file is dead-lettered with a reason a person can act on."""

from __future__ import annotations

import io
import re
import threading

import pypdfium2 as pdfium

from worker.errors import PermanentError
from worker.jobs import PageRange

# PDFium is not thread-safe; MinerU guards its own calls with a lock of its own, ours is separate
# because we only touch documents in the worker's event-loop thread or under this lock.
_PDFIUM_LOCK = threading.RLock()
# The stream filters PDFium decodes (PDF 2.0, 7.4, with their abbreviations); any other name in a
# /Filter is one PDFium cannot read (e.g. /BrotliDecode of a newer PDF dialect).
SUPPORTED_FILTERS = frozenset({
    "ASCIIHexDecode", "AHx", "ASCII85Decode", "A85", "LZWDecode", "LZW", "FlateDecode", "Fl",
    "RunLengthDecode", "RL", "CCITTFaxDecode", "CCF", "JBIG2Decode", "DCTDecode", "DCT",
    "JPXDecode", "Crypt"})
_FILTER = re.compile(rb"/Filter\s*(\[[^\]]{0,400}\]|/[A-Za-z0-9]+)")
_NAME = re.compile(rb"/([A-Za-z0-9]+)")
# PDFium's last error when it has none to give: its text explains nothing.
_MEANINGLESS = ("success", "unknown error")


def unsupported_filters(data: bytes) -> list[str]:
    """Stream filters named in the file that PDFium cannot decode (from the uncompressed
    dictionaries; a filter hidden in a compressed object stream is not seen)."""
    found: set[str] = set()
    for m in _FILTER.finditer(data):
        found.update(n.decode("ascii") for n in _NAME.findall(m.group(1)))
    # Stream filters end in "Decode"; other /Filter names are security or signature handlers
    # (/Standard, /Adobe.PPKLite).
    return sorted(f for f in found - SUPPORTED_FILTERS if f.endswith("Decode"))


def pdfium_words(exc: Exception) -> str:
    """PDFium's error text, when it says something: '' for 'Success' (its last-error code
    when the failure was not one it records)."""
    text = str(exc)
    inner = text[text.find("(PDFium:"):] if "(PDFium:" in text else text
    return "" if any(w in inner.lower() for w in _MEANINGLESS) else text


def unrenderable_pages(data: bytes, first: int, last: int) -> list[int] | None:
    """The 0-based pages in ``first``..``last`` that cannot be rendered alone: a page whose
    media or crop box has no area (0 x 0 pt), or one a small PDFium render of fails; None
    when the document does not open."""
    with _PDFIUM_LOCK:
        try:
            doc = pdfium.PdfDocument(data)
        except pdfium.PdfiumError:
            return None
        bad = []
        try:
            for i in range(max(0, first), min(last, len(doc) - 1) + 1):
                try:
                    page = doc[i]
                    try:
                        width, height = page.get_size()
                        # PDFium renders a page whose box has no area at a default size; the
                        # parser above it sizes the page from the box, and fails there.
                        boxes = (page.get_mediabox(), page.get_cropbox())
                        if width < 1 or height < 1 or any(r - x < 1 or t - y < 1 for x, y, r, t in boxes):
                            bad.append(i)
                            continue
                        page.render(scale=min(1.0, 64 / max(width, height))).close()
                    finally:
                        page.close()
                except (pdfium.PdfiumError, ValueError, OSError, RuntimeError):
                    bad.append(i)
        finally:
            doc.close()
        return bad


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
    unsupported = unsupported_filters(data)
    if unsupported:  # PDFium would fail to open it ("Success"), or render its pages without that content
        raise PermanentError(
            "unsupported_filter", f"{source}: compressed with {', '.join('/' + f for f in unsupported)}, "
            "a stream filter PDFium cannot decode; save it again as PDF 1.7 (Flate compression)")
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
            said = pdfium_words(exc)
            raise PermanentError("corrupt", f"{source}: PDFium cannot open the file"
                                 + (f" ({said})" if said else " (it gives no reason: the file is damaged or "
                                    "not a PDF it knows)")) from None
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
