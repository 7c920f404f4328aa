"""The asyncio load engine: open- and closed-loop runs in one or several client processes.

Every timestamp is ``time.monotonic_ns()`` minus the run's t0. CLOCK_MONOTONIC is one clock for
the whole machine, so records from several client processes share a time base. The engine
knows nothing about HTTP or payloads: a :class:`Workload` builds a :class:`Sender` inside each
process, and the sender turns (index, intended time, phase) into a record.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import resource
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from bench.load import NS, LoadSpec, open_schedule, phase_of
from bench.records import AnyRecord, Phase, RequestRecord, read_jsonl, write_jsonl

ProgressFn = Callable[[int, int, int], None]  # (finished, errors, in_flight)


class Sender(Protocol):
    async def send(self, index: int, intended_ns: int, phase: Phase, t0_ns: int) -> AnyRecord: ...
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


def _overload_record(sender: Sender, index: int, intended: int, phase: Phase, t0: int,
                     process: int) -> AnyRecord:

    now = time.monotonic_ns() - t0
    return RequestRecord(request_id=f"p{process}-{index}", phase=phase, process=process,
                         intended_ns=intended, sent_ns=now, wall_sent_s=time.time(),
                         error="client_overload",
                         error_detail="open-loop in-flight cap reached: the client could not keep "
                         "up with the schedule (raise load.max_in_flight or lower rate_rps)")


async def _run_open(sender: Sender, arrivals: list[tuple[int, int]], spec: LoadSpec,
                    start_ns: int, end_ns: int | None, t0: int, process: int,
                    progress: ProgressFn | None) -> tuple[list[AnyRecord], int]:
    records: list[AnyRecord] = []
    pending: set[asyncio.Task] = set()
    errors = overloaded = 0

    def done(task: asyncio.Task) -> None:
        nonlocal errors
        pending.discard(task)
        rec = task.result()
        records.append(rec)
        if not rec.ok:
            errors += 1
        if progress:
            progress(len(records), errors, len(pending))

    sleep = asyncio.sleep
    mono = time.monotonic_ns
    for index, intended in arrivals:
        delay = t0 + intended - mono()
        if delay > 0:
            await sleep(delay / NS)
        phase = phase_of(intended, start_ns, end_ns)
        if len(pending) >= spec.max_in_flight:
            overloaded += 1
            records.append(_overload_record(sender, index, intended, phase, t0, process))
            continue
        task = asyncio.ensure_future(sender.send(index, intended, phase, t0))
        pending.add(task)
        task.add_done_callback(done)
    while pending:
        await asyncio.wait(set(pending))
    return records, overloaded


async def _run_closed(sender: Sender, users: list[int], spec: LoadSpec, t0: int,
                      process: int, progress: ProgressFn | None) -> list[AnyRecord]:
    records: list[AnyRecord] = []
    warm = int(spec.warmup_s * NS)
    measure_end = warm + int(spec.duration_s * NS) if spec.duration_s is not None else None
    measured = 0  # shared by all users: the count closes the window for everyone
    next_index = 0
    cool = int(spec.cooldown_s * NS)
    mono = time.monotonic_ns

    async def user(u: int) -> None:
        nonlocal measure_end, measured, next_index
        intended = mono() - t0
        while True:
            end = measure_end
            if end is not None and intended >= end + cool:
                return
            phase = phase_of(intended, warm, end)
            if phase == "measure" and spec.count is not None:
                if measured >= spec.count:
                    measure_end = measure_end or intended
                    phase = "cooldown"
                else:
                    measured += 1
            index = next_index
            next_index += 1
            rec = await sender.send(index, intended, phase, t0)
            records.append(rec)
            if progress:
                progress(len(records), sum(1 for r in records if not r.ok), 0)
            intended = mono() - t0  # next request is due now: the user thinks for 0 s

    await asyncio.gather(*(user(u) for u in users))
    return records


async def run_in_process(workload: Workload, spec: LoadSpec, process: int, t0: int,
                         progress: ProgressFn | None = None) -> tuple[list[AnyRecord], ProcessStats, int, int | None]:
    """One client process's share of the run (every process-th arrival / user)."""
    sender = await workload.sender(process, spec.request_timeout_s)
    try:
        cpu0, wall0 = _cpu_s(), time.monotonic()
        overloaded = 0
        if spec.mode == "open":
            schedule, start_ns, end_ns = open_schedule(spec)
            mine = [(i, t) for i, t in enumerate(schedule) if i % spec.processes == process]
            wait = t0 - time.monotonic_ns()
            if wait > 0:
                await asyncio.sleep(wait / NS)
            records, overloaded = await _run_open(sender, mine, spec, start_ns, end_ns, t0,
                                                  process, progress)
        else:
            users = [u for u in range(spec.concurrency or 0) if u % spec.processes == process]
            wait = t0 - time.monotonic_ns()
            if wait > 0:
                await asyncio.sleep(wait / NS)
            records = await _run_closed(sender, users, spec, t0, process, progress)
            start_ns = int(spec.warmup_s * NS)
            measured = [r.sent_ns for r in records if r.phase == "measure"]
            end_ns = (start_ns + int(spec.duration_s * NS) if spec.duration_s is not None
                      else (max(measured) + 1 if measured else start_ns))
        stats = ProcessStats(process, _cpu_s() - cpu0, time.monotonic() - wall0,
                             len(records), overloaded)
        return records, stats, start_ns, end_ns
    finally:
        await sender.aclose()


