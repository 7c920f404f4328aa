"""Runs that used to be "valid" are refused, through the real `bench` command line: a stopped
stack's state file whose ports another stack now holds, and an API key the server refuses.

Two projects (two state dirs, so two stack ids) share one stack file on the same free ports:
stack A is started and brought down (its state file stays), stack B is started on A's ports.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from contract.spec_loader import load_stack
from stack.launcher import LocalStack
from stack.secrets import queue_url
from testsupport.stack import ROOT, local_stack

pytestmark = pytest.mark.timeout(300)


def _project(folder: Path, ports) -> Path:
    folder.mkdir(parents=True)
    (folder / "Pulumi.yaml").write_text((ROOT / "Pulumi.yaml").read_text())
    (folder / "Pulumi.ci.yaml").write_text(
        "config:\n"
        "  splitstack:target: local\n"
        "  splitstack:inference_servers:\n"
        f"    - {{name: vlm, engine: sim, replicas: 1, port: {ports.worker_server.port}, max_model_len: 4096,\n"
        "       model: {name: tiny, source: tiny},\n"
        "       api_key: {name: splitstack-api-key, key: api-key, env: SPLITSTACK_API_KEY}}\n"
        "  splitstack:worker_pool: {replicas: 0}\n"
        f"  splitstack:queue: {{port: {ports.queue.port}}}\n"
        f"  splitstack:observability: {{prometheus_port: {ports.observability.prometheus_port}, "
        f"alertmanager: {{port: {ports.observability.alertmanager.port}}}}}\n"
    )
    return folder


def _bench(project: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k != "SPLITSTACK_API_KEY"}  # only the stack's own key
    full.update({"SPLITSTACK_ROOT": str(project), **(env or {})})
    return subprocess.run([sys.executable, "-m", "splitstack.cli.bench", *args], cwd=project, env=full,
                          capture_output=True, text=True, timeout=180)


def _refused(r: subprocess.CompletedProcess, *needles: str) -> None:
    text = r.stdout + r.stderr
    print(f"exit {r.returncode}: {' '.join(text.split())}")  # the proof table of the report (pytest -s)
    assert r.returncode == 2, text
    assert "Traceback" not in text, text
    assert "Nothing was sent" in text, text
    for needle in needles:
        assert needle in " ".join(text.split()), text


@pytest.fixture
def two_stacks(tmp_path):
    ports = local_stack(tmp_path / "unused").spec
    a_root, b_root = _project(tmp_path / "a", ports), _project(tmp_path / "b", ports)
    a = LocalStack(load_stack("ci", a_root), a_root)
    b = LocalStack(load_stack("ci", b_root), b_root)
    try:
        a.up()
        a.down()
        assert a.paths.state_file.is_file()  # what the bench used to trust
        b.up()
        yield a, b
    finally:
        a.down()
        b.down()


def test_a_stopped_stack_is_refused_and_nothing_reaches_the_stack_on_its_ports(two_stacks, tmp_path):
    a, b = two_stacks
    a_root = a.project_root
    assert a.paths.stack_id != b.paths.stack_id
    out = tmp_path / "runs"
    for args in (["run", "pipeline-smoke", "--count", "3"], ["run", "chat-smoke", "--count", "3"],
                 ["gate", "--gate", "chat-local"]):
        r = _bench(a_root, *args, "--stack", "ci", "--out", str(out / args[1]))
        _refused(r, "stack 'ci' is stopped", "`splitstack up --stack ci`")
        assert not (out / args[1]).exists()
    rds = redis.Redis.from_url(queue_url(b.spec, b.paths), decode_responses=True)
    try:
        assert rds.xlen(b.spec.queue.stream) == 0  # nothing enqueued into the other stack's queue
        assert rds.dbsize() == 0
    finally:
        rds.close()

    # B, its own stack, runs: the identity check passes for the stack that holds the ports
    ok = _bench(b.project_root, "run", "chat-smoke", "--stack", "ci", "--count", "5", "--out", str(out / "b"))
    assert "Nothing was sent" not in ok.stdout + ok.stderr, ok.stdout + ok.stderr
    assert (out / "b" / "summary.json").is_file(), ok.stdout + ok.stderr

    # a key the server refuses: stopped before any load, naming the variable the key came from
    server = b.read_state()["components"]["server-vlm"]["url"]
    r = _bench(b.project_root, "run", "chat-smoke", "--url", server, "--model", "tiny", "--api-key-env",
               "MY_KEY", "--out", str(out / "wrong"), env={"MY_KEY": "not-the-key"})
    _refused(r, "refused the API key from $MY_KEY (401)", "set MY_KEY to the server's key")
    r = _bench(b.project_root, "run", "chat-smoke", "--url", server, "--model", "tiny", "--out", str(out / "none"))
    _refused(r, "needs an API key (401 without one)", "--api-key-env VAR")
    r = _bench(b.project_root, "run", "chat-smoke", "--stack", "ci", "--out", str(out / "env"),
               env={"SPLITSTACK_API_KEY": "not-the-key"})
    _refused(r, "refused the API key from $SPLITSTACK_API_KEY (401)")
    key_file = b.paths.secrets / "api-key"
    assert key_file.read_text().strip() != "not-the-key"  # the bench read the stack's key, never wrote it
    assert not any((out / d).exists() for d in ("wrong", "none", "env"))
