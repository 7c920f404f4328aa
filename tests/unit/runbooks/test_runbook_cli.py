"""The `runbook` CLI: capacity-plan, gpu-probe and wait-for-gpu-memory end to end (no GPU here)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from splitstack.cli.runbook import app

runner = CliRunner()


def test_fit_prints_the_plan_and_exit_code() -> None:
    ok = runner.invoke(app, ["capacity-plan", "fit", "--model", "Qwen2.5-VL-7B-Instruct",
                             "--gpu", "rtx-5090", "--gpu-memory-utilization", "0.92",
                             "--max-model-len", "32768"])
    assert ok.exit_code == 0, ok.output
    assert "Qwen2.5-VL-7B-Instruct on 1x nvidia-rtx-5090: FITS" in ok.output
    no = runner.invoke(app, ["capacity-plan", "fit", "--model", "Qwen2.5-VL-7B-Instruct",
                             "--gpu", "rtx-4090", "--max-model-len", "65536"])
    assert no.exit_code == 1 and "DOES NOT FIT" in no.output
    assert "lower max_model_len to at most" in no.output


def test_fit_json_and_model_config(tmp_path) -> None:
    cfg = tmp_path / "Qwen3-4B" / "config.json"
    cfg.parent.mkdir()
    cfg.write_text(json.dumps({
        "model_type": "qwen3", "head_dim": 128, "hidden_size": 2560, "intermediate_size": 9728,
        "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
        "vocab_size": 151936, "tie_word_embeddings": True, "max_position_embeddings": 40960,
        "torch_dtype": "bfloat16"}))
    args = ["--gpu", "nvidia-a100-80gb", "--max-model-len", "16384", "--output", "json"]
    from_file = runner.invoke(app, ["capacity-plan", "fit", "--model-config", str(cfg), *args])
    from_catalog = runner.invoke(app, ["capacity-plan", "fit", "--model", "Qwen3-4B", *args])
    assert from_file.exit_code == from_catalog.exit_code == 0, from_file.output
    a, b = json.loads(from_file.output), json.loads(from_catalog.output)
    assert a["model"] == "Qwen3-4B"
    assert a["kv_capacity_tokens"] == b["kv_capacity_tokens"] > 16384
    assert a["kv_bytes_per_token"] == 147456


def test_fit_bad_input_exits_2_with_the_fix() -> None:
    r = runner.invoke(app, ["capacity-plan", "fit", "--model", "Qwen3-4B", "--gpu", "tpu"])
    assert r.exit_code == 2
    assert "unknown gpu 'tpu'" in r.output
    r = runner.invoke(app, ["capacity-plan", "fit", "--gpu", "h100"])
    assert r.exit_code == 2 and "give --model NAME" in r.output


def test_matrix_lists_every_catalog_pair() -> None:
    r = runner.invoke(app, ["capacity-plan", "matrix"])
    assert r.exit_code == 0
    assert "| MinerU2.5-2509-1.2B |" in r.output and "nvidia-h200-141gb" in r.output


def test_forecast_from_the_manual_and_from_a_bench(tmp_path) -> None:
    r = runner.invoke(app, ["capacity-plan", "forecast", "--first-quarter", "Q1 2025"])
    assert r.exit_code == 0
    assert "| Q4 2025 | 2,074 | 138 | 2 | 19 | 142 | $1,950 |" in r.output
    bench = tmp_path / "summary.json"
    bench.write_text(json.dumps({"summary": {"pdfs_per_hour": 40.0}}))
    r = runner.invoke(app, ["capacity-plan", "forecast", "--bench-summary", str(bench),
                            "--output", "json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["inputs"]["per_server_pdfs_per_hour"] == 40.0
    assert [q["servers"] for q in data["quarters"]] == [2, 3, 3, 4]
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    r = runner.invoke(app, ["capacity-plan", "forecast", "--bench-summary", str(bad)])
    assert r.exit_code == 2 and "no completed documents" in r.output


def test_gpu_probe_on_this_machine(tmp_path) -> None:
    prom = tmp_path / "gpu.prom"
    r = runner.invoke(app, ["gpu-probe", "--textfile", str(prom)])
    assert r.exit_code == 0
    assert r.output.startswith("no GPU: the NVML library (libnvidia-ml.so.1)")
    assert "splitstack_gpu_probe_up 0.0" in prom.read_text()
    assert runner.invoke(app, ["gpu-probe", "--require-gpu"]).exit_code == 1
    log = tmp_path / "dmesg.txt"
    log.write_text("NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has "
                   "fallen off the bus.\n")
    r = runner.invoke(app, ["gpu-probe", "--output", "json", "--kernel-log", str(log)])
    data = json.loads(r.output)
    assert data["available"] is False and data["kernel_log_xids"][0]["xid"] == 79


def test_wait_for_gpu_memory_without_gpu() -> None:
    r = runner.invoke(app, ["wait-for-gpu-memory", "--min-free-mib", "1024", "--timeout-s", "1"])
    assert r.exit_code == 2 and r.output.startswith("no-gpu: no GPU:")
    r = runner.invoke(app, ["wait-for-gpu-memory", "--min-free-mib", "0"])
    assert r.exit_code == 2 and "min_free_mib 0 must be > 0 MiB" in r.output
