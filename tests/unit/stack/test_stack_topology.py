"""The local stack's topology per deployment_mode (stack/topology.py): no process starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from contract.prometheus_jobs import JOB_SERVER
from contract.spec import DeploymentMode
from contract.spec_loader import SpecError, load_stack
from stack.component import BuildContext, SetupError
from stack.paths import StackPaths
from stack.prometheus_config import prometheus_config
from stack.topology import mode_overrides, private_engine_components, shared_servers, worker_engine_url
from testsupport.stack import ROOT

MONO = {"inference_servers.0.engine": "sim", "worker_pool.replicas": 3,
        **mode_overrides(DeploymentMode.monolithic)}


def _ctx(spec, tmp_path: Path) -> BuildContext:
    return BuildContext(spec, StackPaths.at(str(tmp_path), ROOT), ROOT, None)


def test_split_workers_share_the_server() -> None:
    spec = load_stack("local", ROOT, overrides={"inference_servers.0.engine": "sim",
                                                "worker_pool.replicas": 2})
    assert worker_engine_url(spec, 0) == worker_engine_url(spec, 1) == "http://127.0.0.1:18000"
    assert [s.name for s in shared_servers(spec)] == ["vlm"]


def test_monolithic_gives_each_worker_its_own_engine(tmp_path: Path) -> None:
    spec = load_stack("local", ROOT, overrides=MONO)
    assert [worker_engine_url(spec, i) for i in range(3)] == [
        f"http://127.0.0.1:{18100 + i}" for i in range(3)]
    assert shared_servers(spec) == []
    engines = private_engine_components(_ctx(spec, tmp_path))
    assert [(c.name, c.role, c.port) for c in engines] == [
        ("engine-w0", "engine", 18100), ("engine-w1", "engine", 18101), ("engine-w2", "engine", 18102)]
    argv = engines[1].argv
    assert argv[argv.index("--profile") + 1] == spec.worker_server.sim_profile  # the server's profile
    jobs = {j["job_name"]: j for j in prometheus_config(spec, [])["scrape_configs"]}
    targets = [t["targets"][0] for t in jobs[JOB_SERVER]["static_configs"]]
    assert targets == [f"127.0.0.1:{18100 + i}" for i in range(3)]  # no shared server to scrape


def test_monolithic_twin_needs_the_simulator(tmp_path: Path) -> None:
    spec = load_stack("local", ROOT, overrides={**MONO, "inference_servers.0.engine": "vllm",
                                                "inference_servers.0.model.vision": True})
    with pytest.raises(SetupError, match="start with --engine sim"):
        private_engine_components(_ctx(spec, tmp_path))


def test_private_engine_ports_must_not_collide() -> None:
    with pytest.raises(SpecError, match="local.private_engine_port"):
        load_stack("local", ROOT, overrides={**MONO, "local.private_engine_port": 18000})
