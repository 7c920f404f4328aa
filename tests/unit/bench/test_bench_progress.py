"""Progress lines: what they say, the interval setting, and the plain-line thread (no terminal)."""

from __future__ import annotations

import io
import time

import pytest
from rich.console import Console

from bench.load import LoadSpec
from bench.progress import Plan, ProgressSettingError, _State, every_s, plan_for, run_progress, status_line


def test_status_line_has_counts_rate_and_eta():
    line = status_line(Plan("x", 600, 30.0), _State(120, 1, 4), 6.0)
    assert line == "120/600 req (20 %) · 20.0 req/s · 1 errors · 4 in flight · 6 s elapsed · ETA 24 s"
    assert status_line(Plan("x", 100), _State(20, 0, 2), 10.0).endswith("ETA 40 s")  # count left at the rate so far
    assert "in flight" not in status_line(Plan("x", None, 30.0), _State(20, 0, -1), 10.0)
    assert status_line(Plan("x"), _State(), 0.0).endswith("ETA unknown")
    # the first records of a Locust run arrive at once: no rate over a fraction of a second
    assert "— req/s" in status_line(Plan("x", 120), _State(10, 0, -1, load_s=0.001), 2.0)
    assert status_line(Plan("x", None, 125.0), _State(), 5.0, counts=False).endswith("ETA 2 min 00 s")


def test_plan_of_an_open_loop_run():
    p = plan_for(LoadSpec(arrival="constant", rate_rps=5, duration_s=20, warmup_s=2, cooldown_s=2))
    assert (p.total, p.planned_s) == (120, 24.0)


def test_interval_from_flag_env_or_default():
    assert every_s(None, {}) == 10.0
    assert every_s(None, {"BENCH_PROGRESS_EVERY": "30"}) == 30.0
    assert every_s(2.5, {"BENCH_PROGRESS_EVERY": "30"}) == 2.5
    with pytest.raises(ProgressSettingError, match=r"\$BENCH_PROGRESS_EVERY='often': not a number of seconds"):
        every_s(None, {"BENCH_PROGRESS_EVERY": "often"})
    with pytest.raises(ProgressSettingError, match="--progress-every-s -1: must be >= 0"):
        every_s(-1.0)


def test_plain_lines_every_interval_without_a_terminal():
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=False, width=200)
    with run_progress(Plan("run", 100, None), console, 0.2) as cb:
        cb(10, 1, 3)
        time.sleep(0.7)
    lines = [ln for ln in buf.getvalue().splitlines() if ln]
    assert len(lines) >= 2 and all(ln.startswith("[run] 10/100 req (10 %)") for ln in lines), lines
    assert "1 errors · 3 in flight" in lines[0] and "ETA" in lines[0]
