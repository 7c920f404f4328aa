"""A real worker process in deployment_mode monolithic with MinerU's in-process transformers
engine, on the tiny generated Qwen2-VL (localvllm/tinyvlm.py): Redis queue -> worker (the model
loaded in the process, no inference server anywhere) -> output store. And a worker whose
engine cannot load here (vLLM's engine needs a GPU) exits 2 naming the setting."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pdf_fixtures import make_pdf

from localvllm.tinyvlm import ANSWER, ensure_tiny_vlm
from testsupport.stack import ROOT
from testsupport.worker import metric_value

pytestmark = pytest.mark.integration


def test_monolithic_worker_runs_mineru_in_process_on_the_tiny_vlm(make_harness, tmp_path: Path) -> None:
    model = ensure_tiny_vlm(ROOT / ".cache" / "models" / "tiny-vlm")
    h = make_harness(**{"deployment_mode": "monolithic",
                        "worker_pool.in_process.backend": "vlm-transformers",
                        "worker_pool.in_process.model_path": str(model)})
    h.env_extra = {"SPLITSTACK_SERVER_URL": "http://127.0.0.1:1"}  # must not be called: nothing there
    h.start_redis()
    worker = h.start_worker()  # ready only once the engine has loaded
    text = h.metrics(worker)
    assert metric_value(text, "mineru_worker_info", {"mode": "monolithic/vlm-transformers",
                                                     "engine_loaded": "1"}) == 1
    ids = h.submit([make_pdf(tmp_path / f"d{i}.pdf", 1, seed=i) for i in range(2)])
    rows = h.wait_terminal(ids, timeout_s=120)
    assert {r["state"] for r in rows.values()} == {"done"}, (rows, h.dead_letters())
    for job_id in ids:
        out = h.outputs / job_id
        meta = json.loads((out / "metadata.json").read_text())
        assert meta["backend"] == "vlm-transformers", meta
        content = json.loads(next(out.glob("*content_list.json")).read_text())
        # the layout request found the scripted text block; its extraction request answered
        assert content and content[0]["type"] == "text" and "100 100 900 300" in content[0]["text"], content
    assert ANSWER  # the scripted answer the content came from
    assert metric_value(h.metrics(worker), "mineru_pdfs_processed_total") == 2
    assert metric_value(h.metrics(worker), "mineru_vllm_client_requests_total") == 0  # no HTTP


def test_worker_whose_engine_cannot_load_exits_naming_the_setting(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPLITSTACK_")}
    env["PYTHONPATH"] = os.environ.get("PYTHONPATH", str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-m", "splitstack.cli.worker_process", "--stack", "local",
         "--set", "deployment_mode=monolithic", "--set", "worker_pool.in_process.backend=vlm-transformers",
         "--set", f"worker_pool.in_process.model_path={tmp_path}",  # no model there
         "--set", f"local.state_dir={tmp_path}", "--set", "queue.port=1"],  # nothing listens on 1
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    message = proc.stderr.strip().splitlines()[-1]
    assert message == (f"worker: worker_pool.in_process.model_path {str(tmp_path)!r} is not a model "
                       "folder (no config.json); point it at the downloaded model, or at a Hugging "
                       "Face id the pod may download"), message
    assert "Traceback" not in proc.stderr


def test_engine_that_fails_to_load_stops_the_worker_with_the_reason(make_harness, tmp_path: Path) -> None:
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text("{}")  # passes the folder check, fails in transformers
    h = make_harness(**{"deployment_mode": "monolithic",
                        "worker_pool.in_process.backend": "vlm-transformers",
                        "worker_pool.in_process.model_path": str(broken)})
    h.start_redis()
    worker = h.start_worker(wait_ready=False)
    worker.popen.wait(timeout=120)
    assert worker.returncode == 2, worker.log()[-2000:]
    assert ("worker: monolithic/vlm-transformers: the in-process engine did not load: "
            in worker.log()), worker.log()[-2000:]
