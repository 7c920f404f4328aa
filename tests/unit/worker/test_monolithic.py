"""Monolithic mode's worker settings and the in-process engine's preflight (no engine loads)."""

from __future__ import annotations

import pytest

from contract.enums import InProcessBackend
from contract.spec_loader import SpecError, load_stack
from worker.config import ConfigError, settings_from_env
from worker.inprocess import EngineUnavailable, missing_requirements, preflight, resolve_model_path


def test_in_process_worker_needs_no_server_url_or_key() -> None:
    spec = load_stack("local", overrides={"deployment_mode": "monolithic"})
    s = settings_from_env(spec, 0, env={})  # no SPLITSTACK_API_KEY, no server URL
    assert s.in_process is InProcessBackend.vllm_engine
    assert s.server_url == "" and s.api_key is None
    assert s.model_path == "tiny"  # the worker server's model.source
    assert s.mode == "monolithic/vlm-vllm-engine"


def test_private_server_twin_talks_http_to_its_own_engine() -> None:
    spec = load_stack("local", overrides={"deployment_mode": "monolithic",
                                          "worker_pool.in_process.backend": "private-server"})
    s = settings_from_env(spec, 1, env={"SPLITSTACK_SERVER_URL": "http://127.0.0.1:1234",
                                        "SPLITSTACK_API_KEY": "k"})
    assert s.in_process is None and s.server_url == "http://127.0.0.1:1234"
    assert s.mode == "monolithic/private-server"


def test_split_mode_is_unchanged() -> None:
    s = settings_from_env(load_stack("local"), 0, env={"SPLITSTACK_API_KEY": "k"})
    assert s.in_process is None and s.mode == "split" and s.server_url.startswith("http://")


def test_model_path_that_is_a_folder_must_hold_a_model(tmp_path) -> None:
    with pytest.raises(EngineUnavailable, match="not a model folder"):
        resolve_model_path(str(tmp_path), "tiny", {})
    (tmp_path / "config.json").write_text("{}")
    assert resolve_model_path(str(tmp_path), "tiny", {}) == str(tmp_path)
    assert resolve_model_path(None, "org/model", {"SPLITSTACK_MODEL_SOURCE": "org/pod"}) == "org/pod"


def test_kubernetes_refuses_the_local_twin() -> None:
    with pytest.raises(SpecError, match="in_process.backend"):
        load_stack("dev", overrides={"deployment_mode": "monolithic", "gpu_node_pool.node_count": 2,
                                     "worker_pool.in_process.backend": "private-server"})


def test_page_vlm_has_no_in_process_engine() -> None:
    with pytest.raises(SpecError, match="worker_pool.backend"):
        load_stack("local", overrides={"deployment_mode": "monolithic", "worker_pool.backend": "page-vlm"})


def test_preflight_names_what_the_backend_lacks(monkeypatch) -> None:
    import worker.inprocess as ip

    monkeypatch.setattr(ip, "_version", lambda dist: None)
    monkeypatch.setattr(ip, "_importable", lambda module: "not installed")
    problems = missing_requirements(InProcessBackend.transformers)
    assert any("transformers is not installed" in p for p in problems)
    assert any("torch does not import" in p for p in problems)
    with pytest.raises(EngineUnavailable, match=r"worker_pool.in_process.backend='vlm-transformers'"):
        preflight(InProcessBackend.transformers)
    assert missing_requirements(InProcessBackend.vllm_engine) == ["vllm does not import (not installed)"]


def test_preflight_checks_this_machine_for_real() -> None:
    # the dev environment has transformers and torch (the vllm extra) and no GPU: the real checks,
    # nothing mocked, pass the transformers engine and name the missing GPU for vLLM's
    assert missing_requirements(InProcessBackend.transformers) == []
    preflight(InProcessBackend.transformers)
    [gpu] = missing_requirements(InProcessBackend.vllm_engine)
    assert "no CUDA GPU is visible" in gpu
    with pytest.raises(EngineUnavailable, match="no CUDA GPU"):
        preflight(InProcessBackend.vllm_engine)


def test_config_error_wraps_a_bad_model_folder(tmp_path) -> None:
    spec = load_stack("local", overrides={"deployment_mode": "monolithic",
                                          "worker_pool.in_process.model_path": str(tmp_path)})
    with pytest.raises(ConfigError, match="not a model folder"):
        settings_from_env(spec, 0, env={})
