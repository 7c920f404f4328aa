"""A real worker process in deployment_mode monolithic: on this machine MinerU's in-process
engines cannot load (vlm-transformers needs transformers<5, accelerate and torchvision; vLLM's
engine needs a GPU), and the worker says so and exits 2 before it opens a port or touches the
queue, naming the setting to change. The private-server twin is exercised end to end by the
rollback drill (tests/integration/runbooks/test_rollback_drill.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from testsupport.stack import ROOT

pytestmark = pytest.mark.integration


def test_in_process_transformers_worker_exits_naming_what_is_missing(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPLITSTACK_")}
    env["PYTHONPATH"] = os.environ.get("PYTHONPATH", str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-m", "splitstack.cli.worker_process", "--stack", "local",
         "--set", "deployment_mode=monolithic", "--set", "worker_pool.in_process.backend=vlm-transformers",
         "--set", f"local.state_dir={tmp_path}", "--set", "queue.port=1"],  # nothing listens on 1
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    message = proc.stderr.strip().splitlines()[-1]
    assert message.startswith("worker: deployment_mode monolithic: "
                              "worker_pool.in_process.backend='vlm-transformers' cannot load here")
    assert "Traceback" not in proc.stderr and "Fix: " in message, message
