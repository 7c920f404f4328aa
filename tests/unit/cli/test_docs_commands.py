"""Docs that are true: every command line shown in README.md, docs/user-guide.md and docs/cli.md
parses against the real command line (an unknown command, flag or make target fails here), the
ones that need nothing but this checkout also run and exit 0, and a line that needs a cloud says
so with a trailing comment holding `needs a cloud` (or `needs your own server` for a `--url` of
the reader's own): parsed, not run.

The commands that need the local stack (`splitstack up`, `bench run --stack local`, ...) are
parsed here and run by the integration tests and `make demo`."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from splitstack.cli import bench, runbook, slo
from splitstack.cli import main as splitstack

ROOT = Path(__file__).resolve().parents[3]
PROGRAMS = {"splitstack": splitstack.app, "bench": bench.app, "runbook": runbook.app, "slo": slo.app}
DOCS = ("README.md", "docs/user-guide.md", "docs/cli.md")
CLOUD = "needs a cloud"
OWN_SERVER = "needs your own server"
# Flags that mean the command talks to something outside this machine: such a line must be marked.
CLOUD_FLAGS = ("--kube-context", "--queue-url-env", "--prometheus-url")
# Commands that need only this checkout (the spec files, the catalogs, the bundled scenarios): run.
OFFLINE = ("splitstack spec validate", "splitstack spec show", "splitstack infra plan", "splitstack infra render",
           "splitstack infra compose", "slo rules", "bench scenarios", "runbook capacity-plan fit")


def _lines(doc: str) -> list[tuple[str, str]]:
    """(command, trailing comment) of each line of a fenced shell block that starts with one of our
    programs (or `make`); continuation lines joined, `.venv/bin/` dropped."""
    out = []
    text = (ROOT / doc).read_text()
    for lang, body in re.findall(r"```(\w*)\n(.*?)```", text, re.S):
        if lang not in ("bash", "sh", "shell", "console"):  # untagged blocks are diagrams
            continue
        body = re.sub(r"\\\n\s*", " ", body)
        for raw in body.splitlines():
            line = raw.strip().removeprefix("$ ").removeprefix(".venv/bin/")
            if not re.match(r"(splitstack|bench|runbook|slo|make)\b", line):
                continue
            words = shlex.split(line, comments=True)
            comment = line[line.index(" #") + 2:].strip() if " #" in line else ""
            out.append((shlex.join(words), comment))
    return out


def _inline(doc: str) -> list[str]:
    """`inline code` that names one of our commands (docs/cli.md's tables)."""
    spans = re.findall(r"`([^`\n]+)`", (ROOT / doc).read_text())
    return [s for s in spans if re.match(r"(splitstack|bench|runbook|slo) [a-z]", s)]


LINES = [(doc, cmd, comment) for doc in DOCS for cmd, comment in _lines(doc)]


def test_the_docs_show_commands():
    assert sum(1 for d, *_ in LINES if d == "README.md") >= 20
    assert sum(1 for d, *_ in LINES if d == "docs/user-guide.md") >= 10
    assert len(_inline("docs/cli.md")) >= 8


def _resolve(words: list[str], group_ok: bool = False):
    cmd = get_command(PROGRAMS[words[0]])
    path, rest = [words[0]], words[1:]
    while getattr(cmd, "commands", None) is not None:
        if not rest and group_ok:
            break
        assert rest, f"{' '.join(path)}: a command group, not a command"
        assert rest[0] in cmd.commands, f"{' '.join(path)} has no command {rest[0]!r}"
        cmd, rest = cmd.commands[rest[0]], rest[1:]
        path.append(cmd.name)
    return " ".join(path), cmd, rest


def _make_targets() -> tuple[set[str], set[str]]:
    text = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][\w-]*)\s*:(?!=)", text, re.M))
    variables = set(re.findall(r"^([A-Z_]+)\s*[?:]?=", text, re.M))
    return targets, variables


