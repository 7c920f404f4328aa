import json
import os
import sys
import time
from pathlib import Path

import pypdfium2 as pdfium
import pytest

from worker.errors import PermanentError
from worker.fanout import plan_parts
from worker.jobs import PageRange
from worker.pdfcheck import check_range, extract_pages, inspect_pdf
from worker.store import DirectoryStore

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fixtures" / "pdfs"))
from pdf_fixtures import make_bad_pdfs, make_pdf  # noqa: E402


@pytest.fixture(scope="module")
def bad(tmp_path_factory) -> dict[str, Path]:
    return make_bad_pdfs(tmp_path_factory.mktemp("bad"))


@pytest.mark.parametrize("name,kind,text", [
    ("zero", "empty", "the file is empty (0 bytes)"),
    ("random", "not_pdf", "not a PDF (4096 bytes, no '%PDF-' header"),
    ("truncated", "corrupt", "PDFium cannot open the file"),
    ("encrypted", "encrypted", "encrypted with a password"),
    ("pages_2000", "too_many_pages", "2000 pages is over worker_pool.max_pages=1000"),
])
def test_bad_pdfs_are_permanent_failures_with_a_reason(bad, name, kind, text) -> None:
    with pytest.raises(PermanentError) as info:
        inspect_pdf(bad[name].read_bytes(), str(bad[name]), max_pages=1000)
    assert info.value.kind == kind
    assert text in info.value.reason and str(bad[name]) in info.value.reason


def test_page_ranges_extract_and_check(tmp_path) -> None:
    data = make_pdf(tmp_path / "a.pdf", 5).read_bytes()
    assert inspect_pdf(data, "a.pdf", 10) == 5
    part = extract_pages(data, PageRange(first=2, last=4))
    assert len(pdfium.PdfDocument(part)) == 3
    with pytest.raises(PermanentError, match="outside the document's 5 pages"):
        check_range(PageRange(first=4, last=6), 5, "a.pdf")


def test_plan_parts_covers_every_page_once() -> None:
    parts = plan_parts(100, 16)
    assert [p.count for p in parts] == [15] * 6 + [10]  # 7 parts (as with 16), evened out
    assert parts[0].first == 1 and parts[-1].last == 100


@pytest.mark.parametrize(("pages", "window", "workers", "counts"), [
    (100, 16, 2, [13] * 7 + [9]),  # 7 parts would leave a tail round: 8 even ones
    (100, 16, 4, [13] * 7 + [9]),
    (100, 16, 3, [12] * 8 + [4]),
    (30, 8, 2, [8, 8, 8, 6]),  # already a whole number of rounds
    (5, 16, 8, [1] * 5),  # never more parts than pages
])
def test_plan_parts_fills_whole_rounds_of_live_workers(pages, window, workers, counts) -> None:
    parts = plan_parts(pages, window, workers)
    assert [p.count for p in parts] == counts
    assert all(p.count <= window for p in parts)  # the memory bound holds
    assert [p.first for p in parts] == [1 + sum(counts[:i]) for i in range(len(counts))]
    assert parts[-1].last == pages


def test_store_commit_is_atomic_and_first_output_wins(tmp_path) -> None:
    store = DirectoryStore(tmp_path)
    s1 = store.staging("job-1")
    assert store.commit("job-1", s1, "# one", [{"type": "text"}], {"n": 1}) is True
    assert not s1.exists()
    s2 = store.staging("job-1")
    assert store.commit("job-1", s2, "# two", [], {"n": 2}) is False
    assert (store.final_dir("job-1") / "document.md").read_text() == "# one"
    assert store.read_metadata("job-1") == {"n": 1}
    assert json.loads((store.final_dir("job-1") / "content_list.json").read_text()) == [{"type": "text"}]
    assert not list(tmp_path.glob(".staging-*"))
    # What the fan-in merge and the readers use, as the object store has it too.
    assert store.read_file("job-1", "document.md") == b"# one"
    assert store.location("job-1") == str(tmp_path / "job-1")
    assert store.copy_images("job-1", tmp_path / "none") == 0


def test_sweep_removes_only_old_staging_dirs(tmp_path) -> None:
    store = DirectoryStore(tmp_path)
    old, young = store.staging("a"), store.staging("b")
    past = time.time() - 7200
    os.utime(old, (past, past))
    assert store.sweep_staging(older_than_s=3600, now=time.time()) == 1
    assert not old.exists() and young.exists()
