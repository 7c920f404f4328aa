"""Real MinerU 3.x (Python API, VLM HTTP-client backend) parses PDFs against the simulator.

Every page yields the blocks the simulator planned for it, and MinerU sends
exactly 1 + (planned blocks) requests per page.
"""

from __future__ import annotations

import io
from collections import Counter

import httpx
import pytest

from simulator.mineru import KIND_OF_BLOCK

from .servers import API_KEY, sim_server

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
mineru_vlm = pytest.importorskip("mineru.backend.vlm.vlm_analyze", reason="needs the worker extra (mineru 3.x)")


def make_pdf(pages: int) -> bytes:
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    buf = io.BytesIO()
    c = canvas.Canvas(buf, pagesize=A4)
    for page in range(pages):
        c.setFont("Helvetica-Bold", 16)
        c.drawString(72, 780, f"Section {page + 1}")
        c.setFont("Helvetica", 10)
        for i in range(40):
            c.drawString(72, 750 - i * 15, f"Page {page + 1}, line {i}: the quick brown fox jumps over the lazy dog.")
        c.showPage()
    c.save()
    return buf.getvalue()


def parse(pdf: bytes, server_url: str, out_dir, monkeypatch):
    from mineru.data.data_reader_writer import FileBasedDataWriter

    monkeypatch.setenv("MINERU_VL_API_KEY", API_KEY)  # sent as the Bearer token
    return mineru_vlm.doc_analyze(pdf, FileBasedDataWriter(str(out_dir)), backend="http-client",
                                  server_url=server_url)


def boxes(blocks) -> list[tuple[str, tuple[int, ...]]]:
    # MinerU retypes an image block as "chart" when the Image Analysis answer classifies it so
    return [("image" if b.type == "chart" else b.type, tuple(round(v * 1000) for v in b.bbox)) for b in blocks]


@pytest.mark.parametrize("pages, profile", [(3, "instant"), (6, "mineru25-h200")])
def test_mineru_parses_every_page_into_the_planned_blocks(pages, profile, tmp_path, monkeypatch):
    with sim_server("--seed", "5", "--profile", profile) as server:
        middle, results = parse(make_pdf(pages), server.url, tmp_path, monkeypatch)
        plans = httpx.get(f"{server.url}/sim/plans", headers={"Authorization": f"Bearer {API_KEY}"}).json()

    layouts = plans["layouts"]
    assert len(layouts) == pages and len(results) == pages and len(middle["pdf_info"]) == pages
    planned = [tuple((b["type"], tuple(b["bbox"])) for b in p["blocks"]) for p in layouts]
    # every page's MinerU blocks are exactly one of the planned layouts (pages run concurrently,
    # so plans are matched by content, not by order)
    got = [tuple(boxes(page)) for page in results]
    assert Counter(got) == Counter(planned)
    # each recognition answer reached MinerU's output
    assert all(b.content for page in results for b in page)

    kinds = plans["requests_by_kind"]
    total_blocks = sum(len(p["blocks"]) for p in layouts)
    assert kinds.get("layout") == pages
    assert sum(n for k, n in kinds.items() if k != "layout") == total_blocks  # requests = pages x (1 + blocks)
    expected = Counter(KIND_OF_BLOCK.get(b["type"], "text") for p in layouts for b in p["blocks"])
    assert {k: n for k, n in kinds.items() if k != "layout"} == dict(expected)
