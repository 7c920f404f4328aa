"""At 80 columns nothing essential wraps: a job id, a path or a URL stays on one line, whole,
so it can be copied; the escaping of names still holds in the narrow layout."""

from __future__ import annotations

import io

from splitstack.cli import worker as worker_cli
from splitstack.cli.terminal import SafeConsole

JOB = "0f8e2c1a9b7d4e6f8a1b2c3d4e5f6a7b"
OUT = "/home/someone/projects/splitstack/.state/local/data/outputs/" + JOB
SRC = "/home/someone/projects/splitstack/inputs/annual-report-2025-final.pdf"
REASON = ("path_not_allowed: /srv/elsewhere/x.pdf is outside worker_pool.input_roots; add its folder "
          "to worker_pool.input_roots")


def _jobs_at(width: int) -> list[str]:
    buf = io.StringIO()
    worker_cli.console = SafeConsole(file=buf, width=width, force_terminal=False)
    worker_cli._table([  # noqa: SLF001
        {"job_id": JOB, "state": "done", "pages": 12, "processing_s": 3.2, "source": SRC, "output": OUT},
        {"job_id": JOB[::-1], "state": "dead_lettered", "reason": REASON},
        {"job_id": "j3", "state": "fanned_out", "parts_total": 4, "parts_done": 1, "source": SRC},
    ])
    return buf.getvalue().splitlines()


def test_jobs_at_80_columns_keep_ids_paths_and_reasons_on_one_line(monkeypatch) -> None:
    monkeypatch.setattr(worker_cli, "console", worker_cli.console)  # restored after the test
    lines = _jobs_at(80)
    for whole in (JOB, OUT, SRC, REASON, JOB[::-1]):
        assert any(whole in line for line in lines), (whole, lines)
    assert any(line.startswith(f"{JOB}  done pages 12") for line in lines), lines
    assert any("parts 1/4" in line for line in lines), lines


def test_jobs_on_a_wide_terminal_are_still_a_table(monkeypatch) -> None:
    monkeypatch.setattr(worker_cli, "console", worker_cli.console)
    lines = _jobs_at(250)
    assert any("source / reason" in line for line in lines), lines
    assert any(JOB in line for line in lines), lines
