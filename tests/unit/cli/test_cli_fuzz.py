"""Random command lines built from each command's real options, with random values, through every
command of splitstack (which mounts bench, runbook and slo): never a traceback, always an exit
code of the documented set (0 done, 1 a "no", 2 bad input, 3 no data).

Seeded (deterministic) and bounded in time. Everything a command could reach goes to loopback
ports nothing listens on: the project is a copy whose local stack's ports are unused, any URL
value is one of those ports, KUBECONFIG names no file, HOME and the working folder are temporary. Commands
that start long-lived processes or write into the checkout are left out (``SKIP``) or run with
the flag that keeps them read-only (``FORCED``)."""

from __future__ import annotations

import enum
import logging
import os
import random
import re
import socket
import types
import typing
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from splitstack.cli.main import app

ROOT = Path(__file__).resolve().parents[3]
# Fixed, so a run is repeatable; set SPLITSTACK_FUZZ_SEED / SPLITSTACK_FUZZ_RUNS to explore further.
SEED = int(os.environ.get("SPLITSTACK_FUZZ_SEED", "28"))
RUNS = int(os.environ.get("SPLITSTACK_FUZZ_RUNS", "160"))  # every command once, then random: ~20 s on 2 cores
SKIP = {
    "up", "demo", "worker", "restart", "down",  # start or stop a stack's processes
    "sim serve",  # serves until interrupted
    "runbook gpu-probe", "runbook wait-for-gpu-memory",  # --serve-port / long waits by design
    "images build", "images push", "images check",  # podman
    "cluster up", "cluster down", "cluster pulumi",  # start processes
    "bench locust run", "bench locust master", "bench locust worker",  # spawn Locust
    "infra render",  # seconds per call under Pulumi's mocks; its bad inputs are in test_bad_inputs.py
}
FORCED = {  # write into the checkout by default: only their read-only check runs here
    "slo rules": ["--check"], "slo dashboards": ["--check"], "slo schema": ["--check"], "spec schema": [],
}
NEVER = {"--write", "--serve-port", "--install-completion", "--show-completion", "--help", "--version"}


def _unused_ports(n: int) -> list[int]:
    """Ports nothing listens on now (bound then released; nothing of ours binds them again)."""
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("fuzz")
    proj = tmp / "project"
    proj.mkdir()
    ports = _unused_ports(6)
    for f in ROOT.glob("Pulumi*.yaml"):
        text = f.read_text()
        if f.name == "Pulumi.local.yaml":
            for old, new in zip(("18000", "19400", "16379", "19090", "19093"), ports):
                text = re.sub(rf"\b{old}\b", str(new), text)
        (proj / f.name).write_text(text)
    (tmp / "junk.txt").write_text("{not json\n")
    (tmp / "folder").mkdir()
    (tmp / "home").mkdir()
    (tmp / "cwd").mkdir()
    return {"tmp": str(tmp), "project": str(proj), "port": str(ports[5])}


def _leaves(cmd, path: list[str]):
    subs = getattr(cmd, "commands", None)
    if subs is None:
        yield " ".join(path), cmd
        return
    for name, sub in subs.items():
        yield from _leaves(sub, path + [name])


def _base(param) -> object:
    """The parameter's Python type: Optional[...] and list[...] unwrapped."""
    annotation = param.type_descriptor.annotation
    while typing.get_origin(annotation) in (typing.Union, types.UnionType, list):
        annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
    return annotation


def _value(rng: random.Random, param, f: dict[str, str]) -> str:
    t = _base(param)
    url = f"http://127.0.0.1:{f['port']}"
    if isinstance(t, type) and issubclass(t, enum.Enum):
        return rng.choice([*(str(m.value) for m in t), "bogus"])
    if t is int:
        return rng.choice(["-1", "0", "1", "2", "65536", "1000000000000", "x", "1.5"])
    if t is float:
        return rng.choice(["-1", "0", "0.5", "1e9", "nan", "inf", "-inf", "x"])
    return rng.choice([
        "", "x", "nosuch", "notaurl", url, f"{url}/v1", "ftp://x", "http://[::1", "a=b", "KEY", "queue.port=abc",
        f"queue.port={f['port']}", "1h", "30 days", "0m", "1-2", "9-1", "-3", "local", "dev", "chat-smoke",
        f["tmp"], f"{f['tmp']}/junk.txt", f"{f['tmp']}/none.yaml", f"{f['tmp']}/folder", "/proc/nope/x",
        "\x1b[31mred", "é文", "../..",
    ])


def _argv(rng: random.Random, name: str, cmd, f: dict[str, str]) -> list[str]:
    argv = name.split()
    for param in cmd.params:
        if param.param_type_name == "argument":
            for _ in range(param.nargs if param.nargs > 0 else rng.randint(0 if not param.required else 1, 2)):
                argv.append(_value(rng, param, f))
            continue
        flags = [o for o in param.opts if o.startswith("--") and o not in NEVER]
        if not flags or rng.random() > 0.35:
            continue
        if param.is_flag:
            argv.append(rng.choice(flags + [o for o in param.secondary_opts if o.startswith("--")]))
            continue
        for _ in range(rng.randint(1, 2) if param.multiple else 1):
            argv += [flags[0], _value(rng, param, f)]
    return argv + FORCED.get(name, [])


def test_random_command_lines_never_raise(project, monkeypatch) -> None:
    # a relative --out (or any relative path) lands in the temporary folder, never the checkout
    monkeypatch.chdir(Path(project["tmp"]) / "cwd")
    rng = random.Random(SEED)
    commands = [(n, c) for n, c in _leaves(typer.main.get_command(app), []) if n not in SKIP]
    env = {"SPLITSTACK_ROOT": project["project"], "KUBECONFIG": f"{project['tmp']}/no-kubeconfig",
           "HOME": f"{project['tmp']}/home", "COLUMNS": "100", "NO_COLOR": "1"}
    failures = []
    for i in range(RUNS):
        name, cmd = commands[i % len(commands)] if i < len(commands) else rng.choice(commands)
        argv = _argv(rng, name, cmd, project)
        handlers = list(logging.root.handlers)
        result = CliRunner().invoke(app, argv, env=env)
        logging.root.handlers[:] = handlers  # a handler bound to this call's captured stderr (see test_bad_inputs)
        exc = result.exception if not isinstance(result.exception, SystemExit) else None
        if exc is not None or "Traceback" in result.output or result.exit_code not in (0, 1, 2, 3):
            failures.append(f"{argv!r}: exit {result.exit_code} {exc!r}\n{result.output[-600:]}")
    assert not failures, f"{len(failures)} of {RUNS} command lines failed:\n" + "\n".join(failures[:15])
