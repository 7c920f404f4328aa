"""Rich progress while a run is going: a bar over the expected requests and a live table of
counts. The callback is throttled: the engine calls it per request, the screen updates at
most 8 times a second so drawing never competes with sending."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from bench.engine import ProgressFn
from bench.load import LoadSpec


def expected_requests(load: LoadSpec) -> int | None:
    if load.mode == "open" and load.rate_rps and load.duration_s:
        return int(load.rate_rps * (load.warmup_s + load.duration_s + load.cooldown_s))
    if load.count:
        return load.count
    return None


@contextmanager
def live_progress(load: LoadSpec, console: Console, enabled: bool = True) -> Iterator[ProgressFn | None]:
    if not enabled or load.processes > 1:  # child processes report at the end only
        yield None
        return
    bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), console=console)
    task = bar.add_task(load.target_label, total=expected_requests(load))
    state = {"t": 0.0, "done": 0, "err": 0, "inflight": 0, "start": time.monotonic()}

    def table() -> Table:
        t = Table(show_header=True, box=None)
        for col in ("finished", "errors", "in flight", "req/s"):
            t.add_column(col, justify="right")
        el = max(1e-9, time.monotonic() - state["start"])
        t.add_row(str(state["done"]), str(state["err"]), str(state["inflight"]), f"{state['done'] / el:.1f}")
        return t

    with Live(Group(bar, table()), console=console, refresh_per_second=8, transient=True) as live:
        def cb(done: int, errors: int, in_flight: int) -> None:
            state.update(done=done, err=errors, inflight=in_flight)
            now = time.monotonic()
            if now - state["t"] >= 0.125:
                state["t"] = now
                bar.update(task, completed=done)
                live.update(Group(bar, table()))

        yield cb
