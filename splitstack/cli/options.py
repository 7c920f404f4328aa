"""Options that mean the same thing in every command line, declared once.

The same flag name for the same thing everywhere: ``--stack``, ``--prometheus-url``,
``--spec-override KEY=VALUE``, ``--output text|json``, ``--apply``.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer


class Output(str, Enum):
    text = "text"
    json = "json"


Stack = Annotated[str, typer.Option("--stack", "-s", help="Stack name: its spec is Pulumi.<stack>.yaml.")]
Apply = Annotated[bool, typer.Option("--apply", help="Act; without it only the plan is printed.")]
SpecOverride = Annotated[list[str] | None, typer.Option(
    "--spec-override", help="KEY=VALUE dotted spec override, as the local stack was started with "
    "(e.g. queue.port=16400); repeatable.")]
PrometheusUrl = Annotated[str | None, typer.Option(
    "--prometheus-url", help="Prometheus base URL; default for a local stack: its own.")]
KubeContext = Annotated[str | None, typer.Option(
    "--kube-context", help="kubeconfig context (default: the current one).")]
AuditLog = Annotated[Path | None, typer.Option(
    "--audit-log", help="Audit JSONL; default: <state_dir>/audit.jsonl (local) or "
    "~/.local/state/splitstack/audit-<stack>.jsonl.")]
OutputOpt = Annotated[Output, typer.Option("--output", help="text or json.")]
# every long-running bench command (run, gate, sweep, locust run): see bench/progress.py
ProgressEvery = Annotated[float | None, typer.Option(
    "--progress-every", metavar="SECONDS", help="Without a terminal (CI, pipes): one progress line every "
    "SECONDS (default: $BENCH_PROGRESS_EVERY, else 10; 0: none). On a terminal: a live line with the ETA.")]
