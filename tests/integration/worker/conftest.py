"""Real Redis, the simulator and worker processes on loopback (see testsupport/worker.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from testsupport.worker import Harness

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fixtures" / "pdfs"))


@pytest.fixture
def make_harness(tmp_path: Path) -> Iterator:
    made: list[Harness] = []

    def make(**overrides) -> Harness:
        h = Harness(tmp_path / f"h{len(made)}", overrides=overrides)
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()
        leftovers = [p.name for p in h.procs if p.alive()]
        assert not leftovers, f"processes left running: {leftovers}"
