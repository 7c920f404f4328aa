"""MinerU answer formats, checked with mineru-vl-utils' own parsers when installed."""

from __future__ import annotations

import random
import re

import pytest

from simulator.mineru import (
    BOTTOM,
    KIND_OF_BLOCK,
    TOP,
    detect_kind,
    layout_answer,
    plan_layout,
    recognition_pieces,
    request_rng,
)
from simulator.profile import load_profile

WORKLOAD = load_profile("mineru25-h200").mineru


def test_prompt_kinds_are_detected_from_mineru_prompts():
    assert detect_kind("\nLayout Detection:") == "layout"
    assert detect_kind("\nText Recognition:") == "text"
    assert detect_kind("\nTable Recognition:") == "table"
    assert detect_kind("\nFormula Recognition:") == "equation"
    assert detect_kind("\nImage Analysis:") == "image"
    assert detect_kind("Tell me a joke") is None


@pytest.mark.parametrize("seed", range(20))
def test_layout_boxes_are_valid_and_do_not_overlap(seed):
    blocks = plan_layout(random.Random(seed), WORKLOAD)
    assert 1 <= len(blocks) <= 50
    prev_bottom = TOP
    for b in blocks:
        x1, y1, x2, y2 = b.bbox
        assert 0 <= x1 < x2 <= 1000 and 0 <= y1 < y2 <= 1000
        assert y1 >= prev_bottom and y2 <= BOTTOM
        prev_bottom = y2
        assert b.type in WORKLOAD.block_type_weights
    answer = layout_answer(blocks)
    assert len(answer.split("\n")) == len(blocks)
    line = re.compile(r"^<\|box_start\|>\d{3} \d{3} \d{3} \d{3}<\|box_end\|><\|ref_start\|>\w+<\|ref_end\|>"
                      r"<\|rotate_up\|>$")
    assert all(line.match(x) for x in answer.split("\n"))


def test_same_image_same_plan_any_order():
    a = plan_layout(request_rng(1, "layout", b"page-1"), WORKLOAD)
    plan_layout(request_rng(1, "layout", b"page-2"), WORKLOAD)
    assert plan_layout(request_rng(1, "layout", b"page-1"), WORKLOAD) == a
    assert plan_layout(request_rng(2, "layout", b"page-1"), WORKLOAD) != a


@pytest.mark.parametrize("seed", range(10))
def test_mineru_parses_the_layout_into_the_planned_blocks(seed):
    mc = pytest.importorskip("mineru_vl_utils.mineru_client")
    helper = mc.MinerUClientHelper(
        backend="http-client", prompts=mc.DEFAULT_PROMPTS, sampling_params=mc.DEFAULT_SAMPLING_PARAMS,
        layout_image_size=(1036, 1036), min_image_edge=28, max_image_edge_ratio=50, simple_post_process=False,
        handle_equation_block=True, abandon_list=False, abandon_paratext=False, image_analysis=True, debug=False)
    blocks = plan_layout(random.Random(seed), WORKLOAD)
    parsed = helper.parse_layout_output(layout_answer(blocks))
    assert [p.type for p in parsed] == [b.type for b in blocks]
    assert [[round(v * 1000) for v in p.bbox] for p in parsed] == [list(b.bbox) for b in blocks]
    from PIL import Image
    page = Image.new("RGB", (1654, 2339), "white")
    _, prompts, _, indices = helper.prepare_for_extract(page, parsed)
    assert len(prompts) == len(blocks)  # one recognition request per planned block
    assert [detect_kind(p) for p in prompts] == [KIND_OF_BLOCK.get(b.type, "text") for b in blocks]


def test_table_answers_are_otsl():
    text = "".join(recognition_pieces("table", random.Random(1), WORKLOAD))
    rows = text.split("<nl>")
    assert rows[-1] == "" and len(rows) >= 2
    cells = {r.count("<fcel>") for r in rows[:-1]}
    assert len(cells) == 1 and cells.pop() >= 2


def test_image_analysis_answers_parse_with_mineru():
    post = pytest.importorskip("mineru_vl_utils.post_process.image_analysis_postprocess")
    for seed in range(6):
        text = "".join(recognition_pieces("image", random.Random(seed), WORKLOAD))
        values = post.process_image_or_chart(text)
        assert values["class"] in ("chart", "natural_image") and values["caption"] and values["content"]


def test_formula_and_text_answers():
    formula = "".join(recognition_pieces("equation", random.Random(2), WORKLOAD))
    assert "$" not in formula and formula.count("{") == formula.count("}")
    text = "".join(recognition_pieces("text", random.Random(2), WORKLOAD))
    assert text[0].isupper() and "<|" not in text


def test_output_lengths_follow_the_profile_distribution():
    lengths = [len(recognition_pieces("text", random.Random(s), WORKLOAD)) for s in range(400)]
    mean = sum(lengths) / len(lengths)
    assert WORKLOAD.output_tokens["text"].mean * 0.8 < mean < WORKLOAD.output_tokens["text"].mean * 1.2
