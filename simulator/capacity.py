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


def _finished_s(req: SimRequest) -> float:
    """When a request the scheduler has run to completion finished."""
    if req.finished_s is None:
        raise RuntimeError(f"request {req.rid} has not finished")
    return req.finished_s


def _ttft_s(req: SimRequest) -> float:
    """Time to first token of a request the scheduler has run to completion."""
    if req.first_token_s is None:
        raise RuntimeError(f"request {req.rid} has no first token")
    return req.first_token_s - req.arrival_s


@dataclass
class Capacity:
    pages: int
    makespan_s: float
    pages_per_s: float
    output_tokens_per_s: float
    requests: int


def page_requests(rng: random.Random, profile: Profile, page: int, t: float) -> tuple[SimRequest, list[SimRequest]]:
    """One page's layout request and the block requests MinerU sends once the layout is back."""
    blocks = plan_layout(rng, profile.mineru)
    lw, lh = LAYOUT_IMAGE_PX
    layout = SimRequest(f"p{page}-layout", mineru_prompt_tokens("layout", lw, lh, profile.latency),
                        len(split_pieces(layout_answer(blocks))) + 1, t, num_images=1)
    reqs = []
    for i, b in enumerate(blocks):
        kind = KIND_OF_BLOCK.get(b.type, "text")
        w = max(1, (b.bbox[2] - b.bbox[0]) * PAGE_PX[0] // 1000)
        h = max(1, (b.bbox[3] - b.bbox[1]) * PAGE_PX[1] // 1000)
        out = len(recognition_pieces(kind, rng, profile.mineru)) + 1  # + <|im_end|>
        reqs.append(SimRequest(f"p{page}-b{i}", mineru_prompt_tokens(kind, w, h, profile.latency), out, t,
                               num_images=1))
    return layout, reqs


def mineru_saturation(profile: Profile, pages: int = 200, seed: int = 0) -> Capacity:
    """All pages' requests offered at t=0 (the server saturated), one layout + one per block."""
    rng = random.Random(seed)
    reqs: list[SimRequest] = []
    for page in range(pages):
        layout, blocks = page_requests(rng, profile, page, 0.0)
        reqs += [layout, *blocks]
    sched = Scheduler(profile.engine, profile.latency)
    end = simulate(sched, reqs)
    # Steady state: rates between the 10th and 90th percentile finish times, so the ramp-up and
    # the drain (a partly empty batch at the end) do not bias the capacity.
    done = sorted(reqs, key=_finished_s)
    lo, hi = len(done) // 10, len(done) * 9 // 10
    window = done[lo + 1:hi + 1]
    span = _finished_s(done[hi]) - _finished_s(done[lo])
    tokens_per_s = sum(r.output_tokens for r in window) / span
    pages_per_s = tokens_per_s * pages / sum(r.output_tokens for r in reqs)  # at the mean tokens per page
    return Capacity(pages, end, pages_per_s, tokens_per_s, len(reqs))


@dataclass
class Rehearsal:
    offered_pages_per_s: float
    achieved_pages_per_s: float
    page_latency_p50_s: float
    page_latency_p95_s: float
    ttft_p95_s: float
    max_waiting: int
    output_tokens_per_s: float  # the server's throughput while pages keep arriving


def mineru_open_loop(profile: Profile, pages_per_s: float, pages: int = 300, seed: int = 0) -> Rehearsal:
    """Pages arrive as a Poisson process; each sends its layout request, then (when the layout is
    back) its block requests, as MinerU does. Answers "what happens at N pages/s on this GPU?"."""
    rng = random.Random(seed)
    t, arrivals = 0.0, []
    for page in range(pages):
        t += rng.expovariate(pages_per_s)
        layout, blocks = page_requests(rng, profile, page, t)
        layout.handle = (page, blocks)
        arrivals.append(layout)
    sched = Scheduler(profile.engine, profile.latency)
    remaining: dict[int, int] = {}
    started = {layout.handle[0]: layout.arrival_s for layout in arrivals}
    finished: dict[int, float] = {}
    all_reqs: list[SimRequest] = []
    now, i, max_waiting = 0.0, 0, 0
    while i < len(arrivals) or not sched.idle:
        while i < len(arrivals) and arrivals[i].arrival_s <= now:
            sched.add(arrivals[i], arrivals[i].arrival_s)
            i += 1
        if sched.idle:
            now = arrivals[i].arrival_s
            continue
        max_waiting = max(max_waiting, len(sched.waiting))
        result = sched.step(now)
        now = result.end_s
        for req in result.finished:
            all_reqs.append(req)
            if isinstance(req.handle, tuple):  # a layout: its blocks go out now
                page, blocks = req.handle
                remaining[page] = len(blocks)
                for b in blocks:
                    b.arrival_s = now
                    b.handle = page
                    sched.add(b, now)
            else:
                remaining[req.handle] -= 1
                if remaining[req.handle] == 0:
                    finished[req.handle] = now
    latencies = sorted(finished[p] - started[p] for p in finished)
    ttfts = sorted(_ttft_s(r) for r in all_reqs)
    # service rate while pages keep arriving (the drain after the last arrival is not load)
    first, last = min(started.values()), max(started.values())
    done_in_window = sum(1 for p in finished.values() if p <= last)

    def pct(values: list[float], q: float) -> float:
        return values[min(len(values) - 1, int(q * len(values)))]

    tokens = sum(r.output_tokens for r in all_reqs if first <= _finished_s(r) <= last)
    return Rehearsal(pages_per_s, done_in_window / (last - first), pct(latencies, 0.5), pct(latencies, 0.95),
                     pct(ttfts, 0.95), max_waiting, tokens / (last - first))
