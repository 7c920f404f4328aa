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
