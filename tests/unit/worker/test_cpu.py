"""worker/cpu.py: the CPU budget from affinity and cgroup quotas, local pinning, render pool size."""

from __future__ import annotations

from pathlib import Path

import pytest

from worker.cpu import CpuBudget, cgroup_quota_cpus, cpu_budget, local_cpu_set, pin_local_worker, size_render_pool


def test_cgroup_v2_quota(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert cgroup_quota_cpus(tmp_path) == (1.5, "cgroup-v2")


def test_cgroup_v2_unlimited(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_quota_cpus(tmp_path) is None


def test_cgroup_v1_quota(tmp_path: Path) -> None:
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("50000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_quota_cpus(tmp_path) == (0.5, "cgroup-v1")
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert cgroup_quota_cpus(tmp_path) is None


def test_budget_is_the_smaller_of_affinity_and_quota(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("200000 100000\n")
    assert cpu_budget(lambda: {0, 1, 2, 3}, tmp_path) == CpuBudget(2.0, "cgroup-v2")
    assert cpu_budget(lambda: {3}, tmp_path) == CpuBudget(1.0, "affinity")
    assert cpu_budget(lambda: {0, 1}, tmp_path / "none") == CpuBudget(2.0, "affinity")


@pytest.mark.parametrize(("cpus", "procs"), [(0.5, 1), (1.0, 1), (1.99, 1), (2.0, 2), (6.5, 6)])
def test_render_processes_are_whole_cpus(cpus: float, procs: int) -> None:
    assert CpuBudget(cpus, "x").render_processes == procs


def test_local_cpu_sets_round_robin() -> None:
    host = [0, 1, 2, 3]
    assert [local_cpu_set(i, 1000, host) for i in range(5)] == [{0}, {1}, {2}, {3}, {0}]
    assert [local_cpu_set(i, 1500, host) for i in range(3)] == [{0, 1}, {2, 3}, {0, 1}]
    assert local_cpu_set(0, 4000, host) is None  # the limit covers the host: no pinning
    assert local_cpu_set(1, 8000, [5, 7]) is None


def test_pin_sets_every_thread(monkeypatch) -> None:
    calls: list[tuple[int, set[int]]] = []
    monkeypatch.setattr("worker.cpu.os.sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr("worker.cpu._threads", lambda: [101, 102])
    assert pin_local_worker(1, 1000, setaffinity=lambda tid, cpus: calls.append((tid, cpus))) == {1}
    assert calls == [(101, {1}), (102, {1})]
    calls.clear()
    assert pin_local_worker(1, 2000, setaffinity=lambda tid, cpus: calls.append((tid, cpus))) is None
    assert calls == []


def test_size_render_pool_sets_or_respects_the_operator() -> None:
    env: dict[str, str] = {}
    assert size_render_pool(CpuBudget(3.0, "affinity"), env) == 3
    assert env == {"MINERU_PDF_RENDER_THREADS": "3"}
    env = {"MINERU_PDF_RENDER_THREADS": "2"}
    assert size_render_pool(CpuBudget(1.0, "affinity"), env) == 2
    with pytest.raises(ValueError, match="MINERU_PDF_RENDER_THREADS='two' is not a whole number"):
        size_render_pool(CpuBudget(1.0, "affinity"), {"MINERU_PDF_RENDER_THREADS": "two"})
