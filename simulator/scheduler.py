"""A continuous-batching scheduler in the style of vLLM V1, with no I/O and no clock of its own.

``Scheduler.step(now_s)`` plans one engine step at simulated time ``now_s`` and returns how long
it takes and which requests got a token. The caller owns time: the asyncio runner sleeps for
real, ``simulate`` jumps a virtual clock (unit tests, capacity estimates), so the same model is
exercised in both.

Model (the parts that shape latency under load):
- one step serves every running request: one decode token each, or a chunk of its prefill,
  within ``max_num_batched_tokens``; the first token is sampled in the step that ends prefill;
- waiting requests are admitted FCFS while ``max_num_seqs`` and free KV blocks allow;
- when a running request needs a KV block and none is free, the most recently admitted running
  request is preempted (its blocks freed; it recomputes prompt + generated tokens later);
- step time = base + per decoding seq + per prefill token + per image started (``LatencyModel``).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from .profile import EngineLimits, LatencyModel


@dataclass(eq=False)
class SimRequest:
    rid: str
    prompt_tokens: int  # includes image tokens
    output_tokens: int  # planned length; the request finishes after this many tokens
    arrival_s: float
    num_images: int = 0
    max_tokens_param: int | None = None
    finish_reason: str = "stop"
    # progress
    computed_tokens: int = 0  # KV computed for the current (re)prefill
    prefill_target: int = 0  # tokens to prefill this time (prompt, or prompt + generated after preemption)
    generated: int = 0
    blocks: int = 0
    num_preemptions: int = 0
    images_charged: bool = False
    # timeline (simulated seconds); None until it happens
    queued_s: float = 0.0  # last time it entered the waiting queue
    queue_time_s: float = 0.0  # accumulated time waiting
    first_scheduled_s: float | None = None
    prefill_done_s: float | None = None
    first_token_s: float | None = None
    last_token_s: float | None = None
    finished_s: float | None = None
    token_times_s: list[float] = field(default_factory=list)  # only filled when record_tokens is on
    handle: Any = None  # the server's per-request stream state; the scheduler never touches it

    @property
    def in_prefill(self) -> bool:
        return self.computed_tokens < self.prefill_target

    @property
    def done(self) -> bool:
        return self.finished_s is not None


@dataclass
class StepResult:
    duration_s: float
    end_s: float
    emitted: list[SimRequest]  # got one token at end_s
    finished: list[SimRequest]  # subset of emitted that is complete
    preempted: list[SimRequest]
    num_tokens: int  # prefill + decode tokens of the step (vllm:iteration_tokens_total)
    itl_s: dict[float, int]  # inter-token latency -> number of tokens with it (bulk metric updates)


class Scheduler:
    def __init__(self, limits: EngineLimits, latency: LatencyModel, kv_capacity_factor: float = 1.0,
                 record_tokens: bool = False) -> None:
        self.limits = limits
        self.latency = latency
        self.kv_capacity_factor = kv_capacity_factor
        self.record_tokens = record_tokens
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.used_blocks = 0
        self.num_preemptions = 0

    # -- capacity -------------------------------------------------------------------------
    @property
    def total_blocks(self) -> int:
        # vLLM refuses to start unless one max_model_len sequence fits, so even an injected
        # KV-exhaustion fault keeps that much (otherwise a long request could never run).
        tokens = max(self.limits.kv_cache_tokens * self.kv_capacity_factor, self.limits.max_model_len)
        return max(1, int(tokens // self.limits.block_size_tokens))

    @property
    def free_blocks(self) -> int:
        return self.total_blocks - self.used_blocks

    @property
    def kv_usage(self) -> float:
        return min(1.0, self.used_blocks / self.total_blocks)

    def _blocks_for(self, tokens: int) -> int:
        return math.ceil(tokens / self.limits.block_size_tokens)

    # -- requests -------------------------------------------------------------------------
    def add(self, req: SimRequest, now_s: float) -> None:
        if req.prompt_tokens < 1 or req.output_tokens < 1:
            raise ValueError(f"request {req.rid!r}: prompt_tokens and output_tokens must be >= 1 "
                             f"(got {req.prompt_tokens}, {req.output_tokens})")
        req.prefill_target = req.prompt_tokens
        req.queued_s = now_s
        self.waiting.append(req)

    def abort(self, req: SimRequest) -> None:
        """Client went away: free its KV and forget it (idempotent)."""
        if req in self.running:
            self.running.remove(req)
        elif req in self.waiting:
            self.waiting.remove(req)
        self.used_blocks -= req.blocks
        req.blocks = 0

    @property
    def idle(self) -> bool:
        return not self.running and not self.waiting

    def _grow(self, req: SimRequest, tokens_after: int) -> bool:
        need = self._blocks_for(tokens_after) - req.blocks
        if need <= 0:
            return True
        if need > self.free_blocks:
            return False
        req.blocks += need
        self.used_blocks += need
        return True

    def _preempt(self, victim: SimRequest, now_s: float) -> None:
        self.running.remove(victim)
        self.used_blocks -= victim.blocks
        victim.blocks = 0
        victim.computed_tokens = 0
        victim.prefill_target = victim.prompt_tokens + victim.generated  # recompute everything
        victim.num_preemptions += 1
        victim.queued_s = now_s
        self.num_preemptions += 1
        self.waiting.appendleft(victim)

    # -- one engine step ------------------------------------------------------------------
    def step(self, now_s: float) -> StepResult:
        budget = self.limits.max_num_batched_tokens
        decode: list[SimRequest] = []
        prefill: list[tuple[SimRequest, int]] = []
        preempted: list[SimRequest] = []
        images = 0

        # Running requests first, in admission order; preempt from the back when KV runs out.
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            if req.in_prefill:
                n = min(req.prefill_target - req.computed_tokens, budget)
                tokens_after = req.computed_tokens + n
            else:
                n = 1
                tokens_after = req.prompt_tokens + req.generated + 1
            while not self._grow(req, tokens_after):
                victim = self.running[-1]
                self._preempt(victim, now_s)
                preempted.append(victim)
                if victim is req:
                    break
            if req not in self.running:
                break
            if n == 1 and not req.in_prefill:
                decode.append(req)
            else:
                prefill.append((req, n))
            budget -= n
            i += 1

        # Admit waiting requests (not in a step that had to preempt, as vLLM does).
        while not preempted and self.waiting and budget > 0 and len(self.running) < self.limits.max_num_seqs:
            req = self.waiting[0]
            n = min(req.prefill_target - req.computed_tokens, budget)
            if not self._grow(req, req.computed_tokens + n):
                break  # KV full: it waits (queue grows) until running requests finish
            self.waiting.popleft()
            req.queue_time_s += now_s - req.queued_s
            if req.first_scheduled_s is None:
                req.first_scheduled_s = now_s
            self.running.append(req)
            prefill.append((req, n))
            budget -= n

        prefill_tokens = 0
        for req, n in prefill:
            if not req.images_charged and req.num_images:
                images += req.num_images
                req.images_charged = True
            req.computed_tokens += n
            prefill_tokens += n

        lat = self.latency
        duration_s = 0.0
        if decode or prefill:
            duration_s = (lat.step_base_ms + lat.decode_per_seq_ms * len(decode)
                          + lat.prefill_per_token_ms * prefill_tokens + lat.image_encode_ms * images) / 1000.0
        end_s = now_s + duration_s

        emitted: list[SimRequest] = list(decode)
        for req, _ in prefill:
            if not req.in_prefill:  # prefill complete in this step: first (or next) token sampled
                if req.prefill_done_s is None:
                    req.prefill_done_s = end_s
                emitted.append(req)
        finished: list[SimRequest] = []
        itl: dict[float, int] = {}
        for req in emitted:
            req.generated += 1
            if req.last_token_s is None:  # its first token (first_token_s and last_token_s are set together)
                req.first_token_s = end_s
            else:
                gap = end_s - req.last_token_s
                itl[gap] = itl.get(gap, 0) + 1
            req.last_token_s = end_s
            if self.record_tokens:
                req.token_times_s.append(end_s)
            if req.generated >= req.output_tokens:
                req.finished_s = end_s
                finished.append(req)
        for req in finished:
            self.running.remove(req)
            self.used_blocks -= req.blocks
            req.blocks = 0
        return StepResult(duration_s, end_s, emitted, finished, preempted, prefill_tokens + len(decode), itl)


def simulate(scheduler: Scheduler, arrivals: list[SimRequest], max_steps: int = 10_000_000) -> float:
    """Run requests (with ``arrival_s`` set) to completion on a virtual clock; returns end time."""
    pending = deque(sorted(arrivals, key=lambda r: r.arrival_s))
    now = 0.0
    steps = 0
    while pending or not scheduler.idle:
        while pending and pending[0].arrival_s <= now:
            req = pending.popleft()
            scheduler.add(req, req.arrival_s)
        if scheduler.idle:
            now = pending[0].arrival_s
            continue
        result = scheduler.step(now)
        if result.num_tokens == 0:
            # Nothing could be scheduled (a request larger than the whole KV cache): stop rather
            # than spin.
            raise RuntimeError(
                f"scheduler stalled at t={now:.3f}s: {len(scheduler.waiting)} waiting requests do not fit "
                f"in {scheduler.total_blocks} KV blocks"
            )
        now = result.end_s
        steps += 1
        if steps > max_steps:
            raise RuntimeError(f"simulation exceeded {max_steps} steps")
    return now


def simulate_closed_loop(scheduler: Scheduler, make_request, concurrency: int, total: int) -> float:
    """``concurrency`` clients each send their next request when the previous one finishes (how
    load generators and MinerU's semaphore behave); returns the time the last request finished."""
    now = 0.0
    sent = 0
    for _ in range(min(concurrency, total)):
        scheduler.add(make_request(sent, now), now)
        sent += 1
    while not scheduler.idle:
        result = scheduler.step(now)
        if result.num_tokens == 0:
            raise RuntimeError(f"scheduler stalled at t={now:.3f}s: requests do not fit the KV cache")
        now = result.end_s
        for _ in result.finished:
            if sent < total:
                scheduler.add(make_request(sent, now), now)
                sent += 1
    return now
