"""The bench trusts a local stack's state file only when the stack runs as it says: its
supervisord is alive and the process on each port carries the stack's id (stack/identity.py)."""

from __future__ import annotations

import json
import os
import socket

import psutil
import pytest

from stack.identity import StackIdentityError, listeners, verify_running
from stack.launcher import LocalStack
from stack.supervisor import Supervisor
from testsupport.stack import local_stack


@pytest.fixture
def stack_and_port(tmp_path):
    local = local_stack(tmp_path / "state")
    with socket.socket() as sock:  # a listener of this test process: not tagged with the stack's id
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        local.paths.make()
        local.paths.state_file.write_text(json.dumps({"components": {
            "server-vlm": {"role": "server", "port": port, "url": f"http://127.0.0.1:{port}"}}}))
        yield local, port


def test_no_state_file_and_a_stopped_stack_are_refused_with_the_command_to_start(tmp_path, stack_and_port):
    local, _ = stack_and_port
    with pytest.raises(StackIdentityError, match=r"stack 'local' is not running \(no .*state.json\); start it "
                       r"with `splitstack up --stack local`"):
        verify_running(local_stack(tmp_path / "never-started"))
    with pytest.raises(StackIdentityError, match=r"is stopped: its state file .* is left from an earlier run"):
        verify_running(local)  # a state file, no supervisord: what `splitstack down` leaves


def test_a_port_held_by_a_process_without_the_stack_id_is_foreign(stack_and_port, monkeypatch):
    local, port = stack_and_port
    monkeypatch.setattr(Supervisor, "running", lambda self: True)
    assert os.getpid() in listeners(port)
    with pytest.raises(StackIdentityError, match=rf"port {port} of server-vlm is held by pid {os.getpid()} "
                       r"\(.*\), which is not part of this stack \(stack id [0-9a-f]{16}"):
        verify_running(local)
    me = psutil.Process(os.getpid())
    monkeypatch.setattr(LocalStack, "processes", lambda self: [me])  # the same listener, now the stack's own
    assert verify_running(local)["components"]["server-vlm"]["port"] == port


def test_a_required_component_that_does_not_listen_is_refused(stack_and_port, monkeypatch):
    local, port = stack_and_port
    monkeypatch.setattr(Supervisor, "running", lambda self: True)
    state = json.loads(local.paths.state_file.read_text())
    state["components"]["queue"] = {"role": "queue", "port": 1, "url": "redis://127.0.0.1:1"}
    monkeypatch.setattr(LocalStack, "processes", lambda self: [psutil.Process(os.getpid())])
    with pytest.raises(StackIdentityError, match="queue does not listen on port 1"):
        verify_running(local, state)
