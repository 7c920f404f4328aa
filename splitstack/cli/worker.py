"""`splitstack worker`, `splitstack submit FILES...`, `splitstack jobs` (mounted by
splitstack/cli/main.py through :func:`register`)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import redis
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from bench.target import mask_url
from contract.extras import MissingExtra, require
from contract.spec_loader import SpecError, load_stack, project_root
from stack.secrets import client_queue_url
from worker.jobs import PageRange
from worker.jobs_view import connect, list_jobs, redis_url, submit, summarize

console = Console()
err = Console(stderr=True)
StackOpt = Annotated[str, typer.Option("--stack", "-s", help="Stack name: Pulumi.<stack>.yaml.")]
TERMINAL = {"done", "dead_lettered"}


def _spec(stack: str):
    try:
        return load_stack(stack)
    except SpecError as exc:
        err.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from None


def _connect(spec):
    r = connect(spec, client_queue_url(spec, project_root()))
    try:
        r.ping()
    except redis.RedisError as exc:
        err.print(f"[red]cannot reach the queue at {mask_url(redis_url(spec))} ({exc}); start the "
                  f"stack with `splitstack up` or set {spec.queue.url_env}[/red]")
        raise typer.Exit(1) from None
    return r


def _pages(value: str | None):
    if not value:
        return None

    first, sep, last = value.partition("-")
    try:
        return PageRange(first=int(first), last=int(last if sep else first))
    except ValueError as exc:
        raise typer.BadParameter(f"--pages {value!r}: expected FIRST-LAST, e.g. 1-10 ({exc})") from None


def register(app: typer.Typer) -> None:
    @app.command("worker")
    def worker_cmd(
        stack: StackOpt = "local",
        index: Annotated[int, typer.Option(help="Replica index (local port offset).")] = 0,
        set_: Annotated[list[str], typer.Option("--set", help="Override a spec field: KEY=VALUE.")] = [],  # noqa: B006
    ) -> None:
        """Run one MinerU worker in the foreground (what `splitstack up --workers N` starts)."""

        try:
            process = require("splitstack.cli.worker_process", "worker", "`splitstack worker` (MinerU)")
        except MissingExtra as exc:
            err.print(f"[red]error:[/red] {escape(str(exc))}")
            raise typer.Exit(2) from None
        args = ["--stack", stack, "--index", str(index)]
        for pair in set_:
            args += ["--set", pair]
        raise typer.Exit(process.main(args))

    @app.command("submit")
    def submit_cmd(
        files: Annotated[list[Path], typer.Argument(help="PDF files (paths every worker can read).")],
        stack: StackOpt = "local",
        pages: Annotated[str | None, typer.Option(help="Only these pages, FIRST-LAST (1-based).")] = None,
        language: Annotated[str | None, typer.Option(help="Language hint recorded with the job.")] = None,
        correlation_id: Annotated[str | None, typer.Option(help="Your id, echoed in logs and metadata.")] = None,
        wait: Annotated[bool, typer.Option(help="Wait until every job is done or dead-lettered.")] = False,
        timeout_s: Annotated[float, typer.Option(help="Longest --wait, seconds.")] = 600.0,
    ) -> None:
        """Enqueue PDFs for the worker pool; prints one job id per file."""

        missing = [str(f) for f in files if not f.is_file()]
        if missing:
            err.print(f"[red]not a file: {', '.join(missing)}[/red]")
            raise typer.Exit(2)
        spec = _spec(stack)
        r = _connect(spec)
        ids = submit(r, spec, files, _pages(pages), language, correlation_id)
        for f, job_id in zip(files, ids):
            console.print(f"{job_id}  {f}")
        if not wait:
            return
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            rows = list_jobs(r, spec, ids=ids)
            if all(row.get("state") in TERMINAL for row in rows):
                _table(rows)
                failed = sum(row.get("state") == "dead_lettered" for row in rows)
                raise typer.Exit(1 if failed else 0)
            time.sleep(0.5)
        err.print(f"[red]not finished after {timeout_s:.0f} s; `splitstack jobs` shows progress[/red]")
        raise typer.Exit(1)

    @app.command("jobs")
    def jobs_cmd(
        stack: StackOpt = "local",
        limit: Annotated[int, typer.Option(help="Most recent N jobs.")] = 30,
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON lines.")] = False,
    ) -> None:
        """Jobs and their state: queued, running, fanned_out (parts done/total), done, dead_lettered."""

        spec = _spec(stack)
        rows = list_jobs(_connect(spec), spec, limit)
        if as_json:
            for row in rows:
                console.print_json(json.dumps(row))
            return
        _table(rows)
        console.print(" ".join(f"{k}={v}" for k, v in sorted(summarize(rows).items())) or "no jobs")


def _table(rows) -> None:
    table = Table("job", "state", "pages", "parts", "seconds", "source / reason")
    for row in rows:
        parts = f"{row.get('parts_done', 0)}/{row['parts_total']}" if row.get("parts_total") else ""
        detail = row.get("reason") or row.get("source", "")
        table.add_row(row["job_id"], row.get("state", "?"), row.get("pages", ""), parts,
                      row.get("processing_s", ""), detail[-80:])
    console.print(table)
