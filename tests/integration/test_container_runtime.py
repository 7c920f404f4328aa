"""The local stack's container runtime (`local.runtime: podman`): the worker and simulator images are
built here from the checkout (the debootstrap base: no registry), the stack runs them, PDFs go
through the containerised workers, SIGTERM drains a document in flight, and nothing is left behind,
also after supervisord and the `podman run` processes were SIGKILLed.

Cost in CI: the image build is cached (base image in podman's store, wheels in .cache/images,
podman's layer cache); what a warm build and the tests take is printed with `--durations`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from bench.demo import wait_for_series
from contract.spec_loader import load_stack
from stack.containers import container_name
from stack.images import BaseKind, Built, ImageName, build_images
from stack.launcher import LocalStack
from stack.podman import LABEL_STACK, labelled_containers, podman
from stack.preflight import resolve_api_key
from stack.secrets import queue_url
from testsupport.procs import wait_until
from testsupport.stack import ROOT, local_stack
from worker.jobs_view import connect, list_jobs, submit

sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "pdfs"))
from pdf_fixtures import make_pdf  # noqa: E402

pytestmark = pytest.mark.integration

SIM = {"inference_servers.0.engine": "sim", "inference_servers.0.max_model_len": 8192,
       "inference_servers.0.max_num_batched_tokens": 8192, "local.runtime": "podman"}


@pytest.fixture(scope="module")
def images() -> list[Built]:
    report = build_images(load_stack("local", ROOT), ROOT, base=BaseKind.debootstrap.value,
                          only=[ImageName.worker, ImageName.simulator], progress=print)
    built = [i for i in report.images if isinstance(i, Built)]
    assert len(built) == 2, report.images
    return built


@pytest.fixture
def state_dir() -> Iterator[Path]:
    # The containers' non-root user must be able to enter the state dir (pytest's tmp_path is 0700).
    path = Path(tempfile.mkdtemp(prefix="splitstack-podman-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _queue(stack: LocalStack):
    return connect(stack.spec, queue_url(stack.spec, stack.paths))  # the stack's Redis asks for a password


def _jobs(stack: LocalStack, ids: list[str]) -> dict[str, dict[str, str]]:
    return {row["job_id"]: row for row in list_jobs(_queue(stack), stack.spec, ids=ids)}


def _wait_done(stack: LocalStack, ids: list[str], timeout_s: float) -> dict[str, dict[str, str]]:
    def terminal() -> dict[str, dict[str, str]] | None:
        rows = _jobs(stack, ids)
        return rows if all(r.get("state") in ("done", "dead_lettered") for r in rows.values()) else None
    return wait_until(terminal, timeout_s, f"{len(ids)} jobs finished", interval_s=0.25)


def _assert_nothing_left(stack: LocalStack) -> None:
    assert labelled_containers(LABEL_STACK, stack.paths.stack_id) == [], "containers left behind"
    assert stack.processes() == [], "processes left behind"


def test_pdfs_go_through_containerised_workers(images: list[Built], state_dir: Path) -> None:
    stack = local_stack(state_dir, **SIM, **{"worker_pool.replicas": 2})
    try:
        state = stack.up()
        assert state["runtime"] == "podman"
        for component in ("server-vlm", "worker-0", "worker-1"):
            name = container_name(stack.paths, component)
            # non-root, and the image's HEALTHCHECK (/readyz for the workers) passes
            assert podman(["exec", name, "id", "-u"]).stdout.strip() == "10001"
            if component.startswith("worker"):
                assert podman(["healthcheck", "run", name], check=False).returncode == 0
        pdfs = [make_pdf(state_dir / "pdfs" / f"d{i}.pdf", 2, seed=i) for i in range(3)]
        ids = submit(_queue(stack), stack.spec, pdfs)
        rows = _wait_done(stack, ids, 120)
        assert {r["state"] for r in rows.values()} == {"done"}, rows
        outputs = stack.paths.data / stack.spec.output_store.path
        assert all((outputs / job_id / "metadata.json").is_file() for job_id in ids)
        prom = state["components"]["prometheus"]["url"]
        assert wait_for_series(prom, "sum(mineru_pdfs_processed_total) == 3", 30), "workers not scraped"
    finally:
        stack.down()
    _assert_nothing_left(stack)


def test_sigterm_drains_in_flight_and_down_sweeps_after_a_crash(images: list[Built], state_dir: Path) -> None:
    stack = local_stack(state_dir, **SIM, **{"worker_pool.replicas": 1})
    try:
        state = stack.up()
        server = state["components"]["server-vlm"]["url"]
        key = resolve_api_key(stack.spec, stack.paths)
        httpx.put(f"{server}/sim/faults", json={"added_latency_ms": 150},
                  headers={"Authorization": f"Bearer {key}"}, timeout=5).raise_for_status()
        job, = submit(_queue(stack), stack.spec, [make_pdf(state_dir / "pdfs" / "long.pdf", 8)])
        wait_until(lambda: _jobs(stack, [job])[job].get("state") == "running", 60, "job running")
        # SIGTERM as Kubernetes sends it: to the worker (the container's PID 1) alone, through
        # `podman run`; its render pool keeps going and the document finishes.
        stack.supervisor.stop_process("worker-0")
        assert _jobs(stack, [job])[job]["state"] == "done"
        log = stack.paths.log("worker-0").read_text()
        stopping = [json.loads(line) for line in log.splitlines() if '"msg": "stopping"' in line]
        assert [(s["reason"], s["in_flight"]) for s in stopping] == [("SIGTERM", 1)], stopping
        assert "BrokenProcessPool" not in log
        assert labelled_containers(LABEL_STACK, stack.paths.stack_id) != []  # the simulator still runs

        # A crash: supervisord and every `podman run` SIGKILLed; the containers keep running.
        stack.supervisor.start_process("worker-0")
        wait_until(lambda: len(labelled_containers(LABEL_STACK, stack.paths.stack_id)) == 2, 30, "worker back")
        supervisord = psutil.Process(stack.supervisor.pid())
        runs = [p for p in supervisord.children() if "podman" in p.name()]
        assert len(runs) == 2, runs
        for proc in [supervisord, *runs]:
            os.kill(proc.pid, signal.SIGKILL)
        psutil.wait_procs([supervisord, *runs], timeout=10)
        assert len(labelled_containers(LABEL_STACK, stack.paths.stack_id)) == 2
    finally:
        stack.down()
    _assert_nothing_left(stack)
    ps = subprocess.run(["podman", "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True)
    assert stack.paths.stack_id not in ps.stdout
