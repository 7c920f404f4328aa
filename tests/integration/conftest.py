"""Fixtures for integration tests that run the real local stack on loopback."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stack.launcher import LocalStack
from stack.procs import ENV_PORT_BLOCK
from testsupport.stack import local_stack

# pytest-xdist workers pick ports from disjoint blocks (stack/procs.py): a port one test reserved
# for a process it starts later is never handed to the test running beside it.
if (_xdist := os.environ.get("PYTEST_XDIST_WORKER", "")).startswith("gw"):
    os.environ.setdefault(ENV_PORT_BLOCK, f"{_xdist[2:]}/{os.environ.get('PYTEST_XDIST_WORKER_COUNT', '1')}")

# Tests whose verdict depends on the client keeping its schedule (the bench marks a run invalid when
# its own event loop lags; accuracy and schedule-lag bounds): `make test` runs them alone, after the
# rest of the integration suite has run two files at a time (pytest-xdist).
SERIAL = ("tests/integration/bench/", "tests/integration/sim/test_sim_timings_process.py")
# Bench tests that judge refusals and queue checks, not timing: they run beside the others.
NOT_SERIAL = ("tests/integration/bench/test_bench_trusted_target.py",
              "tests/integration/bench/test_bench_queue_checks.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = Path(str(config.rootpath))
    for item in items:
        where = Path(str(item.path)).relative_to(root).as_posix()
        if where.startswith(SERIAL) and not where.startswith(NOT_SERIAL):
            item.add_marker(pytest.mark.serial)


@pytest.fixture
def make_stack(tmp_path: Path) -> Iterator:
    """Builds stacks; afterwards brings each down and checks nothing of it is left running."""
    made: list[LocalStack] = []

    def make(**overrides: Any) -> LocalStack:
        stack = local_stack(tmp_path / f"state{len(made)}", **overrides)
        made.append(stack)
        return stack

    yield make
    for stack in made:
        stack.down()
        assert stack.processes() == [], "processes left behind"
