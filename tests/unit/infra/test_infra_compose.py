"""The single-host Compose file: valid against the Compose specification schema, GPUs assigned
by device id, secrets by host-variable reference, and a Prometheus config promtool accepts."""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
import subprocess

import pytest
import yaml

from contract.spec_loader import load_stack, parse_spec
from infra.compose import (
    SCHEMA,
    ComposeError,
    assign_gpus,
    compose_document,
    validate_compose,
    write_compose,
)

from .infra_helpers import ROOT, make_raw

SCHEMA_SHA256 = "0dc04bd346dcfee1b1419628fff79937bbf076925f298f272a2b490e2b112bac"


def test_vendored_schema_is_the_cited_file():
    assert hashlib.sha256(SCHEMA.read_bytes()).hexdigest() == SCHEMA_SHA256


def test_dev_compose_is_valid_and_hardened():
    doc = compose_document(load_stack("dev"))
    assert validate_compose(doc) == []
    server = doc["services"]["mineru-vlm"]
    assert server["image"] == "ghcr.io/splitstack/inference-server:v0.32.0"
    # as MinerU's own server starts vLLM; the inference-server image carries mineru_vl_utils
    args = server["command"]
    assert args[args.index("--logits-processors") + 1] == "mineru_vl_utils:MinerULogitsProcessor"
    assert server["shm_size"] == "2gb"
    assert server["ulimits"] == {"memlock": -1, "stack": 67108864}
    assert server["healthcheck"]["start_period"] == "600s"
    assert server["deploy"]["resources"]["reservations"]["devices"] == [
        {"driver": "nvidia", "device_ids": ["0"], "capabilities": ["gpu"]}]
    assert server["environment"]["VLLM_API_KEY"].startswith("${SPLITSTACK_API_KEY:?")
    worker = doc["services"]["worker"]
    assert "deploy" in worker and "devices" not in str(worker["deploy"])
    assert worker["depends_on"]["mineru-vlm"] == {"condition": "service_healthy"}
    assert worker["environment"]["SPLITSTACK_SERVER_URL"] == "http://mineru-vlm:8000"
    assert worker["environment"]["SPLITSTACK_API_KEY"].startswith("${SPLITSTACK_API_KEY:?")
    # Redis asks for a password; Prometheus has neither the lifecycle (/-/quit) nor the admin API.
    assert "--requirepass" in doc["services"]["redis"]["command"]
    flags = " ".join(doc["services"]["prometheus"]["command"])
    assert "enable-lifecycle" not in flags and "enable-admin-api" not in flags


def test_schema_catches_a_misspelt_key():
    doc = copy.deepcopy(compose_document(load_stack("dev")))
    doc["services"]["worker"]["shm_sise"] = "1g"
    (problem,) = validate_compose(doc)
    assert "services.worker" in problem and "shm_sise" in problem


def test_sim_engine_runs_the_simulator_image():
    raw = make_raw("existing", "split")
    raw["inference_servers"][0]["engine"] = "sim"
    server = compose_document(parse_spec(raw))["services"]["mineru-vlm"]
    assert server["image"] == "ghcr.io/splitstack/simulator:0.1.0"
    assert server["command"][:4] == ["python", "-m", "splitstack.cli.sim", "serve"]
    assert validate_compose(compose_document(parse_spec(raw))) == []


def test_two_servers_get_distinct_gpus():
    raw = make_raw("existing", "split")
    raw["gpu_node_pool"].update(gpus_per_node=2, node_count=1)
    second = copy.deepcopy(raw["inference_servers"][0])
    second["name"] = second["model"]["name"] = "vlm-b"
    raw["inference_servers"].append(second)
    assert assign_gpus(parse_spec(raw)) == {"mineru-vlm": [0], "vlm-b": [1]}


def test_monolithic_workers_share_sliced_gpu():
    raw = make_raw("existing", "monolithic")
    raw["gpu_node_pool"].update(gpus_per_node=1, node_count=1, gpu_sharing="mps", slices_per_gpu=2)
    raw["worker_pool"].update(replicas=2, max_replicas=None)
    raw["inference_servers"][0]["gpu_memory_utilization"] = 0.45
    doc = compose_document(parse_spec(raw))
    assert validate_compose(doc) == []
    assert set(doc["services"]) == {"redis", "worker-0", "worker-1", "prometheus", "alertmanager"}
    for name in ("worker-0", "worker-1"):
        devices = doc["services"][name]["deploy"]["resources"]["reservations"]["devices"]
        assert devices[0]["device_ids"] == ["0"]


def test_prod_does_not_fit_one_host():
    with pytest.raises(ComposeError, match=r"1 GPUs on one host cannot hold mineru-vlm \(1\), "
                                           r"qwen-vl \(1\)"):
        compose_document(load_stack("prod"))


def test_server_replicas_are_refused():
    raw = make_raw("existing", "split")
    raw["inference_servers"][0]["replicas"] = 2
    with pytest.raises(ComposeError, match=r"inference_servers\[0\]\.replicas: 2"):
        compose_document(parse_spec(raw))


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian prometheus) missing")
def test_written_prometheus_config_passes_promtool(tmp_path):
    files = write_compose(load_stack("dev"), ROOT, tmp_path / "compose.yaml")
    prom = tmp_path / "prometheus"
    config = yaml.safe_load((prom / "prometheus.yml").read_text())
    # the jobs the rules select on, and Prometheus itself (its own alerts read its metrics)
    assert {j["job_name"] for j in config["scrape_configs"]} == {"inference-server", "workers", "prometheus"}
    assert config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == ["alertmanager:9093"]
    assert len(config["rule_files"]) == len(list((prom / "rules").iterdir())) > 0
    am = tmp_path / "alertmanager" / "alertmanager.yml"
    assert am in files
    checked = subprocess.run(["amtool", "check-config", str(am)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # Point the container paths at the written files, then let the real promtool judge.
    config["rule_files"] = [f.replace("/etc/prometheus", str(prom)) for f in config["rule_files"]]
    local = tmp_path / "prometheus-local.yml"
    local.write_text(yaml.safe_dump(config))
    out = subprocess.run(["promtool", "check", "config", str(local)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert files[0] == tmp_path / "compose.yaml"
    assert (tmp_path / "compose.yaml").read_text().startswith("# generated by")


def test_compose_workers_read_the_resolved_spec_written_beside(tmp_path):
    from contract.spec_loader import parse_spec as reparse
    from infra.compose import WORKER_SPEC_FILE

    spec = load_stack("dev")
    write_compose(spec, ROOT, tmp_path / "compose.yaml")
    worker = yaml.safe_load((tmp_path / "compose.yaml").read_text())["services"]["worker"]
    assert worker["command"] == ["python", "-m", "splitstack.cli.worker_process", "--stack", "dev"]
    mount = next(v for v in worker["volumes"] if v.startswith(f"./{WORKER_SPEC_FILE}:"))
    assert worker["environment"]["SPLITSTACK_SPEC_FILE"] == mount.split(":")[1]
    written = json.loads((tmp_path / WORKER_SPEC_FILE).read_text())
    assert reparse(written) == spec
