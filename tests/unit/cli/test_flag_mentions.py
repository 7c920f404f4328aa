"""Every ``--flag`` a help text, an epilog or a message names exists on some command of the four
command lines (splitstack, bench, runbook, slo): advice never names a flag nobody can pass.

Collected from the string literals of the command-line modules and of the packages whose messages
reach a user (bench, runbooks, slo, stack, worker, infra). Argument lists handed to other programs
(an element of a list or tuple, or a string that starts with a dash) are skipped: those are that
program's flags. Prose naming another tool's flag is allowed by ``OTHER_TOOLS`` below."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import typer.main

from splitstack.cli import bench, runbook, slo
from splitstack.cli import main as splitstack

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("splitstack/cli", "bench", "runbooks", "slo", "stack", "worker", "infra")
FLAG = re.compile(r"(?<![\w/.-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*")

# Flags of other programs, named in prose (docstrings, advice quoting their command lines).
OTHER_TOOLS = {
    "--burstiness": "vLLM's `vllm bench serve` (bench/load.py compares its gamma arrivals)",
    "--shutdown-timeout": "vLLM's graceful shutdown (infra/policy/rules.py)",
    "--bench": "the --bench-* options our locustfile adds to Locust (bench/locust/)",
    "--bench-users": "Locust option added by bench/locust/locustfile.py",
    "--bench-rate-rps": "Locust option added by bench/locust/locustfile.py",
    "--client": "`pulumi up --client` (infra/automation.py)",
    "--policy-pack": "`pulumi preview --policy-pack` (infra/policy/)",
    "--secret": "`pulumi config set --secret` (infra/components/secrets.py)",
    "--repo": "`helm pull --repo` (infra/plan.py)",
    "--server-side": "`kubectl apply --server-side` (infra/components/prometheus_crds.py)",
    "--force-conflicts": "`kubectl apply --force-conflicts` (infra/components/prometheus_crds.py)",
    "--digestfile": "`podman push --digestfile` (stack/registry.py)",
    "--network": "`podman build --network` (stack/images.py, stack/wheelhouse.py)",
    "--rm": "`podman run --rm` (stack/containers.py)",
    "--variant": "`debootstrap --variant` (stack/baseimage.py)",
    "--no-deps": "`pip download --no-deps` (stack/wheelhouse.py)",
    "--web": "Alertmanager's --web.config.file (stack/secrets.py; the pattern stops at the dot)",
    "--password-env": "`python -m worker.router` (its own argparse)",
}


def known_flags() -> set[str]:
    flags = {"--help"}

    def walk(cmd) -> None:
        for param in cmd.params:
            flags.update(o for o in (*param.opts, *param.secondary_opts) if o.startswith("--"))
        for sub in getattr(cmd, "commands", {}).values():
            walk(sub)

    for app in (splitstack.app, bench.app, runbook.app, slo.app):
        walk(typer.main.get_command(app))
    return flags


def _prose(tree: ast.AST) -> Iterator[ast.Constant]:
    """String literals that read as text: not an argv element, not a lone flag token."""
    in_sequences = {id(e) for node in ast.walk(tree) if isinstance(node, ast.List | ast.Tuple) for e in node.elts}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in in_sequences
                and " " in node.value.strip() and not node.value.lstrip().startswith("-")):
            yield node


def mentioned_flags() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in _prose(ast.parse(path.read_text(), str(path))):
                for flag in FLAG.findall(node.value):
                    found.setdefault(flag, []).append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_every_flag_a_message_names_exists() -> None:
    known = known_flags()
    unknown = {flag: where for flag, where in mentioned_flags().items() if flag not in known | set(OTHER_TOOLS)}
    assert not unknown, "flags named in help or messages that no command has:\n" + "\n".join(
        f"  {flag}: {', '.join(where[:4])}" for flag, where in sorted(unknown.items()))


def test_the_collector_sees_messages_and_skips_argv() -> None:
    tree = ast.parse('f"pass --prometheus-url URL"\nx = ["--rm", "run"]\ny = "--quiet"\n'
                     'raise E("give --nosuch FILE")\n')
    flags = [m for node in _prose(tree) for m in FLAG.findall(node.value)]
    assert flags == ["--prometheus-url", "--nosuch"]


def test_the_allowlist_names_no_flag_of_ours() -> None:
    assert not set(OTHER_TOOLS) & known_flags(), "an allowlisted flag is one of ours: take it off the list"
