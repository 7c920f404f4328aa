"""`splitstack up --engine sim --workers 2`: workers start healthy, Prometheus scrapes them, and
`splitstack submit` / `splitstack jobs` drive them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pdf_fixtures import make_pdf

from bench.demo import wait_for_series
from stack.secrets import queue_url
from testsupport.stack import ROOT, input_roots_override, local_stack

pytestmark = pytest.mark.integration


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "splitstack.cli.main", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=180)


def test_stack_runs_workers_scraped_by_prometheus(tmp_path: Path) -> None:
    # The simulator's preset (stack/presets.py) gives 16k context; 8k is enough for MinerU's
    # ~2,600-token layout request and keeps the test independent of the preset.
    stack = local_stack(tmp_path / "state", **{"inference_servers.0.engine": "sim",
                                               "inference_servers.0.max_model_len": 8192,
                                               "inference_servers.0.max_num_batched_tokens": 8192,
                                               "worker_pool.replicas": 2})
    try:
        state = stack.up()
        assert {"worker-0", "worker-1"} <= set(state["components"])
        prom = state["components"]["prometheus"]["url"]
        deadline = time.monotonic() + 30  # the two workers are scraped at different moments
        while len(up := wait_for_series(prom, 'up{job="workers"} == 1', 30)) < 2:
            assert time.monotonic() < deadline, up
            time.sleep(0.5)
        env = {**os.environ, stack.spec.queue.url_env: queue_url(stack.spec, stack.paths)}  # with AUTH
        pdfs = [str(make_pdf(tmp_path / f"d{i}.pdf", 2, seed=i)) for i in range(3)]
        done = _cli("submit", *pdfs, "--wait", "--timeout-s", "120", *input_roots_override(stack), env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        jobs = _cli("jobs", env=env)
        assert jobs.returncode == 0 and "done=3" in jobs.stdout, jobs.stdout
        outputs = stack.paths.data / stack.spec.output_store.path
        assert len([p for p in outputs.iterdir() if (p / "metadata.json").is_file()]) == 3
        processed = wait_for_series(prom, "sum(mineru_pdfs_processed_total) == 3", 30)
        assert processed, "Prometheus did not see the workers' counters"
    finally:
        stack.down()
    assert stack.processes() == []