def _new_loop() -> asyncio.AbstractEventLoop:
    try:  # uvloop's libuv loop costs less CPU per request; plain asyncio works too
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:
        return asyncio.new_event_loop()


def _child(workload: Workload, spec: LoadSpec, process: int, conn: Any, out_dir: str) -> None:
    loop = _new_loop()
    try:
        conn.send(("ready", os.getpid()))
        t0 = conn.recv()
        records, stats, start_ns, end_ns = loop.run_until_complete(
            run_in_process(workload, spec, process, t0))
        path = Path(out_dir) / f"p{process}.jsonl"
        write_jsonl(path, records)
        conn.send(("done", str(path), stats, start_ns, end_ns))
    except BaseException as exc:  # noqa: BLE001 - report any failure to the parent instead of hanging it
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        loop.close()


def run(workload: Workload, spec: LoadSpec, progress: ProgressFn | None = None,
        start_delay_s: float = 0.05) -> RunResult:
    """Run the load; several processes when ``spec.processes > 1`` (spawned, fresh interpreters)."""
    wall_start = time.time()
    if spec.processes == 1:
        loop = _new_loop()
        try:
            t0 = time.monotonic_ns() + int(start_delay_s * NS)
            records, stats, start_ns, end_ns = loop.run_until_complete(
                run_in_process(workload, spec, 0, t0, progress))
        finally:
            loop.close()
        return RunResult(records, spec, start_ns, end_ns, wall_start, stats.wall_s, [stats],
                         scheduled=len(records), t0_ns=t0)
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
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
            records = []  # typed list[AnyRecord] by the single-process branch above
            stats_all: list[ProcessStats] = []
            start_ns, end_ns = 0, None
            for conn in pipes:
                msg = conn.recv()
                if msg[0] == "error":
                    raise RuntimeError(f"client process failed: {msg[1]}")
                _, path, stats, start_ns, e_ns = msg
                end_ns = max(end_ns or 0, e_ns or 0) or end_ns
                records.extend(read_jsonl(Path(path)))
                stats_all.append(stats)
        finally:
            for proc in procs:
                proc.join(timeout=5)
                if proc.is_alive():
                    proc.terminate()
        wall = max(s.wall_s for s in stats_all)
        return RunResult(records, spec, start_ns, end_ns, wall_start, wall, stats_all,
                         scheduled=len(records), t0_ns=t0)
