"""`splitstack worker`, `splitstack submit FILES...`, `splitstack jobs` and `splitstack
dead-letters` (mounted by splitstack/cli/main.py through :func:`register` and
:func:`register_dead_letters`)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import redis
import typer
from rich.markup import escape
from rich.table import Table

from bench.target import mask_url
from contract.extras import MissingExtra, require
from contract.models import parse_assignments
from contract.spec_loader import SpecError, load_stack, project_root
from splitstack.cli.options import Output, OutputOpt, SpecOverride, Stack, epilog
from splitstack.cli.terminal import SafeConsole, echo, printable
from stack.secrets import client_queue_url
from worker.deadletters import DeadLetterError, find, list_dead, redrive_named
from worker.jobs import PageRange
from worker.jobs_view import (
    InputRefused,
    PagesPastEnd,
    any_dead_lettered,
    check_files,
    check_inputs,
    connect,
    list_jobs,
    redis_url,
    submit,
    summarize,
    typed,
    wait_terminal,
)

console = SafeConsole()
err = SafeConsole(stderr=True)
StackOpt = Stack
WAIT_PROGRESS_EVERY_S = 10.0  # `submit --wait` says where the jobs are when they move, else this often
WIDE_TABLE_COLUMNS = 120  # below this width `jobs` prints one block per job: ids and paths never wrap


def _spec(stack: str, spec_override: list[str] | None = None):
    try:
        overrides = parse_assignments(spec_override or [], "--spec-override", "worker_pool.input_roots=[/data]")
        return load_stack(stack, overrides=overrides or None)
    except (SpecError, ValueError) as exc:
        # escaped: the message quotes the user's input and an example ("[/data]"), not markup
        err.print(f"[red]{escape(str(exc))}[/red]")
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
        a, b = int(first), int(last if sep else first)
    except ValueError:
        raise typer.BadParameter(f"--pages {value!r}: expected FIRST-LAST, e.g. 1-10 (1-based page "
                                 "numbers)", param_hint="'--pages'") from None
    if a < 1 or b < a:
        raise typer.BadParameter(f"--pages {value!r}: pages are numbered from 1 and the last is not before "
                                 "the first, e.g. 1-10", param_hint="'--pages'")
    return PageRange(first=a, last=b)


def register(app: typer.Typer) -> None:
    @app.command("worker", epilog=epilog("splitstack worker --stack local --index 1",
                                             exits="the worker's: 0 stopped cleanly; 2 bad spec or setting"))
    def worker_cmd(
        stack: StackOpt = "local",
        index: Annotated[int, typer.Option(help="Replica index (local port offset).", min=0)] = 0,
        spec_override: SpecOverride = None,
    ) -> None:
        """Run one MinerU worker in the foreground (what `splitstack up --workers N` starts)."""

        try:
            process = require("splitstack.cli.worker_process", "worker", "`splitstack worker` (MinerU)")
        except MissingExtra as exc:
            err.print(f"[red]error:[/red] {escape(str(exc))}")
            raise typer.Exit(2) from None
        args = ["--stack", stack, "--index", str(index)]
        for pair in spec_override or []:
            args += ["--spec-override", pair]
        raise typer.Exit(process.main(args))

    @app.command("submit", epilog=epilog("splitstack submit ./pdfs/report.pdf --wait",
                                             "splitstack submit ./pdfs/*.pdf --pages 1-10 --output json",
                                             exits="0 submitted (with --wait: every job done); 1 the queue is "
                                             "unreachable, a job was dead-lettered or --wait timed out; 2 bad input "
                                             "(nothing submitted)"))
    def submit_cmd(
        files: Annotated[list[Path], typer.Argument(help="PDF files inside the workers' input roots "
                                                         "(worker_pool.input_roots).")],
        stack: StackOpt = "local",
        spec_override: SpecOverride = None,
        pages: Annotated[str | None, typer.Option(help="Only these pages, FIRST-LAST (1-based).")] = None,
        language: Annotated[str | None, typer.Option(help="Language hint recorded with the job.")] = None,
        correlation_id: Annotated[str | None, typer.Option(help="Your id, echoed in logs and metadata.")] = None,
        wait: Annotated[bool, typer.Option(help="Wait until every job is done or dead-lettered.")] = False,
        timeout_s: Annotated[float, typer.Option(help="Longest --wait, seconds.", min=0)] = 600.0,
        output: Annotated[Output, typer.Option("--output", help="text, or json: one JSON object per line "
                                               "(job_id, file; with --wait, the final records).")] = Output.text,
    ) -> None:
        """Enqueue PDFs for the worker pool; prints one job id per file (tab-separated from the file).

        With --wait, a table of the final records: each job's output (a folder, or s3://bucket/prefix/job/
        for an object store) and, for a dead letter, its full reason. Each job's output folder holds
        <name>.md (the markdown), <name>_content_list.json and metadata.json; with the simulator as the
        engine the markdown is synthetic text (the simulator answers with generated tokens, not a
        reading of the page): docs/worker.md says more.
        """
        as_json = output is Output.json

        page_range = _pages(pages)
        try:
            check_files(files, page_range)
        except PagesPastEnd as exc:
            echo(f"--pages {pages}: {exc}. Nothing was submitted.", err=True)
            raise typer.Exit(2) from None
        except InputRefused as exc:
            echo(str(exc), err=True)
            raise typer.Exit(2) from None
        spec = _spec(stack, spec_override)  # the input roots the stack was started with
        try:
            check_inputs(spec, files, project_root())
        except InputRefused as exc:
            echo(f"refused, nothing was submitted: {exc}", err=True)
            raise typer.Exit(2) from None
        r = _connect(spec)
        ids = submit(r, spec, files, page_range, language, correlation_id)
        for f, job_id in zip(files, ids):
            # Plain lines, never wrapped: scripts read them (cut -f1, or --json).
            echo(json.dumps({"job_id": job_id, "file": str(f)}) if as_json else f"{job_id}\t{f}")
        if not wait:
            return

        def said(waited_s: float, counts: str) -> None:
            # on stderr: stdout keeps only the ids and the final records (scripts read it)
            err.print(f"waiting {waited_s:.0f} s: {counts or 'no jobs yet'}", soft_wrap=True, highlight=False)

        rows = wait_terminal(r, spec, ids, timeout_s, said, WAIT_PROGRESS_EVERY_S)
        if rows is None:
            err.print(f"[red]not finished after {timeout_s:.0f} s; `splitstack jobs` shows progress[/red]")
            raise typer.Exit(1)
        if as_json:
            for row in rows:
                echo(json.dumps(row))
        else:
            _table(rows)
        raise typer.Exit(1 if any_dead_lettered(rows) else 0)

    @app.command("jobs", epilog=epilog("splitstack jobs --limit 10", "splitstack jobs --output json",
                                           exits="0 listed; 1 the queue is unreachable; 2 bad input"))
    def jobs_cmd(
        stack: StackOpt = "local",
        limit: Annotated[int, typer.Option(help="Most recent N jobs.", min=1)] = 30,
        output: OutputOpt = Output.text,
    ) -> None:
        """Jobs and their state: queued, running, fanned_out (parts done/total), done, dead_lettered;
        each done job's output and each dead letter's full reason."""
        as_json = output is Output.json

        spec = _spec(stack)
        rows = list_jobs(_connect(spec), spec, limit)
        if as_json:
            for row in rows:
                echo(json.dumps(typed(row)))  # one object per line, never wrapped; numbers as numbers
            return
        _table(rows)
        console.print(" ".join(f"{k}={v}" for k, v in sorted(summarize(rows).items())) or "no jobs")


def register_dead_letters(app: typer.Typer) -> None:
    dlq = typer.Typer(no_args_is_help=True, help="The dead-letter stream: list, inspect, re-drive.")
    app.add_typer(dlq, name="dead-letters")

    @dlq.command("list", epilog=epilog("splitstack dead-letters list --kind poison",
                                           exits="0 listed; 1 the queue is unreachable; 2 bad input"))
    def dlq_list(
        stack: StackOpt = "local",
        kind: Annotated[str | None, typer.Option(help="Only this kind (parse_failed, poison, ...).")] = None,
        limit: Annotated[int, typer.Option(help="Newest N.", min=1)] = 50,
        output: Annotated[Output, typer.Option("--output", help="text, or json: one object per line.")] = Output.text,
    ) -> None:
        """Dead letters, newest first: entry id, job id, kind, reason."""
        as_json = output is Output.json
        spec = _spec(stack)
        letters = list_dead(_connect(spec), spec, limit, kind)
        if as_json:
            for d in letters:
                echo(json.dumps(d.as_dict()))
            return
        table = Table("entry", "job", "kind", "failed at", "reason")
        table.columns[4].overflow = "fold"
        for d in letters:
            table.add_row(d.entry_id, d.job_id or "-", d.kind, time.strftime("%Y-%m-%d %H:%M:%S",
                          time.localtime(d.failed_at)), escape(d.reason))
        console.print(table)
        console.print(f"{len(letters)} dead letter(s)" + (f" of kind {kind}" if kind else ""))

    @dlq.command("show", epilog=epilog("splitstack dead-letters show JOB_ID",
                                           exits="0 shown; 1 the queue is unreachable; 2 no such dead letter"))
    def dlq_show(
        key: Annotated[str, typer.Argument(help="Entry id or job id.")],
        stack: StackOpt = "local",
    ) -> None:
        """One dead letter in full (JSON): reason, kind, deliveries, the original job."""
        spec = _spec(stack)
        try:
            d = find(_connect(spec), spec, key)
        except DeadLetterError as exc:
            echo(str(exc), err=True)
            raise typer.Exit(2) from None
        echo(json.dumps({**d.as_dict(), "job": json.loads(d.job) if d.job else None}, indent=1))

    @dlq.command("redrive", epilog=epilog("splitstack dead-letters redrive --kind parse_failed",
                                              "splitstack dead-letters redrive JOB_ID --output json",
                                              exits="0 re-driven; 1 the queue is unreachable; 2 nothing named "
                                              "or no such dead letter"))
    def dlq_redrive(
        keys: Annotated[list[str] | None, typer.Argument(help="Entry ids or job ids.")] = None,
        stack: StackOpt = "local",
        kind: Annotated[str | None, typer.Option(help="Every dead letter of this kind.")] = None,
        all_: Annotated[bool, typer.Option("--all", help="Every dead letter.")] = False,
        output: Annotated[Output, typer.Option("--output", help="text, or json: one object per line.")] = Output.text,
    ) -> None:
        """Put dead-lettered jobs back on the queue (same job id); their dead letters are removed."""
        as_json = output is Output.json
        if not keys and not kind and not all_:
            echo("name what to re-drive: entry/job ids, --kind KIND or --all", err=True)
            raise typer.Exit(2)
        spec = _spec(stack)
        r = _connect(spec)
        try:
            ids = redrive_named(r, spec, keys or [], kind, all_)
        except DeadLetterError as exc:
            echo(f"{exc}; nothing more was re-driven", err=True)
            raise typer.Exit(2) from None
        for job_id in ids:
            echo(json.dumps({"job_id": job_id, "state": "queued"}) if as_json else f"{job_id}\tqueued")
        if not as_json:
            echo(f"re-drove {len(ids)} job(s); `splitstack jobs` shows them", err=True)


def _table(rows) -> None:
    if console.width < WIDE_TABLE_COLUMNS:
        _blocks(rows)
        return
    table = Table("job", "state", "pages", "parts", "seconds", "source / reason", "output")
    for column in (5, 6):  # a dead letter's whole reason and the whole output path, folded, never cut
        table.columns[column].overflow = "fold"
    for row in rows:
        parts = f"{row.get('parts_done', 0)}/{row['parts_total']}" if row.get("parts_total") else ""
        detail = row.get("reason") or row.get("source", "")
        # Escaped before layout (the columns are sized on what is shown); the console escapes
        # anything else that reaches it (splitstack/cli/terminal.py).
        shown = [printable(str(v)) for v in (row["job_id"], row.get("state", "?"), row.get("pages", ""), parts,
                                             row.get("processing_s", ""), detail, row.get("output", ""))]
        table.add_row(*shown[:5], escape(shown[5]), escape(shown[6]))
    console.print(table)


def _blocks(rows) -> None:
    """The narrow terminal's layout: a job's id, state and counts on one line, then its source or
    reason and its output each on a line of their own; rich never breaks these lines (a path
    longer than the terminal is left to the terminal, still one copyable line)."""
    for row in rows:
        parts = f" parts {row.get('parts_done', 0)}/{row['parts_total']}" if row.get("parts_total") else ""
        pages = f" pages {row['pages']}" if row.get("pages") not in (None, "") else ""
        seconds = f" {row['processing_s']} s" if row.get("processing_s") not in (None, "") else ""
        console.print(escape(printable(f"{row['job_id']}  {row.get('state', '?')}{pages}{parts}{seconds}")),
                      soft_wrap=True, highlight=False)
        if row.get("reason"):
            console.print(escape(printable(f"  reason: {row['reason']}")), soft_wrap=True, highlight=False)
        elif row.get("source"):
            console.print(escape(printable(f"  source: {row['source']}")), soft_wrap=True, highlight=False)
        if row.get("output"):
            console.print(escape(printable(f"  output: {row['output']}")), soft_wrap=True, highlight=False)
