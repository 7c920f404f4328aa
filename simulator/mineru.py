"""MinerU's VLM protocol: recognise its prompts and answer in the formats MinerU parses.

Formats follow ``mineru_vl_utils`` 1.2.x (``mineru_client.py`` layout regex, OTSL tables,
``post_process/image_analysis_postprocess.py`` image tags). Every answer is drawn from an RNG
seeded by (simulator seed, prompt kind, image bytes), so the same page gets the same layout in
any request order, and a test can predict what MinerU will see.

Layouts are planned so that MinerU sends exactly one recognition request per planned block:
blocks do not overlap (no block is absorbed by a table or image container), no container types
(list, image_block, equation_block) are used, and every image block is larger than MinerU's
image-analysis minimum.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

from .profile import MineruWorkload
from .textgen import WORDS, filler_pieces, split_pieces

PROMPT_KINDS = {
    "Layout Detection:": "layout",
    "Text Recognition:": "text",
    "Table Recognition:": "table",
    "Formula Recognition:": "equation",
    "Image Analysis:": "image",
}
# Block type -> the recognition prompt kind MinerU sends for it (default: text).
KIND_OF_BLOCK = {"table": "table", "equation": "equation", "image": "image", "chart": "image"}
# Reading order: page furniture first/last like real pages.
_TOP_TYPES = ("header",)
_BOTTOM_TYPES = ("footer", "page_number", "page_footnote")
_TALL_TYPES = {"table": 4, "image": 4, "chart": 4, "equation": 1.5}  # relative slot height

TOP, BOTTOM, LEFT, RIGHT = 40, 960, 80, 920  # page margins in MinerU's 0-1000 box space


@dataclass(frozen=True)
class PlannedBlock:
    type: str
    bbox: tuple[int, int, int, int]

    def to_json(self) -> dict:
        return {"type": self.type, "bbox": list(self.bbox)}


def detect_kind(prompt_text: str) -> str | None:
    text = prompt_text.strip()
    for suffix, kind in PROMPT_KINDS.items():
        if text.endswith(suffix):
            return kind
    return None


def request_rng(seed: int, kind: str, image_bytes: bytes) -> random.Random:
    digest = hashlib.blake2b(image_bytes, digest_size=16, person=kind.encode()[:16]).digest()
    return random.Random(seed ^ int.from_bytes(digest, "big"))


def plan_layout(rng: random.Random, workload: MineruWorkload) -> list[PlannedBlock]:
    n = max(1, round(workload.blocks_per_page.sample(rng)))
    names = list(workload.block_type_weights)
    types = rng.choices(names, weights=[workload.block_type_weights[t] for t in names], k=n)
    types.sort(key=lambda t: 0 if t in _TOP_TYPES else (2 if t in _BOTTOM_TYPES else 1))
    units = [_TALL_TYPES.get(t, 1.0) for t in types]
    unit_px = (BOTTOM - TOP) / sum(units)
    blocks: list[PlannedBlock] = []
    y = float(TOP)
    for t, u in zip(types, units):
        height = unit_px * u
        gap = min(4.0, height / 4)
        y1, y2 = int(y + gap), int(y + height - gap)
        y2 = max(y2, y1 + 1)
        x1, x2 = (LEFT, RIGHT) if t not in ("page_number",) else (460, 540)
        blocks.append(PlannedBlock(t, (x1, y1, x2, y2)))
        y += height
    return blocks


def layout_answer(blocks: list[PlannedBlock]) -> str:
    return "\n".join(
        f"<|box_start|>{b.bbox[0]:03d} {b.bbox[1]:03d} {b.bbox[2]:03d} {b.bbox[3]:03d}<|box_end|>"
        f"<|ref_start|>{b.type}<|ref_end|><|rotate_up|>"
        for b in blocks
    )


def _table(rng: random.Random, target: int) -> list[str]:
    cols = rng.randint(2, 6)
    rows = max(1, target // (2 * cols + 1))
    pieces: list[str] = []
    for r in range(rows):
        for _ in range(cols):
            pieces += ["<fcel>", rng.choice(WORDS) if r == 0 else str(rng.randint(0, 9))]
        pieces.append("<nl>")
    return pieces


_TERMS = (r"x^{2}", r"\frac{a}{b}", r"\sqrt{y}", r"\alpha_{i}", r"\sum_{k=1}^{n} k", r"e^{-t}", r"\beta", r"2 \pi r")


def _formula(rng: random.Random, target: int) -> str:
    out = rng.choice(_TERMS)
    while len(split_pieces(out)) < target:
        out += rng.choice((" + ", " - ", " = ")) + rng.choice(_TERMS)
    return out


def _image(rng: random.Random, target: int) -> str:
    caption = "".join(filler_pieces(rng, max(3, target // 4)))
    if rng.random() < 0.5:
        head = "<|class_start|>chart<|class_end|><|sub_class_start|>bar_chart<|sub_class_end|>"
        rows = "\n".join(f"| {rng.choice(WORDS)} | {rng.randint(1, 99)} |" for _ in range(max(1, target // 12)))
        content = f"| label | value |\n| --- | --- |\n{rows}"
    else:
        head = "<|class_start|>natural_image<|class_end|><|sub_class_start|>photo<|sub_class_end|>"
        content = "".join(filler_pieces(rng, max(3, target // 2)))
    return f"{head}<|caption_start|>{caption}<|caption_end|><|content_start|>{content}<|content_end|>"


def recognition_pieces(kind: str, rng: random.Random, workload: MineruWorkload) -> list[str]:
    """Answer pieces (one per output token) for a Text/Table/Formula/Image prompt."""
    dist = workload.output_tokens.get(kind) or workload.output_tokens["text"]
    target = max(1, round(dist.sample(rng)))
    if kind == "table":
        return _table(rng, target)
    if kind == "equation":
        return split_pieces(_formula(rng, target))
    if kind == "image":
        return split_pieces(_image(rng, target))
    return filler_pieces(rng, target)
