"""What `splitstack submit` checks before it reads the spec or queues anything
(worker/jobs_view.py check_files): files that exist, a page range within each document."""

from __future__ import annotations

from pathlib import Path

import pytest

from worker.jobs import PageRange
from worker.jobs_view import InputRefused, PagesPastEnd, any_dead_lettered, check_files
from worker.pagecount import page_count

THREE_PAGES = (b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\nendobj\n"
               b"2 0 obj\n<< /Type /Pages /Kids [3 0 R 4 0 R 5 0 R] /Count 3 >>\nendobj\n"
               b"3 0 obj\n<< /Type /Page /Parent 2 0 R >>\nendobj\n%%EOF\n")


def test_every_missing_file_is_named(tmp_path: Path) -> None:
    pdf = tmp_path / "a.pdf"
    pdf.write_bytes(THREE_PAGES)
    with pytest.raises(InputRefused, match=f"not a file: {tmp_path}/x.pdf, {tmp_path}/y.pdf$"):
        check_files([pdf, tmp_path / "x.pdf", tmp_path / "y.pdf"], PageRange(first=1, last=9))


def test_a_range_past_the_end_names_the_document_and_the_range_it_has(tmp_path: Path) -> None:
    pdf = tmp_path / "a.pdf"
    pdf.write_bytes(THREE_PAGES)
    with pytest.raises(PagesPastEnd) as err:
        check_files([pdf], PageRange(first=2, last=7))
    assert str(err.value) == f"{pdf} has 3 pages; give a range within 1-3"
    assert (err.value.path, err.value.count) == (pdf, 3)
    check_files([pdf], PageRange(first=2, last=3))
    check_files([pdf])


def test_a_document_whose_pages_cannot_be_counted_is_left_to_the_worker(tmp_path: Path) -> None:
    other = tmp_path / "not-really.pdf"
    other.write_bytes(b"not a pdf")
    assert page_count(other) is None
    # the same range is refused for a document whose pages are counted ...
    pdf = tmp_path / "a.pdf"
    pdf.write_bytes(THREE_PAGES)
    with pytest.raises(PagesPastEnd):
        check_files([pdf], PageRange(first=1, last=500))
    # ... and passed on for this one: the worker dead-letters it as bad_page_range
    assert check_files([other], PageRange(first=1, last=500)) is None


def test_a_dead_letter_among_the_final_records_is_a_failure() -> None:
    assert any_dead_lettered([{"state": "done"}, {"state": "dead_lettered"}])
    assert not any_dead_lettered([{"state": "done"}])