@pytest.mark.parametrize("doc,cmd,comment", LINES, ids=[f"{d}: {c}" for d, c, _ in LINES])
def test_doc_command_parses(doc, cmd, comment):
    words = shlex.split(cmd)
    if words[0] == "make":
        targets, variables = _make_targets()
        for w in words[1:]:
            if "=" in w:
                assert w.split("=")[0] in variables, f"{doc}: `{cmd}`: the Makefile has no variable {w.split('=')[0]}"
            else:
                assert w in targets, f"{doc}: `{cmd}`: the Makefile has no target {w}"
        return
    name, target, args = _resolve(words)
    target.make_context(name, list(args))  # raises on an unknown flag, a bad value, a missing argument
    if any(f in words for f in CLOUD_FLAGS):
        assert CLOUD in comment, f"{doc}: `{cmd}` talks to a deployment: end the line with `# {CLOUD}`"
    elif "--url" in words:
        assert CLOUD in comment or OWN_SERVER in comment, \
            f"{doc}: `{cmd}` talks to a server elsewhere: end the line with `# {OWN_SERVER}` (or `# {CLOUD}`)"


RUNNABLE = [(d, c) for d, c, comment in LINES if CLOUD not in comment and OWN_SERVER not in comment
            and any(f"{c} ".startswith(f"{o} ") for o in OFFLINE)]


@pytest.mark.parametrize("doc,cmd", RUNNABLE, ids=[f"{d}: {c}" for d, c in RUNNABLE])
def test_offline_doc_command_runs(doc, cmd, tmp_path):
    words = [str(tmp_path / "out") if w.startswith("/tmp/") else w for w in shlex.split(cmd)]
    r = CliRunner().invoke(PROGRAMS[words[0]], words[1:], env={"COLUMNS": "200"})
    assert r.exit_code == 0, f"{doc}: `{cmd}` exited {r.exit_code}:\n{r.output}"


def test_offline_commands_are_run():
    assert len(RUNNABLE) >= 6, RUNNABLE


@pytest.mark.parametrize("span", _inline("docs/cli.md"))
def test_cli_reference_names_real_commands_and_flags(span):
    words = span.split()
    name, cmd, rest = _resolve(words, group_ok=True)
    flags = {f for p in cmd.params for f in (*p.opts, *getattr(p, "secondary_opts", []))}
    for w in rest:
        for flag in re.findall(r"--[a-z][\w-]*", w):
            assert flag in flags, f"docs/cli.md: `{span}`: {name} has no {flag}"


def test_an_unknown_flag_or_command_fails_the_check():
    name, cmd, args = _resolve(shlex.split("bench run chat-smoke --no-such-flag"))
    with pytest.raises(Exception, match="No such option: --no-such-flag") as err:  # typer's own copy of click
        cmd.make_context(name, args)
    assert type(err.value).__name__ == "NoSuchOption"
    with pytest.raises(AssertionError, match="no command 'nope'"):
        _resolve(["splitstack", "nope"])


WRITERS = ("bench run", "bench gate", "bench check", "bench sweep", "bench report", "bench locust run",
           "bench locust ingest")


@pytest.mark.parametrize("name", WRITERS)
def test_help_names_the_files_a_run_folder_holds(name, tmp_path, monkeypatch):
    from bench.report.writer import write_report, write_run
    from tests.unit.bench.conftest import make_run

    write_run(tmp_path / "run", *make_run(n=20))
    written = sorted(p.name for p in (tmp_path / "run").iterdir())
    assert written == ["records.jsonl", "report.html", "requests.csv", "summary.json", "timeseries.csv"]
    if name == "bench report":  # re-renders from the other two
        assert {p.name for p in write_report(tmp_path / "run", *reversed(make_run(n=20))).values()} \
            == {"report.html", "requests.csv", "timeseries.csv"}
    _, cmd, _ = _resolve(name.split())
    text = " ".join((cmd.help or "").split())
    missing = [f for f in written if f not in text]
    assert not missing, f"{name}: its help does not name {missing} (it writes {written})"
