"""Progress of a long run, on a terminal and off one.

* On a terminal: a live line (rich) with a bar, done/total, rate, errors, requests in flight,
  elapsed time and ETA, and the last 10 s (rolling rate, errors, TTFT and E2E p50/p95), redrawn 4
  times a second and erased at the end.
* Without one (CI logs, pipes): the same facts as one plain line every ``every_s`` seconds
  (``--progress-every-s`` or $BENCH_PROGRESS_EVERY, default 10; 0 turns the lines off), so a log
  shows the run is alive even while no request finishes.

The engine calls the callback per finished request; it only stores three integers, and a
separate thread draws or prints, so drawing never competes with sending. ETA: for a run of a
planned duration, the planned time left; for a run of a request count, what is left at the
rate so far.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn

from bench.engine import ProgressFn
from bench.load import LoadSpec, open_schedule
from bench.records import CHAT_FIELDS, PIPELINE_FIELDS

ENV = "BENCH_PROGRESS_EVERY"
DEFAULT_EVERY_S = 10.0
TERMINAL_REFRESH_S = 0.25


class ProgressSettingError(ValueError):
    """A progress interval that is not a number of seconds >= 0."""


def every_s(flag: float | None, env: dict[str, str] | None = None) -> float:
    """Seconds between plain progress lines: the flag, else $BENCH_PROGRESS_EVERY, else 10."""
    if flag is not None:
        if flag < 0:
            raise ProgressSettingError(f"--progress-every-s {flag:g}: must be >= 0 seconds (0 turns the lines off)")
        return flag
    raw = (os.environ if env is None else env).get(ENV, "").strip()
    if not raw:
        return DEFAULT_EVERY_S
    try:
        value = float(raw.removesuffix("s"))
    except ValueError:
        value = -1.0
    if value < 0 or value != value:
        raise ProgressSettingError(f"${ENV}={raw!r}: not a number of seconds >= 0; set it like "
                                   f"{ENV}=30 (0 turns the lines off) or unset it for every {DEFAULT_EVERY_S:g} s")
    return value


LIVE_WINDOW_S = 10.0  # the live view's rolling window
_CHAT_AT = tuple(CHAT_FIELDS.index(f) for f in ("sent_ns", "event_ns", "end_ns", "error"))
_PIPELINE_AT = tuple(PIPELINE_FIELDS.index(f) for f in ("sent_ns", "end_ns", "error"))


class LiveWindow:
    """The last ``LIVE_WINDOW_S`` seconds of finished requests, for the live view: each finished
    row adds (time, TTFT ms, E2E ms, failed) to a bounded deque (a few hundred ns in the engine's
    thread); the display thread reads rolling req/s, errors and TTFT/E2E percentiles from it."""

    def __init__(self, window_s: float = LIVE_WINDOW_S, most: int = 100_000) -> None:
        self.window_s = window_s
        self.items: deque[tuple[float, float | None, float | None, bool]] = deque(maxlen=most)

    def add_row(self, row: tuple) -> None:
        if row[0] == "chat":
            sent, events, end, error = (row[i] for i in _CHAT_AT)
            ttft = (events[0] - sent) / 1e6 if events else None
        else:
            sent, end, error = (row[i] for i in _PIPELINE_AT)
            ttft = None
        self.items.append((time.monotonic(), ttft, (end - sent) / 1e6 if end is not None else None,
                           error is not None))

    def line(self, now: float | None = None) -> str:
        """``last 10 s: 12.0 req/s, 1 error, TTFT p50/p95 12/30 ms, E2E p50/p95 80/150 ms``."""
        now = time.monotonic() if now is None else now
        recent = [x for x in list(self.items) if now - x[0] <= self.window_s]
        if not recent:
            return f"last {self.window_s:g} s: nothing finished"
        span = min(self.window_s, max(1e-3, now - recent[0][0])) if len(recent) > 1 else self.window_s
        errors = sum(1 for x in recent if x[3])
        parts = [f"last {self.window_s:g} s: {len(recent) / span:.1f}/s", f"{errors} error{'s' * (errors != 1)}"]
        for name, vals in (("TTFT", [x[1] for x in recent if x[1] is not None and not x[3]]),
                           ("E2E", [x[2] for x in recent if x[2] is not None and not x[3]])):
            if vals:
                p50, p95 = np.percentile(vals, [50, 95])
                parts.append(f"{name} p50/p95 {_ms(p50)}/{_ms(p95)}")
        return ", ".join(parts)


def _ms(v: float) -> str:
    return f"{v / 1000:.1f} s" if v >= 10_000 else f"{v:.0f} ms" if v >= 10 else f"{v:.1f} ms"


@dataclass
class Plan:
    """What a run expects: its label, requests in total and seconds of load (either may be unknown)."""

    label: str
    total: int | None = None
    planned_s: float | None = None
    unit: str = "req"


def plan_for(load: LoadSpec, label: str | None = None) -> Plan:
    planned = load.warmup_s + load.duration_s + load.cooldown_s if load.duration_s else None
    total = None
    if load.mode == "open":
        # the seeded schedule itself: the total is the number of requests that will be sent, not
        # rate x time (a Poisson draw of 2 min at 1 req/s is rarely exactly 120)
        total = len(open_schedule(load)[0])
    elif load.count:
        total = load.count + (int(load.rate_rps * (load.warmup_s + load.cooldown_s)) if load.rate_rps else 0)
    return Plan(label or load.target_label, total, planned)


@dataclass
class _State:
    done: int = 0
    errors: int = 0
    in_flight: int = 0
    load_s: float | None = None  # seconds since the first request finished (start-up excluded)


def _dur(s: float) -> str:
    s = max(0.0, s)
    if s < 60:
        return f"{s:.0f} s"
    m, sec = divmod(int(round(s)), 60)
    return f"{m} min {sec:02d} s" if m < 60 else f"{m // 60} h {m % 60:02d} min"


def status_line(plan: Plan, st: _State, elapsed_s: float, counts: bool = True) -> str:
    """One line: done/total, rate, errors, in flight, elapsed and ETA."""
    parts = []
    busy_s = elapsed_s if st.load_s is None else st.load_s  # the load's own time: rate and ETA
    if counts:
        if plan.total:
            parts.append(f"{st.done}/{plan.total} {plan.unit} ({min(100.0, 100.0 * st.done / plan.total):.0f} %)")
        else:
            parts.append(f"{st.done} {plan.unit} done")
        # a rate over less than a second of load says nothing (records can arrive in batches)
        parts += [f"{st.done / busy_s:.1f} {plan.unit}/s" if busy_s >= 1.0 else f"— {plan.unit}/s",
                  f"{st.errors} errors"]
        if st.in_flight >= 0:  # -1: not known (a Locust run)
            parts.append(f"{st.in_flight} in flight")
    else:
        parts.append("counts at the end (several client processes)")
    parts.append(f"{_dur(elapsed_s)} elapsed")
    eta = _eta(plan, st, busy_s, counts)
    parts.append(f"ETA {_dur(eta)}" if eta is not None else "ETA unknown")
    return " · ".join(parts)


def _eta(plan: Plan, st: _State, elapsed_s: float, counts: bool) -> float | None:
    if plan.planned_s:
        return max(0.0, plan.planned_s - elapsed_s)
    if counts and plan.total and st.done and elapsed_s >= 1.0:
        return (plan.total - st.done) / (st.done / elapsed_s)
    return None


@contextmanager
def run_progress(plan: Plan, console: Console, every: float = DEFAULT_EVERY_S, *, counts: bool = True,
                 poll: Callable[[], tuple[int, int, int]] | None = None) -> Iterator[ProgressFn]:
    """Yield the engine's progress callback while a ticker thread shows progress (see the module doc).

    ``counts`` False: the counts are not known while the run goes (several client processes), so
    only the time is shown. ``poll``: where the counts come from when no callback is called (a
    Locust run: its record files), read at each tick; an in-flight count of -1 means unknown."""
    st = _State(in_flight=-1 if poll is not None else 0)
    start = time.monotonic()
    stop = threading.Event()

    first: list[float] = []  # when the first request finished: the load's clock starts there

    def cb(done: int, errors: int, in_flight: int) -> None:
        st.done, st.errors, st.in_flight = done, errors, in_flight
        if not first:
            first.append(time.monotonic())

    # only when something is shown: a run with its lines off pays nothing per request
    live = LiveWindow() if counts and poll is None and (console.is_terminal or every > 0) else None
    cb.live = live  # type: ignore[attr-defined]  # the engine's sink feeds it finished rows

    def shown(el: float) -> str:
        line = status_line(plan, st, el, counts)
        return f"{line} · {live.line()}" if live is not None and el >= 2 * TERMINAL_REFRESH_S else line

    def refresh() -> None:
        if poll is not None:
            try:
                done, errors, in_flight = poll()
            except OSError:
                done = 0  # a file being written: the next tick reads it
            if done:
                cb(done, errors, in_flight)
        if first:
            st.load_s = time.monotonic() - first[0]

    if console.is_terminal:
        bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.fields[line]}"),
                       console=console, transient=True, auto_refresh=False)
        task = bar.add_task(plan.label, total=plan.total if counts else plan.planned_s, line="starting")

        def tick() -> None:
            while not stop.wait(TERMINAL_REFRESH_S):
                refresh()
                el = time.monotonic() - start
                bar.update(task, completed=st.done if counts and plan.total else min(el, plan.planned_s or el),
                           line=shown(el))
                bar.refresh()

        with bar:
            t = threading.Thread(target=tick, name="bench-progress", daemon=True)
            t.start()
            try:
                yield cb
            finally:
                stop.set()
                t.join(timeout=2)
        return

    def lines() -> None:
        while not stop.wait(every):
            refresh()
            console.print(f"[{plan.label}] {shown(time.monotonic() - start)}",
                          soft_wrap=True, highlight=False, markup=False)

    t = threading.Thread(target=lines, name="bench-progress", daemon=True)
    if every > 0:
        t.start()
    try:
        yield cb
    finally:
        stop.set()
        if t.is_alive():
            t.join(timeout=2)
