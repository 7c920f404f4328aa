"""The core install (no extras): every command is there, and a command that needs an extra
says which one, with exit 2 and no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from contract.spec_loader import available_stacks

ROOT = Path(__file__).resolve().parents[2]


def core(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "testsupport.noextras", "splitstack.cli.main", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_every_command_is_mounted_without_extras():
    r = core("--help")
    assert r.returncode == 0, r.stderr
    for command in ("up", "down", "status", "logs", "demo", "worker", "submit", "jobs", "spec", "sim", "slo",
                    "runbook", "infra", "bench"):
        assert f"│ {command} " in r.stdout, f"`splitstack {command}` is missing from the core install's help"


def test_the_spec_needs_no_extra():
    r = core("spec", "validate")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines() == [f"ok {stack}" for stack in available_stacks(ROOT)], r.stdout  # each stack checked


@pytest.mark.parametrize(("args", "extra"), [
    (("infra", "render", "--stack", "dev", "--out", "/tmp/splitstack-core-render"), "infra"),
    (("sim", "serve", "--port", "0"), "sim"),
    (("worker",), "worker"),
    (("runbook", "diagnose", "--stack", "dev"), "runbooks"),
    (("bench", "locust", "run", "chat-smoke", "--url", "http://127.0.0.1:9", "--model", "x"), "bench"),
])
def test_a_missing_extra_is_named(args, extra):
    r = core(*args)
    text = " ".join((r.stdout + r.stderr).split())  # rich wraps long lines
    assert r.returncode == 2, text
    assert f"pip install 'splitstack[{extra}]'" in text
    assert "Traceback" not in text
