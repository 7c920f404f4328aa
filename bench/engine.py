"""The asyncio load engine: open- and closed-loop runs in one or several client processes.

Every timestamp is ``time.monotonic_ns()`` minus the run's t0. CLOCK_MONOTONIC is one clock for
the whole machine, so records from several client processes share a time base. The engine
knows nothing about HTTP or payloads: a :class:`Workload` builds a :class:`Sender` inside each
process, and the sender turns (index, intended time, phase) into a record, or into the record's
compact row (bench/records.py).

No pause in the measured window: each finished request is a row of plain values, written to a
spool file as the run goes, so the heap does not grow with the run; everything that exists when
the load starts is frozen out of collections (``gc.freeze``) and automatic collection is off
until the load ends (what the hot path makes is freed by reference counting; a guard acts only
if tracked objects pile up, see :meth:`GCLog.guard`); every collection is timed
(``gc.callbacks``) into the process's stats. The GIL switch interval is
lowered for the run, so a helper thread (the server-gauge sampler) that holds the GIL delays the
event loop by at most that interval. Open-loop sends wake on a timerfd (bench/timer.py), not on
the loop's millisecond timers.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import multiprocessing as mp
import os
import resource
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import uvloop

from bench.heap import frozen_heap
from bench.load import FAIL_FAST_MIN_FAILURES, NS, LoadSpec, open_schedule, phase_of
from bench.records import (
    CHAT_FIELDS,
    PIPELINE_FIELDS,
    AnyRecord,
    Phase,
    RequestRecord,
    Spool,
    from_row,
    read_spool,
    to_row,
)
from bench.timer import Waker

ProgressFn = Callable[[int, int, int], None]  # (finished, errors, in_flight)
Row = tuple[Any, ...]
SWITCH_INTERVAL_S = 0.0005  # GIL hand-off bound during a run (Python's default: 5 ms)
GC_PAUSES_KEPT = 20  # the longest collections of a process, listed in its stats
GC_BACKLOG_MAX = 10_000  # tracked objects made and not freed since the last collection: ~1-2 ms to walk
GC_CHECK_EVERY = 64  # sends, and finished requests, between two looks at that count (a look costs ~50 ns)
# Requests in flight past which the young generation is mostly those requests, not garbage: each
# holds ~10 tracked objects (task, coroutines, future, response, its piece and stamp lists) that a
# collection walks at 0.1-0.45 us apiece here (their lists' items too), so 256 of them are ~1 ms.
GC_WALK_IN_FLIGHT_MAX = 256
STOP_GRACE_S = 2.0  # after a fail-fast stop: time for requests in flight to finish before they are cancelled
_ERROR_AT = {"chat": CHAT_FIELDS.index("error"), "pipeline": PIPELINE_FIELDS.index("error")}


class Sender(Protocol):
    async def send(self, index: int, intended_ns: int, phase: Phase, t0_ns: int) -> AnyRecord | Row: ...
    async def aclose(self) -> None: ...


class Workload(Protocol):
    """Picklable description of what to send; ``sender()`` runs inside the client process."""

    name: str

    async def sender(self, process: int, timeout_s: float) -> Sender: ...


@dataclass
class ProcessStats:
    process: int
    cpu_s: float
    wall_s: float
    sent: int
    overloaded: int
    gc: dict[str, Any] = field(default_factory=dict)  # GCLog.summary(): collections and pauses in the run
    fail_fast_after_s: float | None = None  # the failure streak that stopped the run early, s; None: not stopped


class GCLog:
    """Times every garbage collection while installed (``gc.callbacks``)."""

    def __init__(self, t0_ns: int) -> None:
        self.t0_ns = t0_ns
        self.count = [0, 0, 0]
        self.total_ns = 0
        # (wall ns, CPU ns of this thread, generation, start ns after t0): a pause much longer in wall
        # time than in CPU time is the machine not running the process, not the collector's work
        self.pauses: list[tuple[int, int, int, int]] = []
        self._start = self._start_cpu = 0
        self.freezes = 0  # backlogs of requests in flight frozen out of collections (see guard)
        self.frozen_garbage: int | None = None  # what the collection after the load found of them

    def guard(self, in_flight: int) -> None:
        """The guard against a heap that grows while collections are off; called every
        ``GC_CHECK_EVERY`` sends and finished requests. Objects the run keeps or leaves in
        reference cycles raise the collector's count of tracked objects; past ``GC_BACKLOG_MAX``:

        * few requests in flight (``GC_WALK_IN_FLIGHT_MAX``): the backlog is garbage (reference cycles a
          workload left); the young generations are collected once, a walk of ~1-2 ms that frees it;
          what survives moves to the old generation, not collected before the load ends.
        * many in flight (an overloaded server, thousands waiting): the young generation is those
          requests, and more of them than the count says, since freeing an old object lowers the
          count too (in a saturated run it read 10-53k where the generation held 11-116k objects,
          walks of up to 51 ms). Walking them would find nothing to free: they are frozen instead
          (``gc.freeze``: a constant-time move out of every generation), freed by reference
          counting when they finish; the load's end unfreezes and collects them, and the stats
          say how much of what was frozen was garbage (``frozen_garbage``).
        """
        if gc.get_count()[0] > GC_BACKLOG_MAX:
            if in_flight > GC_WALK_IN_FLIGHT_MAX:
                gc.freeze()
                self.freezes += 1
            else:
                gc.collect(1)

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        now, cpu = time.perf_counter_ns(), time.thread_time_ns()
        if phase == "start":
            self._start, self._start_cpu = now, cpu
            return
        took = now - self._start
        gen = info["generation"]
        self.count[gen] += 1
        self.total_ns += took
        pauses = self.pauses
        if len(pauses) < GC_PAUSES_KEPT or took > pauses[-1][0]:
            pauses.append((took, cpu - self._start_cpu, gen, time.monotonic_ns() - took - self.t0_ns))
            pauses.sort(reverse=True)
            del pauses[GC_PAUSES_KEPT:]

    def summary(self) -> dict[str, Any]:
        return {"collections": {f"gen{g}": n for g, n in enumerate(self.count)},
                "total_pause_ms": round(self.total_ns / 1e6, 3),
                "max_pause_ms": round(self.pauses[0][0] / 1e6, 3) if self.pauses else 0.0,
                "freezes": self.freezes, "frozen_garbage": self.frozen_garbage,
                "longest": [{"ms": round(d / 1e6, 3), "cpu_ms": round(c / 1e6, 3), "generation": g,
                             "at_s": round(t / 1e9, 3)} for d, c, g, t in self.pauses]}


def settle_heap() -> None:
    """Collect, then freeze what exists, before the run's t0 is fixed: a full collection over a
    large heap (transformers loaded for a client-side tokenizer) takes hundreds of milliseconds,
    which would otherwise land on the first sends as schedule lag."""
    gc.collect()
    gc.freeze()


@contextlib.contextmanager
def quiet_heap(t0_ns: int) -> Iterator[GCLog]:
    """The measured run's garbage-collection regime (see the module docstring); restored after.
    :func:`settle_heap` has run before t0; what was made since (the sender) is frozen too."""
    gc.freeze()
    enabled = gc.isenabled()
    gc.disable()  # no automatic collection while the load runs: only the backlog guard collects
    switch = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    log = GCLog(t0_ns)
    gc.callbacks.append(log)
    try:
        yield log
    finally:
        gc.callbacks.remove(log)
        sys.setswitchinterval(switch)
        gc.unfreeze()
        if log.freezes:  # the load is over: what the guard froze is collected now, and counted
            log.frozen_garbage = gc.collect()
        if enabled:
            gc.enable()


@dataclass
class RunResult:
    records: list[AnyRecord]
    load: LoadSpec
    measure_start_ns: int
    measure_end_ns: int | None
    wall_start_s: float
    wall_s: float
    processes: list[ProcessStats] = field(default_factory=list)
    scheduled: int = 0
    t0_ns: int = 0  # time.monotonic_ns() of the run's t0: record stamps + t0_ns = the server's clock


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _overload_row(index: int, intended: int, phase: Phase, t0: int, process: int) -> Row:
    now = time.monotonic_ns() - t0
    return to_row(RequestRecord(request_id=f"p{process}-{index}", phase=phase, process=process,
                                intended_ns=intended, sent_ns=now, wall_sent_s=time.time(),
                                error="client_overload",
                                error_detail="open-loop in-flight cap reached: the client could not keep "
                                "up with the schedule (raise load.max_in_flight or lower rate_rps)"))


class _Sink:
    """Where finished requests go: the spool, plus the counts the progress display shows, and the
    fail-fast watch: a streak of failures with no success lasting ``fail_fast_s`` (and at least
    ``FAIL_FAST_MIN_FAILURES`` long) sets ``stop``. It costs a clock read per failure, nothing per
    success."""

    def __init__(self, spool: Spool, progress: ProgressFn | None, guard: Callable[[int], None],
                 fail_fast_s: float = 0.0) -> None:
        self.spool = spool
        self.progress = progress
        self.errors = 0
        self.guard = guard  # the run's GCLog.guard, given the requests in flight
        self.fail_fast_ns = int(fail_fast_s * NS)
        self.streak = 0
        self.streak_start_ns = 0
        self.stop = asyncio.Event()
        self.live = getattr(progress, "live", None)  # bench.progress.LiveWindow: the live view's rolling window
        self.stopped_after_ns: int | None = None  # the streak's length when it stopped the run
        self.stopped_at_mono_ns = 0

    def add(self, rec: AnyRecord | Row, in_flight: int) -> None:
        row = rec if type(rec) is tuple else to_row(rec)  # type: ignore[arg-type]
        self.spool.append(row)
        if row[_ERROR_AT[row[0]]] is not None:
            self.errors += 1
            if self.fail_fast_ns:
                self._failed()
        elif self.streak:
            self.streak = 0
        if not self.spool.rows % GC_CHECK_EVERY:
            self.guard(in_flight)
        if self.progress:
            self.progress(self.spool.rows, self.errors, in_flight)
            if self.live is not None:
                self.live.add_row(row)

    def _failed(self) -> None:
        now = time.monotonic_ns()
        if not self.streak:
            self.streak_start_ns = now
        self.streak += 1
        if (self.streak >= FAIL_FAST_MIN_FAILURES and now - self.streak_start_ns >= self.fail_fast_ns
                and not self.stop.is_set()):
            self.stopped_after_ns = now - self.streak_start_ns
            self.stopped_at_mono_ns = now
            self.stop.set()


async def _until_done_or_stopped(work: Awaitable[Any], sink: _Sink) -> None:
    """Wait for ``work``; on a fail-fast stop, give what is in flight ``STOP_GRACE_S`` to finish
    (recorded as usual), then cancel it: those requests have no record."""
    task = asyncio.ensure_future(work)
    stopper = asyncio.ensure_future(sink.stop.wait())
    await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    if not task.done():
        await asyncio.wait({task}, timeout=STOP_GRACE_S)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    stopper.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await stopper
    if task.done() and not task.cancelled() and task.exception() is not None:
        raise task.exception()  # type: ignore[misc]


async def _run_open(sender: Sender, arrivals: list[tuple[int, int]], spec: LoadSpec,
                    start_ns: int, end_ns: int | None, t0: int, process: int, sink: _Sink, waker: Waker) -> int:
    pending: set[asyncio.Task] = set()
    overloaded = 0

    def done(task: asyncio.Task) -> None:
        pending.discard(task)
        if not task.cancelled():
            sink.add(task.result(), len(pending))

    until = waker.until
    mono = time.monotonic_ns
    ensure = asyncio.ensure_future
    stop = sink.stop
    for index, intended in arrivals:
        if stop.is_set():
            break
        if t0 + intended > mono():
            await until(t0 + intended)
        phase = phase_of(intended, start_ns, end_ns)
        if len(pending) >= spec.max_in_flight:
            overloaded += 1
            sink.add(_overload_row(index, intended, phase, t0, process), len(pending))
            continue
        task = ensure(sender.send(index, intended, phase, t0))
        pending.add(task)
        task.add_done_callback(done)
        if not index % GC_CHECK_EVERY:  # an overloaded server finishes little: look on sends too
            sink.guard(len(pending))
    if pending:
        await _until_done_or_stopped(asyncio.wait(set(pending)), sink)
        for task in list(pending):  # cancelled by the stop: no record
            task.cancel()
    return overloaded


async def _run_closed(sender: Sender, users: list[int], spec: LoadSpec, t0: int, sink: _Sink,
                      shared: dict[str, Any]) -> None:
    """``concurrency`` users back to back. With ``count``, exactly ``count`` measured requests are
    sent (over all users of this process's share) and, without a cooldown, not one more."""
    warm = int(spec.warmup_s * NS)
    cool = int(spec.cooldown_s * NS)
    mono = time.monotonic_ns
    measure_end = warm + int(spec.duration_s * NS) if spec.duration_s is not None else None
    count = shared["count"]
    measured = 0  # shared by this process's users: the count closes the window for all of them
    next_index = shared["first_index"]
    step = shared["index_step"]

    stop = sink.stop

    async def user(u: int) -> None:
        nonlocal measure_end, measured, next_index
        intended = mono() - t0
        while not stop.is_set():
            end = measure_end
            if end is not None and intended >= end + cool:
                return
            phase = phase_of(intended, warm, end)
            if phase == "measure" and count is not None:
                if measured >= count:
                    measure_end = measure_end or intended
                    if cool == 0:
                        return  # the count is reached and no cooldown was asked for: nothing more to send
                    phase = "cooldown"
                else:
                    measured += 1
            index = next_index
            next_index += step
            sink.add(await sender.send(index, intended, phase, t0), len(users))
            intended = mono() - t0  # next request is due now: the user thinks for 0 s

    await _until_done_or_stopped(asyncio.gather(*(user(u) for u in users)), sink)


async def run_in_process(workload: Workload, spec: LoadSpec, process: int, t0: int, spool_path: Path,
                         progress: ProgressFn | None = None) -> tuple[ProcessStats, int, int | None]:
    """One client process's share of the run (every process-th arrival / user); its requests go
    to the spool at ``spool_path``."""
    sender = await workload.sender(process, spec.request_timeout_s)
    spool = Spool(spool_path)
    waker = Waker(asyncio.get_running_loop())
    try:
        if spec.mode == "open":
            schedule, start_ns, open_end = open_schedule(spec)
            mine = [(i, t) for i, t in enumerate(schedule) if i % spec.processes == process]
            del schedule
        else:
            users = [u for u in range(spec.concurrency or 0) if u % spec.processes == process]
        end: int | None = None
        with quiet_heap(t0) as gclog:
            sink = _Sink(spool, progress, gclog.guard, spec.fail_fast_s)
            cpu0, wall0 = _cpu_s(), time.monotonic()
            overloaded = 0
            await waker.until(t0)  # never early: a closed loop's first request stamped before t0 is warmup
            if spec.mode == "open":
                overloaded = await _run_open(sender, mine, spec, start_ns, open_end, t0, process, sink, waker)
                end = open_end
            else:
                await _run_closed(sender, users, spec, t0, sink, closed_share(spec, process))
            cpu, wall = _cpu_s() - cpu0, time.monotonic() - wall0
        if spec.mode == "closed":
            start_ns = int(spec.warmup_s * NS)
            end = start_ns + int(spec.duration_s * NS) if spec.duration_s is not None else None
        stopped = sink.stopped_after_ns / NS if sink.stopped_after_ns is not None else None
        if stopped is not None:  # the measured window ends at the stop: rates are over the time that ran
            at = max(start_ns, sink.stopped_at_mono_ns - t0)
            end = min(end, at) if end is not None else at
        return (ProcessStats(process, cpu, wall, spool.rows, overloaded, gclog.summary(), stopped),
                start_ns, end)
    finally:
        waker.close()
        spool.close()
        await sender.aclose()


def closed_share(spec: LoadSpec, process: int) -> dict[str, Any]:
    """This process's part of a closed loop's count (split as evenly as the users are) and its
    request indices (process, process + processes, ...: unique over the run)."""
    count = spec.count
    if count is not None:
        users = [sum(1 for u in range(spec.concurrency or 0) if u % spec.processes == p) for p in range(spec.processes)]
        total = sum(users) or 1
        shares = [count * n // total for n in users]
        for p in range(count - sum(shares)):  # the remainder, one each to the first processes
            shares[p % spec.processes] += 1
        count = shares[process]
    return {"count": count, "first_index": process, "index_step": spec.processes}


def measured_end(rows: list[AnyRecord], start_ns: int) -> int:
    """A count-bounded closed loop's window ends just after its last measured send."""
    sends = [r.sent_ns for r in rows if r.phase == "measure"]
    return max(sends) + 1 if sends else start_ns


def _new_loop() -> asyncio.AbstractEventLoop:
    # uvloop's libuv loop costs less CPU per request (a dependency: a run never falls back to a
    # slower loop without saying so)
    return uvloop.new_event_loop()


def _child(workload: Workload, spec: LoadSpec, process: int, conn: Any, out_dir: str) -> None:
    loop = _new_loop()
    try:
        settle_heap()
        conn.send(("ready", os.getpid()))
        t0 = conn.recv()
        path = Path(out_dir) / f"p{process}.spool"
        stats, start_ns, end_ns = loop.run_until_complete(run_in_process(workload, spec, process, t0, path))
        conn.send(("done", str(path), stats, start_ns, end_ns))
    except BaseException as exc:  # noqa: BLE001 - report any failure to the parent instead of hanging it
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        loop.close()


def _records(paths: list[Path]) -> list[AnyRecord]:
    with frozen_heap():  # thousands of records made at once: no collection walks the libraries for them
        return [from_row(row) for path in paths for row in read_spool(path)]


def run(workload: Workload, spec: LoadSpec, progress: ProgressFn | None = None,
        start_delay_s: float = 0.05) -> RunResult:
    """Run the load; several processes when ``spec.processes > 1`` (spawned, fresh interpreters)."""
    wall_start = time.time()
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        if spec.processes == 1:
            loop = _new_loop()
            path = Path(tmp) / "p0.spool"
            try:
                settle_heap()
                t0 = time.monotonic_ns() + int(start_delay_s * NS)
                stats, start_ns, end_ns = loop.run_until_complete(
                    run_in_process(workload, spec, 0, t0, path, progress))
            finally:
                loop.close()
            records = _records([path])
            if end_ns is None:
                end_ns = measured_end(records, start_ns)
            return RunResult(records, spec, start_ns, end_ns, wall_start, stats.wall_s, [stats],
                             scheduled=len(records), t0_ns=t0)
        ctx = mp.get_context("spawn")
        pipes, procs = [], []
        for p in range(spec.processes):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_child, args=(workload, spec, p, child, tmp), daemon=True)
            proc.start()
            pipes.append(parent)
            procs.append(proc)
        try:
            for conn in pipes:  # every process imported and connected before t0 is fixed
                if not conn.poll(60):
                    raise RuntimeError("a client process did not start within 60 s")
                msg = conn.recv()
                if msg[0] == "error":
                    raise RuntimeError(f"client process failed to start: {msg[1]}")
            t0 = time.monotonic_ns() + int(max(start_delay_s, 0.2) * NS)
            for conn in pipes:
                conn.send(t0)
            paths: list[Path] = []
            stats_all: list[ProcessStats] = []
            start_ns, end_ns = 0, None
            for conn in pipes:
                msg = conn.recv()
                if msg[0] == "error":
                    raise RuntimeError(f"client process failed: {msg[1]}")
                _, path, stats, start_ns, e_ns = msg
                end_ns = max(end_ns or 0, e_ns or 0) or end_ns
                paths.append(Path(path))
                stats_all.append(stats)
        finally:
            for proc in procs:
                proc.join(timeout=5)
                if proc.is_alive():
                    proc.terminate()
        records = _records(paths)
        if end_ns is None:
            end_ns = measured_end(records, start_ns)
        wall = max(s.wall_s for s in stats_all)
        return RunResult(records, spec, start_ns, end_ns, wall_start, wall, stats_all,
                         scheduled=len(records), t0_ns=t0)
