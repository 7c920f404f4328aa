"""The local stack while migrating: the split pool, the monolithic pool with its engines, the
router, every worker on its cohort's stream, and Prometheus labelling each worker's topology."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contract.migration import ENV_COHORT_STREAMS
from contract.spec_loader import load_stack
from contract.worker_env import ENV_SERVER_URL, ENV_SPEC_FILE
from stack.component import BuildContext, SetupError
from stack.migration import with_migration
from stack.paths import StackPaths
from stack.prometheus_config import prometheus_config
from stack.workers import worker_component
from testsupport.stack import ROOT

MIGRATING = {"inference_servers.0.engine": "sim", "worker_pool.replicas": 2,
             "local.migration_monolithic_workers": 1}


def _ctx(spec, tmp_path: Path) -> BuildContext:
    return BuildContext(spec, StackPaths.at(str(tmp_path), ROOT), ROOT, None)


def test_both_pools_and_the_router(tmp_path: Path) -> None:
    spec = load_stack("local", ROOT, overrides=MIGRATING)
    ctx = _ctx(spec, tmp_path)
    out = with_migration(ctx, [worker_component(ctx, i) for i in range(2)])
    by = {c.name: c for c in out}
    assert sorted(by) == ["engine-w0", "mono-worker-0", "router", "worker-0", "worker-1"]
    assert all(c.env[ENV_COHORT_STREAMS] == "1" for n, c in by.items() if "worker" in n)
    mono = by["mono-worker-0"]
    assert mono.port == spec.worker_pool.metrics_port + 2
    assert mono.env[ENV_SERVER_URL] == f"http://127.0.0.1:{spec.local.private_engine_port}"
    assert json.loads(Path(mono.env[ENV_SPEC_FILE]).read_text())["deployment_mode"] == "monolithic"
    assert json.loads(Path(by["worker-0"].env[ENV_SPEC_FILE]).read_text())["deployment_mode"] == "split"
    router = by["router"]
    assert router.argv[1:3] == ["-m", "worker.router"] and router.health.url.endswith(f":{router.port}/healthz")
    assert "--stream" in router.argv and spec.queue.stream in router.argv
    assert router.port == spec.worker_pool.metrics_port + 3
    assert not any("password" in a.lower() and "=" in a for a in router.argv)  # from its secret file only


def test_prometheus_labels_each_worker_with_its_topology() -> None:
    spec = load_stack("local", ROOT, overrides=MIGRATING)
    jobs = {j["job_name"]: j for j in prometheus_config(spec, [])["scrape_configs"]}
    labels = {t["targets"][0]: t["labels"].get("topology") for t in jobs["workers"]["static_configs"]}
    port = spec.worker_pool.metrics_port
    assert labels == {f"127.0.0.1:{port}": "split", f"127.0.0.1:{port + 1}": "split",
                      f"127.0.0.1:{port + 2}": "monolithic"}
    servers = [t["targets"][0] for t in jobs["inference-server"]["static_configs"]]
    assert f"127.0.0.1:{spec.local.private_engine_port}" in servers


def test_not_migrating_changes_nothing_and_monolithic_is_refused(tmp_path: Path) -> None:
    spec = load_stack("local", ROOT, overrides={"inference_servers.0.engine": "sim"})
    ctx = _ctx(spec, tmp_path)
    comps = [worker_component(ctx, 0)]
    assert with_migration(ctx, comps) == comps
    mono = load_stack("local", ROOT, overrides={**MIGRATING, "deployment_mode": "monolithic",
                                                "worker_pool.in_process.backend": "private-server"})
    with pytest.raises(SetupError, match="set deployment_mode split"):
        with_migration(_ctx(mono, tmp_path), [])
