"""Fixtures for integration tests that run the real local stack on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stack.launcher import LocalStack
from testsupport.stack import local_stack


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
