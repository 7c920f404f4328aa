"""Seeded PDFs for the pipeline workload when no folder of real documents is given.

reportlab (the worker extra) draws text, a table per page and a filled shape, so the MinerU
layout step finds several block types. Same seed, same bytes: baseline and candidate runs see
identical documents, which output-equivalence gates rely on."""

from __future__ import annotations

import random
from pathlib import Path

from contract.extras import require

WORDS = ("document page table figure queue stream batch token model layout block markdown "
         "pipeline worker inference server latency throughput retry breaker recovery").split()


def make_pdf(path: Path, pages: int, seed: int) -> Path:
    feature = "generating PDFs (or set documents.directory)"
    page_size = require("reportlab.lib.pagesizes", "worker", feature).A4
    canvas = require("reportlab.pdfgen.canvas", "worker", feature)
    rng = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    c = canvas.Canvas(str(path), pagesize=page_size, invariant=1)  # invariant: no timestamps, same bytes
    w, h = page_size
    for p in range(pages):
        c.setFont("Helvetica-Bold", 16)
        c.drawString(60, h - 70, f"Section {p + 1}: {' '.join(rng.choice(WORDS) for _ in range(4))}")
        c.setFont("Helvetica", 10)
        y = h - 100
        for _ in range(rng.randint(12, 24)):
            c.drawString(60, y, " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 14))))
            y -= 14
        for r in range(4):
            for col in range(3):
                c.rect(60 + col * 120, y - 30 - r * 18, 120, 18)
                cell = rng.choice(WORDS) if r else ("metric", "value", "unit")[col]
                c.drawString(64 + col * 120, y - 25 - r * 18, cell)
        c.setFillColorRGB(rng.random(), rng.random(), rng.random())
        c.rect(400, 80, 120, 90, fill=1)
        c.setFillColorRGB(0, 0, 0)
        c.showPage()
    c.save()
    return path


def count_pages(path: Path) -> int:
    """Pages of a PDF via pypdfium2 (a MinerU dependency) or pypdf, whichever is installed."""
    try:
        import pypdfium2

        return len(pypdfium2.PdfDocument(str(path)))
    except ImportError:
        from pypdf import PdfReader

        return len(PdfReader(str(path)).pages)
