"""The deployment spec: stacks load, defaults live once, bad input names the field and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from contract.spec import DeploymentMode, Engine, Spec, Target
from contract.spec_loader import SpecError, load_file, load_stack, parse_spec, project_root
from contract.spec_schema import SCHEMA_PATH, render_schema

FIXTURES = Path(__file__).parent.parent / "fixtures" / "specs"
ROOT = project_root(Path(__file__))


def problems_of(name: str) -> list[str]:
    with pytest.raises(SpecError) as info:
        load_file(FIXTURES / name, "fixture")
    return info.value.problems


@pytest.mark.parametrize("stack", ["local", "dev", "prod"])
def test_shipped_stacks_load(stack: str) -> None:
    spec = load_stack(stack, ROOT)
    assert spec.stack == stack


def test_prod_matches_the_design_documents() -> None:
    spec = load_stack("prod", ROOT)
    assert spec.target is Target.kubernetes
    assert spec.deployment_mode is DeploymentMode.split
    assert spec.worker_pool.replicas == 8
    models = {s.model.source for s in spec.inference_servers}
    assert models == {"opendatalab/MinerU2.5-2509-1.2B", "Qwen/Qwen2.5-VL-7B-Instruct"}
    qwen = spec.server("qwen-vl")
    assert qwen.gpu_memory_utilization == 0.92 and qwen.max_model_len == 32768
    assert spec.worker_server.name == "mineru-vlm"
    assert all(s.image_tag != "latest" for s in spec.inference_servers)


def test_local_stack_is_loopback_with_real_vllm() -> None:
    spec = load_stack("local", ROOT)
    assert spec.local.host == "127.0.0.1"
    assert spec.worker_server.engine is Engine.vllm
    assert spec.worker_server.api_key is not None


def test_defaults_live_in_the_model_not_the_stack_file() -> None:
    spec = load_file(FIXTURES / "good_minimal.yaml", "fixture")
    assert spec.queue.stream == Spec.model_fields["queue"].default_factory().stream
    assert spec.worker_pool.circuit_breaker.failure_threshold == 5
    assert spec.inference_servers[0].image_tag.startswith("v")


def test_overrides_apply_before_validation() -> None:
    spec = load_stack(
        "local", ROOT, overrides={"inference_servers.0.engine": "sim", "worker_pool.replicas": 3}
    )
    assert spec.worker_server.engine is Engine.sim and spec.worker_pool.replicas == 3


def test_misspelled_key_suggests_the_right_one() -> None:
    [problem] = problems_of("bad_typo.yaml")
    assert problem == "inference_servers[0].max_num_seq: unknown key; did you mean 'max_num_seqs'?"


def test_out_of_range_value_names_path_and_bound() -> None:
    [problem] = problems_of("bad_range.yaml")
    assert problem.startswith("inference_servers[0].gpu_memory_utilization: ")
    assert "less than or equal to 0.98" in problem and "1.5" in problem


def test_oversubscription_names_the_numbers_and_the_fix() -> None:
    [problem] = problems_of("bad_oversubscribed.yaml")
    assert problem == (
        "worker_pool.concurrency_per_worker: 8 workers x 16 in-flight requests = 128 exceeds "
        "2 x the batch slots of server 'vlm' (1 x max_num_seqs 32 = 32); lower "
        "concurrency_per_worker to at most 8, raise max_num_seqs, or raise max_oversubscription"
    )


def test_tensor_parallel_must_fit_one_node() -> None:
    [problem] = problems_of("bad_tensor_parallel.yaml")
    assert problem.startswith(
        "inference_servers[0].tensor_parallel_size: 4 exceeds gpu_node_pool.gpus_per_node=2"
    )


def test_secret_values_are_refused() -> None:
    [problem] = problems_of("bad_secret_value.yaml")
    assert problem.startswith("api_key: holds a Pulumi secret value; splitstack takes secrets by reference only")


def test_missing_stack_lists_known_ones(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.a.yaml").write_text("config: {}\n")
    with pytest.raises(SpecError) as info:
        load_stack("b", tmp_path)
    assert "known stacks: ['a']" in str(info.value)


def test_missing_required_field() -> None:
    with pytest.raises(SpecError) as info:
        parse_spec({"stack": "x", "inference_servers": [{"name": "vlm"}]})
    assert info.value.problems == [
        "inference_servers[0].model: required key is missing; add it (see `splitstack spec schema`)"
    ]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"image_tag": "latest"}, "image tag 'latest' is not pinned"),
        ({"sim_image_tag": "latest"}, "image tag 'latest' is not pinned"),
        ({"image": "vllm/vllm-openai"}, "the official vLLM image has no mineru_vl_utils, so vLLM fails to "
         "start; use splitstack's inference-server image (the default, built by `make images`) or set "
         "logits_processors: []"),
        ({"max_num_seqs": 512, "max_num_batched_tokens": 256},
         "max_num_batched_tokens (256) < max_num_seqs (512): vLLM refuses to start"),
    ],
)
def test_server_rules(change: dict, expected: str) -> None:
    server = {"name": "vlm", "model": {"name": "m", "source": "tiny"}, **change}
    with pytest.raises(SpecError) as info:
        parse_spec({"stack": "x", "target": "local", "inference_servers": [server]})
    assert expected in info.value.problems[0]
    assert info.value.problems[0].startswith("inference_servers[0]")


def test_stock_vllm_image_without_logits_processors_is_allowed() -> None:
    server = {"name": "vlm", "model": {"name": "m", "source": "tiny"}, "image": "docker.io/vllm/vllm-openai",
              "logits_processors": []}
    spec = parse_spec({"stack": "x", "target": "local", "inference_servers": [server]})
    assert spec.inference_servers[0].image == "docker.io/vllm/vllm-openai"


def test_workers_need_a_vision_model_or_the_simulator() -> None:
    raw = {
        "stack": "x", "target": "local",
        "inference_servers": [
            {"name": "vlm", "model": {"name": "tiny", "source": "tiny", "vision": False}}
        ],
        "worker_pool": {"replicas": 1},
    }
    with pytest.raises(SpecError) as info:
        parse_spec(raw)
    assert info.value.problems[0].startswith("worker_pool.server: the workers send page images")
    raw["inference_servers"][0]["engine"] = "sim"
    assert parse_spec(raw).worker_pool.replicas == 1


def test_duplicate_local_ports_are_rejected() -> None:
    raw = {
        "stack": "x", "target": "local",
        "inference_servers": [{"name": "vlm", "port": 9090, "model": {"name": "t", "source": "tiny"}}],
    }
    # prometheus is checked first, so the server is the one blamed
    with pytest.raises(SpecError) as info:
        parse_spec(raw)
    assert info.value.problems[0].startswith(
        "inference_servers[0].port: port 9090 is also used by prometheus"
    )


def test_kubernetes_with_vllm_needs_gpu_nodes() -> None:
    raw = {"stack": "x", "inference_servers": [{"name": "vlm", "model": {"name": "t", "source": "o/m"}}]}
    with pytest.raises(SpecError) as info:
        parse_spec(raw)
    assert info.value.problems[0].startswith("gpu_node_pool: missing: target 'kubernetes'")


def test_monolithic_needs_a_gpu_per_worker() -> None:
    raw = {
        "stack": "x", "deployment_mode": "monolithic",
        "gpu_node_pool": {"cloud": "existing", "instance_type": "x", "accelerator": "nvidia-l4",
                          "gpu_memory_gib": 24, "node_count": 2},
        "inference_servers": [{"name": "vlm", "model": {"name": "t", "source": "o/m", "vision": True}}],
        "worker_pool": {"replicas": 4},
    }
    with pytest.raises(SpecError) as info:
        parse_spec(raw)
    assert info.value.problems[0].startswith(
        "gpu_node_pool.node_count: worker_pool.replicas (monolithic: one GPU per worker) needs 4 GPU slots"
    )


def test_schema_file_is_current() -> None:
    assert SCHEMA_PATH.read_text() == render_schema(), (
        "contract/spec.schema.json is stale: run `splitstack spec schema --write` and commit it"
    )


def test_sim_preset_gives_the_context_of_the_model_it_imitates() -> None:
    from stack.presets import engine_overrides, with_presets

    spec = load_stack("local", ROOT, overrides=engine_overrides("sim"))
    server = spec.worker_server
    assert (server.engine, server.max_model_len, server.model.vision) == (Engine.sim, 16384, True)
    explicit = with_presets({"inference_servers.0.engine": "sim", "inference_servers.0.max_model_len": 8192})
    assert load_stack("local", ROOT, overrides=explicit).worker_server.max_model_len == 8192


@pytest.mark.parametrize("stack", ["local", "dev", "prod"])
def test_every_stack_keeps_the_history_its_slos_read(stack: str) -> None:
    spec = load_stack(stack, ROOT)
    assert spec.observability.retention_h >= 744  # 30-day SLO window + 1 day


def test_a_retention_shorter_than_the_slo_windows_is_refused() -> None:
    with pytest.raises(SpecError) as info:
        load_stack("prod", ROOT, overrides={"observability.retention_h": 24})
    assert info.value.problems == [
        "observability.retention_h: 24 h is shorter than the metrics history the alert rules and "
        "`slo report` read 30-day SLO windows (30 d + 24 h margin = 744 h); set retention_h: 744 or "
        "more, or configure observability.long_term_store_url (then at least 96 h)"]
    spec = load_stack("prod", ROOT, overrides={"observability.retention_h": 96,
                                               "observability.long_term_store_url": "http://thanos:19291/api/v1/receive"})
    assert spec.observability.retention_h == 96
    with pytest.raises(SpecError, match=r"72 h \+ 24 h margin = 96 h\); set retention_h: 96 or more"):
        load_stack("prod", ROOT, overrides={"observability.retention_h": 48,
                                            "observability.long_term_store_url": "http://thanos:19291/api/v1/receive"})


def test_alertmanager_port_is_a_local_port_and_webhooks_must_be_urls() -> None:
    with pytest.raises(SpecError, match=r"observability.alertmanager.port: port 19090 is also used by prometheus"):
        load_stack("local", ROOT, overrides={"observability.alertmanager.port": 19090})
    with pytest.raises(SpecError, match=r"observability.alertmanager.page_webhook_url: .*'pagerduty' is not an "
                                        r"http\(s\) URL"):
        load_stack("prod", ROOT, overrides={"observability.alertmanager.page_webhook_url": "pagerduty"})
