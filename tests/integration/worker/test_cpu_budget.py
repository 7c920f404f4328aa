"""CPU budget: a local worker whose spec limit is below the host's CPUs is pinned like a pod
with that limit, and MinerU's render pool (child processes) is sized to it and stays inside it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import psutil
import pytest
from pdf_fixtures import make_pdf

pytestmark = pytest.mark.integration


def _budget_line(log: str) -> dict:
    for line in log.splitlines():
        if line.startswith("{") and '"cpu budget"' in line:
            return json.loads(line)
    raise AssertionError(f"no 'cpu budget' log line in:\n{log[-2000:]}")


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs at least 2 CPUs to pin one")
def test_one_cpu_limit_pins_each_replica_and_its_render_pool(make_harness, tmp_path: Path) -> None:
    h = make_harness(**{"worker_pool.cpu_millicores": 1000, "worker_pool.cpu_limit_millicores": 1000})
    h.start_redis()
    h.start_sim()
    workers = [h.start_worker(), h.start_worker()]
    ids = h.submit([make_pdf(tmp_path / f"d{i}.pdf", 3, seed=i) for i in range(4)])
    assert {r["state"] for r in h.wait_terminal(ids, 120).values()} == {"done"}
    host = sorted(os.sched_getaffinity(0))
    for i, w in enumerate(workers):
        line = _budget_line(w.log())
        assert line["pinned_to"] == [host[i % len(host)]], line
        assert line["cpus"] == 1 and line["render_processes"] == 1, line
        proc = psutil.Process(w.popen.pid)
        kids = proc.children(recursive=True)
        assert kids, "MinerU's render pool should have started child processes"
        for p in [proc, *kids]:
            assert p.cpu_affinity() == [host[i % len(host)]], (p.pid, p.cmdline()[:3])
        assert len(kids) <= 2  # 1 render process (+ the spawn resource tracker)


def test_no_pinning_when_the_limit_covers_the_host(make_harness, tmp_path: Path) -> None:
    h = make_harness()  # default limit 4000 mCPU
    h.start_redis()
    h.start_sim()
    w = h.start_worker()
    line = _budget_line(w.log())
    assert line["pinned_to"] is None
    assert line["cpus"] == len(os.sched_getaffinity(0))
    assert psutil.Process(w.popen.pid).cpu_affinity() == sorted(os.sched_getaffinity(0))
