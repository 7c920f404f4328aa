"""The worker end to end: real Redis, real MinerU (in-process, HTTP client), the simulator."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
from pdf_fixtures import make_bad_pdfs, make_corpus, make_pdf

from testsupport.worker import metric_value
from worker.store import CONTENT_LIST, MARKDOWN, METADATA

pytestmark = pytest.mark.integration


def _check_output(h, job_id: str, pages: int | None = None) -> dict:
    folder = h.outputs / job_id
    meta = json.loads((folder / METADATA).read_text())
    content = json.loads((folder / CONTENT_LIST).read_text())
    markdown = (folder / MARKDOWN).read_text()
    assert markdown.strip() and content, job_id
    assert meta["job_id"] == job_id and meta["requests_sent"] > 0
    if pages is not None:
        assert meta["pages"] == pages
    page_idx = [c["page_idx"] for c in content]
    assert page_idx == sorted(page_idx)
    return meta


def test_fifty_pdfs_through_two_workers(make_harness, tmp_path: Path) -> None:
    h = make_harness(**{"worker_pool.jobs_per_worker": 2})
    h.start_redis()
    h.start_sim()
    workers = [h.start_worker(), h.start_worker()]
    pdfs = make_corpus(tmp_path / "pdfs", 50, max_pages=3)
    import pypdfium2 as pdfium
    pages = {str(p.resolve()): len(pdfium.PdfDocument(p)) for p in pdfs}
    ids = h.submit(pdfs, correlation_id="batch-50")
    rows = h.wait_terminal(ids, 240)
    assert {r["state"] for r in rows.values()} == {"done"}
    requests = 0
    for job_id, row in rows.items():
        meta = _check_output(h, job_id, pages[row["source"]])
        assert meta["correlation_id"] == "batch-50" and meta["mineru_version"].startswith("3.")
        requests += meta["requests_sent"]
    texts = [h.metrics(w) for w in workers]
    processed = [metric_value(t, "mineru_pdfs_processed_total") for t in texts]
    assert sum(processed) == 50 and all(p > 0 for p in processed)  # both workers took jobs
    assert sum(metric_value(t, "mineru_pdf_processing_duration_seconds_count") for t in texts) == 50
    assert sum(metric_value(t, "mineru_vllm_client_requests_total") for t in texts) == requests
    assert sum(metric_value(t, "mineru_pdfs_failed_total") for t in texts) == 0
    assert h.dead_letters() == []


def test_bad_pdfs_are_dead_lettered_and_the_worker_keeps_serving(make_harness, tmp_path: Path) -> None:
    # 2,000 pages: over the longest document this test allows (a split document may be long,
    # worker_pool.max_document_pages; 2,000 pages would be processed in parts by default).
    h = make_harness(**{"worker_pool.max_document_pages": 1500})
    h.start_redis()
    h.start_sim()
    w = h.start_worker()
    bad = make_bad_pdfs(tmp_path / "bad")
    ids = h.submit(list(bad.values()))
    good = h.submit([make_pdf(tmp_path / "good.pdf", 2)])
    rows = h.wait_terminal(ids + good, 120)
    assert rows[good[0]]["state"] == "done"
    kinds = {Path(rows[i]["source"]).name: rows[i].get("kind") for i in ids}
    assert kinds == {"truncated.pdf": "corrupt", "zero.pdf": "empty", "encrypted.pdf": "encrypted",
                     "random.pdf": "not_pdf", "pages-2000.pdf": "too_many_pages"}
    dead = {d["job_id"]: d for d in h.dead_letters()}
    assert set(dead) == set(ids)
    for job_id in ids:
        assert dead[job_id]["reason"] == rows[job_id]["reason"] and rows[job_id]["source"] in dead[job_id]["reason"]
        assert json.loads(dead[job_id]["job"])["job_id"] == job_id  # the original job rides along
    assert "worker_pool.max_document_pages=1500" in next(
        rows[i]["reason"] for i in ids if rows[i].get("kind") == "too_many_pages")
    text = h.metrics(w)
    assert metric_value(text, "mineru_pdfs_failed_total") == 5
    assert metric_value(text, "mineru_pdfs_failed_total", {"kind": "encrypted"}) == 1
    assert metric_value(text, "mineru_pdfs_processed_total") == 1
    assert w.alive()


def test_big_document_fans_out_and_merges_in_page_order(make_harness, tmp_path: Path) -> None:
    # 30 pages is over max_pages: a split document is bounded per part, not as a whole.
    h = make_harness(**{"worker_pool.split_pages_over": 10, "worker_pool.page_window": 8,
                        "worker_pool.max_pages": 20})
    h.start_redis()
    h.start_sim()
    workers = [h.start_worker(), h.start_worker()]
    job_id, = h.submit([make_pdf(tmp_path / "big.pdf", 30, tables=False, images=False)])
    row = h.wait_terminal([job_id], 180)[job_id]
    assert row["state"] == "done" and row["parts_total"] == "4" and row["parts_done"] == "4"
    meta = _check_output(h, job_id, 30)
    assert meta["parts"] == 4
    content = json.loads((h.outputs / job_id / CONTENT_LIST).read_text())
    assert {c["page_idx"] for c in content} == set(range(30))
    # The simulator's text is synthetic, so order is checked against the parts' own outputs.
    md = (h.outputs / job_id / MARKDOWN).read_text()
    part_md = [(h.outputs / f"{job_id}.p{i:04d}" / MARKDOWN).read_text().strip() for i in range(4)]
    positions = [md.index(p[:200]) for p in part_md]
    assert positions == sorted(positions)
    texts = [h.metrics(w) for w in workers]
    assert sum(metric_value(t, "mineru_pdfs_processed_total") for t in texts) == 1  # the document, not its parts
    assert sum(metric_value(t, "mineru_pages_processed_total") for t in texts) == 30  # its pages, once


def test_page_vlm_backend_one_request_per_page(make_harness, tmp_path: Path) -> None:
    h = make_harness(**{"worker_pool.backend": "page-vlm", "worker_pool.page_window": 2})
    h.start_redis()
    h.start_sim()
    w = h.start_worker()
    ids = h.submit([make_pdf(tmp_path / "a.pdf", 3), make_pdf(tmp_path / "b.pdf", 2, seed=3)])
    rows = h.wait_terminal(ids, 90)
    assert {r["state"] for r in rows.values()} == {"done"}
    metas = [_check_output(h, i) for i in ids]
    assert sorted(m["requests_sent"] for m in metas) == [2, 3]
    assert all(m["backend"] == "page-vlm" for m in metas)
    assert metric_value(h.metrics(w), "mineru_pdfs_processed_total", {"backend": "page-vlm"}) == 2


def test_transient_errors_are_retried_not_dead_lettered(make_harness, tmp_path: Path) -> None:
    h = make_harness()
    h.start_redis()
    h.start_sim("--fault", "error_rate=0.2", "--fault", "retry_after_s=0")
    w = h.start_worker()
    ids = h.submit(make_corpus(tmp_path / "pdfs", 4, max_pages=2))
    rows = h.wait_terminal(ids, 120)
    assert {r["state"] for r in rows.values()} == {"done"}
    text = h.metrics(w)
    assert metric_value(text, "mineru_vllm_client_retries_total") > 0
    assert metric_value(text, "mineru_vllm_client_failures_total", {"kind": "http_5xx"}) > 0
    assert h.dead_letters() == []


def test_health_endpoints_and_readiness_follow_the_server(make_harness) -> None:
    h = make_harness()
    h.start_redis()
    sim = h.start_sim()
    w = h.start_worker()
    base = f"http://127.0.0.1:{w.port}"
    assert httpx.get(f"{base}/healthz").status_code == 200
    ready = httpx.get(f"{base}/readyz").json()
    assert ready["ready"] and ready["server"] and ready["mineru_loaded"]
    sim.stop()
    deadline = time.monotonic() + 10
    while httpx.get(f"{base}/readyz").status_code != 503:
        assert time.monotonic() < deadline, "readyz stayed 200 with the server down"
        time.sleep(0.2)
    body = httpx.get(f"{base}/readyz").json()
    assert "/v1/models failed" in body["detail"]
    assert httpx.get(f"{base}/healthz").status_code == 200  # alive, just not ready
