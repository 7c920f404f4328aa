"""An exception MinerU raises on a document is that document's permanent failure, with the page."""

from __future__ import annotations

import pytest

from worker.parse_errors import document_failure


def raise_in(filename: str, module: str, source: str, **local) -> Exception:
    """An exception raised from code that looks, to a traceback, like ``module`` at ``filename``."""
    ns = {"__name__": module, **local}
    exec(compile(source, filename, "exec"), ns)  # noqa: S102 - builds the frames under test
    try:
        ns["run"]()
    except Exception as exc:  # noqa: BLE001
        return exc
    raise AssertionError("did not raise")


def test_a_page_level_parser_error_names_the_page_and_the_library_message() -> None:
    exc = raise_in("/venv/site-packages/mineru/backend/vlm/model_output_to_middle_json.py",
                   "mineru.backend.vlm.model_output_to_middle_json",
                   "def run():\n    for page_index in range(5):\n        if page_index == 2:\n"
                   "            txt = None\n            txt[:]\n")
    failure = document_failure(exc, "/in/a.pdf", first_page_index=10, library="MinerU 3.4.5")
    assert failure.kind == "parse_failed"
    assert str(failure) == ("/in/a.pdf: page 13: MinerU 3.4.5 failed on it: TypeError: 'NoneType' "
                            "object is not subscriptable (in mineru.backend.vlm.model_output_to_middle_json.run)")


@pytest.mark.parametrize("error,kind", [("ValueError('bad bitmap')", "render_failed"),
                                        ("TimeoutError('render took 300 s')", "render_timeout")])
def test_render_failures_name_the_page_window(error, kind) -> None:
    exc = raise_in("/venv/site-packages/mineru/utils/pdf_image_tools.py", "mineru.utils.pdf_image_tools",
                   f"def run():\n    start_page_id, end_page_id = 16, 31\n    raise {error}\n")
    failure = document_failure(exc, "/in/b.pdf", first_page_index=0, library="MinerU 3.4.5")
    assert failure.kind == kind and "/in/b.pdf: pages 17-32: " in str(failure)


def test_without_a_page_it_names_the_document() -> None:
    failure = document_failure(KeyError("x"), "/in/c.pdf", 0, "MinerU 3.4.5")
    assert str(failure) == "/in/c.pdf: the document: MinerU 3.4.5 failed on it: KeyError: 'x'"


def test_a_render_failure_names_the_pages_that_fail_not_the_whole_window(tmp_path) -> None:
    """Pages 1-2 render, page 3 has no area (0 x 0 pt, as boundingBox_invalid.pdf): MinerU's
    window 1-3 fails, the reason names page 3 and says pages 1-2 render."""
    import io
    import sys
    from pathlib import Path

    import pypdfium2 as pdfium

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fixtures" / "pdfs"))
    from pdf_fixtures import make_pdf

    from worker.pdfcheck import unrenderable_pages

    path = make_pdf(tmp_path / "a.pdf", 3, tables=False, images=False)
    doc = pdfium.PdfDocument(str(path))
    doc[2].set_mediabox(0, 0, 0, 0)
    buf = io.BytesIO()
    doc.save(buf)
    doc.close()
    data = buf.getvalue()
    assert unrenderable_pages(data, 0, 2) == [2]
    exc = raise_in("/venv/site-packages/mineru/utils/pdf_image_tools.py", "mineru.utils.pdf_image_tools",
                   "def run():\n    start_page_id, end_page_id = 0, 2\n    raise ValueError('bad bitmap')\n")
    failure = document_failure(exc, "/in/b.pdf", 0, "MinerU 3.4.5", lambda a, b: unrenderable_pages(data, a, b))
    assert failure.kind == "render_failed"
    assert str(failure).startswith("/in/b.pdf: page 3: PDFium could not render it (page 1, page 2 of the "
                                   "same render window render): ValueError: bad bitmap"), str(failure)


def test_an_unsupported_filter_is_named_and_a_meaningless_pdfium_text_is_not_shown() -> None:
    from worker.errors import PermanentError
    from worker.pdfcheck import inspect_pdf, unsupported_filters

    brotli = (b"%PDF-2.0\n1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\nendobj\n"
              b"2 0 obj\n<< /Length 5 /Filter [/BrotliDecode /FlateDecode] >>\nstream\nxxxxx\nendstream\nendobj\n"
              b"trailer\n<< /Root 1 0 R >>\n%%EOF\n")
    assert unsupported_filters(brotli) == ["BrotliDecode"]
    with pytest.raises(PermanentError) as err:
        inspect_pdf(brotli, "/in/brotli.pdf", 100)
    assert err.value.kind == "unsupported_filter" and "/BrotliDecode" in err.value.reason
    with pytest.raises(PermanentError) as err:
        inspect_pdf(b"%PDF-1.7\n" + b"\x00" * 64, "/in/junk.pdf", 100)
    assert err.value.kind == "corrupt" and "Success" not in err.value.reason
