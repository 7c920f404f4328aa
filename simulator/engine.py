"""The asyncio engine loop: runs the scheduler against a clock and wakes waiting responses.

One task steps the scheduler, sleeps for the simulated step time, then hands each emitted token
to its request's ``Stream`` (an ``asyncio.Event`` and a counter). Responses write whatever tokens
are ready when they wake, so a fast profile batches several tokens per wake-up instead of
paying one context switch per token.

Private engines (the monolithic twin) share one simulated GPU: ``gpu`` is a lock all of them hold
for the length of each step, so the GPU runs one engine's step at a time (CUDA time-slices the
contexts of separate processes; nothing batches across them). ``busy_s`` adds up the step time an
engine held the GPU: its utilisation is ``busy_s`` over wall time.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from .metrics import EngineGauges, EngineMetrics
from .scheduler import Scheduler, SimRequest

log = logging.getLogger("simulator")

MAX_INLINE_STEPS = 32  # steps run back to back before the loop yields, when no step time is due


class Clock(Protocol):
    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class LoopClock:
    """Monotonic event-loop time (the default; tests of the model use ``scheduler.simulate``)."""

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class VirtualClock:
    """Simulated time that jumps instead of waiting: the whole server runs at CPU speed, so tests
    (and capacity rehearsals) see seconds of simulated load in milliseconds."""

    def __init__(self, start: float = 0.0) -> None:
        self.t = start

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.t += max(0.0, seconds)
        await asyncio.sleep(0)


class Stream:
    """Per-request hand-off between the engine task and the HTTP response."""

    __slots__ = ("event", "done", "aborted")

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.done = False
        self.aborted = False


class Engine:
    def __init__(self, scheduler: Scheduler, metrics: EngineMetrics | None, clock: Clock,
                 gpu: asyncio.Lock | None = None) -> None:
        self.scheduler = scheduler
        self.metrics = metrics
        self.clock = clock
        self.gpu = gpu
        self.busy_s = 0.0  # simulated step time (GPU busy time) since start
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task | None = None

    def gauges(self) -> EngineGauges:
        s = self.scheduler
        return EngineGauges(len(s.running), len(s.waiting), s.kv_usage)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="sim-engine")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    def poke(self) -> None:
        """Re-run the scheduler now (e.g. the KV cache grew and the queue head may fit)."""
        self._wakeup.set()

    def submit(self, req: SimRequest) -> Stream:
        req.handle = Stream()
        self.scheduler.add(req, self.clock.now())
        self._wakeup.set()
        return req.handle

    def abort(self, req: SimRequest) -> None:
        if req.done or req.handle.aborted:
            return
        req.handle.aborted = True
        self.scheduler.abort(req)
        if self.metrics:
            self.metrics.finished(reason="abort", prompt_tokens=req.prompt_tokens, generated=req.generated,
                                  max_tokens=req.output_tokens, max_tokens_param=req.max_tokens_param, e2e_s=0,
                                  queue_s=0, prefill_s=0, decode_s=0, preemptions=req.num_preemptions)
        self._wakeup.set()

    async def _run(self) -> None:
        if self.gpu is not None:
            await self._run_shared_gpu(self.gpu)
            return
        sched, clock = self.scheduler, self.clock
        inline_steps = 0
        while True:
            if sched.idle:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            result = sched.step(clock.now())
            if result.num_tokens == 0:
                # Head of the queue does not fit the KV cache: wait for an abort or a new limit.
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            self.busy_s += result.duration_s
            delay = result.end_s - clock.now()
            if delay > 0:
                inline_steps = 0
                await clock.sleep(delay)
            elif inline_steps < MAX_INLINE_STEPS:
                # A step that is already due (near-zero step times): keep stepping before yielding,
                # so responses wake once for many tokens instead of once per token.
                inline_steps += 1
            else:
                inline_steps = 0
                await clock.sleep(0)
            self._deliver(result)

    async def _run_shared_gpu(self, gpu: asyncio.Lock) -> None:
        """One step at a time on a GPU other engines share: wait for the GPU (FIFO among the
        engines with work), step, hold it for the step's time, release, deliver."""
        sched, clock = self.scheduler, self.clock
        while True:
            if sched.idle:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            async with gpu:
                result = sched.step(clock.now())
                if result.num_tokens:
                    self.busy_s += result.duration_s
                    await clock.sleep(max(0.0, result.end_s - clock.now()))
            if result.num_tokens == 0:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            self._deliver(result)  # the next acquire queues behind any engine waiting for the GPU

    def _deliver(self, result) -> None:
        m = self.metrics
        if m:
            m.step(result.num_tokens, len(result.preempted))
            for gap, n in result.itl_s.items():
                m.tokens(gap, n)
        for req in result.emitted:
            if req.generated == 1 and m:
                m.first_token(req.prompt_tokens, req.num_images, req.first_token_s - req.arrival_s)
            req.handle.event.set()
        for req in result.finished:
            req.handle.done = True
            if m:
                prefill_done = req.prefill_done_s or req.first_token_s
                start = req.first_scheduled_s if req.first_scheduled_s is not None else req.arrival_s
                m.finished(reason=req.finish_reason, prompt_tokens=req.prompt_tokens, generated=req.generated,
                           max_tokens=req.max_tokens_param or req.output_tokens,
                           max_tokens_param=req.max_tokens_param, e2e_s=req.finished_s - req.arrival_s,
                           queue_s=req.queue_time_s, prefill_s=prefill_done - start,
                           decode_s=req.finished_s - prefill_done, preemptions=req.num_preemptions)
