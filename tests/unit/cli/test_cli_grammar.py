"""One grammar across the four command lines: every command's help ends with an example that
parses and its exit codes; the same flag name means the same thing everywhere; --version."""

from __future__ import annotations

import shlex
import types
import typing
from collections.abc import Iterator

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from splitstack.cli import bench, runbook, slo
from splitstack.cli import main as splitstack

PROGRAMS = {"splitstack": splitstack.app, "bench": bench.app, "runbook": runbook.app, "slo": slo.app}
# Flags that were spelled differently before, with what replaced them.
RETIRED = {"--json": "--output json / --out PATH", "--prometheus": "--prometheus-url", "--run-time": "--duration-s",
           "--duration": "--duration-s", "--output-dir": "--outputs-at",
           "--no-gpu": "--no-nvml"}


def _leaves(cmd, path: list[str]) -> Iterator[tuple[str, object]]:
    commands = getattr(cmd, "commands", None)
    if commands is None:
        yield " ".join(path), cmd
        return
    for name, sub in commands.items():
        yield from _leaves(sub, [*path, name])


def _all() -> list[tuple[str, object]]:
    return [leaf for prog, app in PROGRAMS.items() for leaf in _leaves(get_command(app), [prog])]


LEAVES = _all()


def _options(cmd) -> list:
    return [p for p in cmd.params if type(p).__name__.endswith("Option")]


def _annotation(opt) -> object:
    """The option's Python type, without ``| None``."""
    annotation = opt.type_descriptor.annotation
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    return args[0] if len(args) == 1 and typing.get_origin(annotation) in (typing.Union, types.UnionType) \
        else annotation


def test_every_command_is_found():
    names = {n for n, _ in LEAVES}
    assert {"splitstack up", "bench run", "runbook diagnose", "slo status", "splitstack bench locust run",
            "runbook capacity-plan forecast", "splitstack dead-letters redrive"} <= names
    assert len(LEAVES) > 90


@pytest.mark.parametrize("name,cmd", LEAVES, ids=[n for n, _ in LEAVES])
def test_help_has_examples_and_exit_codes(name, cmd):
    epilog = cmd.epilog or ""
    assert "Example: " in epilog, f"{name}: no example in its help"
    assert "Exit codes: " in epilog, f"{name}: no exit codes in its help"


def _resolve(example: str):
    words = shlex.split(example)
    cmd = get_command(PROGRAMS[words[0]])
    rest = words[1:]
    while getattr(cmd, "commands", None) is not None:
        cmd, rest = cmd.commands[rest[0]], rest[1:]
    return cmd, rest


@pytest.mark.parametrize("name,cmd", LEAVES, ids=[n for n, _ in LEAVES])
def test_examples_parse(name, cmd):
    examples = [line.removeprefix("Example: ") for line in (cmd.epilog or "").split("\n\n")
                if line.startswith("Example: ")]
    assert examples, f"{name}: no example in its help"
    for example in examples:
        target, args = _resolve(example)
        assert target.name == cmd.name, f"{name}: example {example!r} runs another command"
        target.make_context(name, list(args))  # raises on an unknown flag, a bad value, a missing argument


@pytest.mark.parametrize("name,cmd", LEAVES, ids=[n for n, _ in LEAVES])
def test_same_flag_same_meaning(name, cmd):
    for opt in _options(cmd):
        flags = set(opt.opts) | set(opt.secondary_opts)
        for flag in flags & RETIRED.keys():
            pytest.fail(f"{name}: {flag} is spelled {RETIRED[flag]} everywhere")
        if "--stack" in flags and name != "splitstack spec validate":
            assert "-s" in flags, f"{name}: --stack without -s"
        if "--output" in flags:
            assert {e.value for e in _annotation(opt)} == {"text", "json"}, f"{name}: --output is text|json"
        if "--to" in flags:
            assert name.endswith(("runbook rollback", "runbook migrate")), \
                f"{name}: --to names a target (rollback's mode, migrate's split share); a change is --set"
        if "--set" in flags:
            assert name.endswith(("runbook tune", "runbook upgrade-server")), f"{name}: --set is an action's change"
        if "--workers" in flags:
            assert name == "splitstack up", f"{name}: --workers means MinerU workers (`splitstack up`)"
        if "--gpu" in flags:
            assert name.endswith("capacity-plan fit"), f"{name}: --gpu is a catalog GPU name"
        if opt.name and opt.name.endswith("_s") and _annotation(opt) in (float, int):
            assert all(f.endswith("-s") for f in opt.opts if f.startswith("--")), \
                f"{name}: {opt.opts} holds seconds: its flag ends in -s"


@pytest.mark.parametrize("prog", PROGRAMS)
def test_version(prog):
    r = CliRunner().invoke(PROGRAMS[prog], ["--version"])
    assert r.exit_code == 0, r.output
    assert r.output.startswith(f"{prog} ") and r.output.strip().split()[-1][0].isdigit()


def test_help_renders_the_example():
    r = CliRunner().invoke(bench.app, ["run", "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0
    assert "Example: bench run chat-smoke --stack local --duration-s 30" in r.output
    assert "Exit codes: 0 a valid run" in r.output


NUMERIC = [(name, opt) for name, cmd in LEAVES for opt in _options(cmd) if _annotation(opt) in (int, float)]


@pytest.mark.parametrize("name,opt", NUMERIC, ids=[f"{n} {o.opts[0]}" for n, o in NUMERIC])
def test_every_number_flag_has_bounds(name, opt):
    """A negative count, size or time is refused by the flag itself (exit 2 naming it), never
    passed on to fail later or be taken as 'none'."""
    assert opt.min is not None, f"{name} {opt.opts[0]}: give the option min= (and max= where there is one)"

