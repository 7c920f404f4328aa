"""Capacity of a profile under a MinerU workload, on a virtual clock.

Used to calibrate profiles against published pages/s and tokens/s (a unit test checks every
profile with a ``reference``) and by users asking "how many pages/s does this profile give?".
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from .mineru import KIND_OF_BLOCK, detect_kind, layout_answer, plan_layout, recognition_pieces
from .profile import LatencyModel, Profile
from .scheduler import Scheduler, SimRequest, simulate
from .textgen import chat_prompt_tokens, split_pieces

LAYOUT_IMAGE_PX = (1036, 1036)  # MinerU resizes every page to this for layout detection
PAGE_PX = (1654, 2339)  # A4 at 200 DPI, MinerU's render resolution
SYSTEM_PROMPT = "You are a helpful assistant."


def image_tokens(width_px: int, height_px: int, latency: LatencyModel) -> int:
    p = latency.image_patch_px
    return min(latency.image_max_tokens, max(1, math.ceil(width_px / p)) * max(1, math.ceil(height_px / p)))


def mineru_prompt_tokens(kind: str, width_px: int, height_px: int, latency: LatencyModel) -> int:
    prompt = {"layout": "\nLayout Detection:", "text": "\nText Recognition:", "table": "\nTable Recognition:",
              "equation": "\nFormula Recognition:", "image": "\nImage Analysis:"}[kind]
    assert detect_kind(prompt) == kind
    return chat_prompt_tokens([SYSTEM_PROMPT, prompt]) + image_tokens(width_px, height_px, latency)


@dataclass
class Capacity:
    pages: int
    makespan_s: float
    pages_per_s: float
    output_tokens_per_s: float
    requests: int


def mineru_saturation(profile: Profile, pages: int = 200, seed: int = 0) -> Capacity:
    """All pages' requests offered at t=0 (the server saturated), one layout + one per block."""
    rng = random.Random(seed)
    reqs: list[SimRequest] = []
    for page in range(pages):
        blocks = plan_layout(rng, profile.mineru)
        lw, lh = LAYOUT_IMAGE_PX
        reqs.append(SimRequest(f"p{page}-layout", mineru_prompt_tokens("layout", lw, lh, profile.latency),
                               len(split_pieces(layout_answer(blocks))) + 1, 0.0, num_images=1))
        for i, b in enumerate(blocks):
            kind = KIND_OF_BLOCK.get(b.type, "text")
            w = max(1, (b.bbox[2] - b.bbox[0]) * PAGE_PX[0] // 1000)
            h = max(1, (b.bbox[3] - b.bbox[1]) * PAGE_PX[1] // 1000)
            out = len(recognition_pieces(kind, rng, profile.mineru)) + 1  # + <|im_end|>
            reqs.append(SimRequest(f"p{page}-b{i}", mineru_prompt_tokens(kind, w, h, profile.latency), out, 0.0,
                                   num_images=1))
    sched = Scheduler(profile.engine, profile.latency)
    end = simulate(sched, reqs)
    # Steady state: rates between the 10th and 90th percentile finish times, so the ramp-up and
    # the drain (a partly empty batch at the end) do not bias the capacity.
    done = sorted(reqs, key=lambda r: r.finished_s)
    lo, hi = len(done) // 10, len(done) * 9 // 10
    window = done[lo + 1:hi + 1]
    span = done[hi].finished_s - done[lo].finished_s
    tokens_per_s = sum(r.output_tokens for r in window) / span
    pages_per_s = tokens_per_s * pages / sum(r.output_tokens for r in reqs)  # at the mean tokens per page
    return Capacity(pages, end, pages_per_s, tokens_per_s, len(reqs))
