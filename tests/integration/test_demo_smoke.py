"""The demo's "Prometheus scraped it" check reads a sample this run created, not an earlier
stack's series kept in the same state folder."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.demo import smoke
from testsupport.stack import local_stack

pytestmark = pytest.mark.integration


def test_smoke_reads_this_runs_series_not_an_earlier_stacks(tmp_path: Path) -> None:
    said: list[list[str]] = [[], []]
    overrides = {"inference_servers.0.engine": "sim", "worker_pool.replicas": 0}
    first = local_stack(tmp_path / "state", **overrides)
    for run in (0, 1):
        # the same state folder (and so the same Prometheus TSDB) and ports both times
        stack = first if run == 0 else local_stack(tmp_path / "state", **{
            **overrides, "queue.port": first.spec.queue.port,
            "observability.prometheus_port": first.spec.observability.prometheus_port,
            "observability.alertmanager.port": first.spec.observability.alertmanager.port,
            "inference_servers.0.port": first.spec.worker_server.port})
        try:
            state = stack.up()
            smoke(stack, state, said[run].append)
            if run == 0:
                smoke(stack, state, said[run].append)  # the first stack's counter reaches 2
        finally:
            stack.down()
        assert stack.processes() == []
    values = [[float(m.group(1)) for line in lines if (m := re.search(r"^Prometheus scraped .* = ([0-9.]+)", line))]
              for lines in said]
    assert max(values[0]) == 2, said[0]
    # the second stack's server answered one request: its series says 1, never the first's 2
    assert values[1] and set(values[1]) == {1}, said[1]
