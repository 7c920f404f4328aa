"""The bench's side of a Locust run: pick the chat scenario and target, watch the server's own
metrics while Locust runs, and turn the shipped records into the bench's run folder."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from bench import server_metrics
from bench.locust.ingest import ingest
from bench.locust.launch import RunPaths, all_logs
from bench.locust.settings import LocustSettings
from bench.report.writer import write_run
from bench.scenario import ChatScenario, load_chat_scenario
from bench.server_view import ServerView
from bench.summary import ServerDiff, Summary
from bench.target import Target, resolve
from contract.extras import check


def chat_scenario_and_target(scenario: str, stack: str | None, url: str | None, model: str | None,
                             api_key_env: str | None, tokenizer: str | None = None) -> tuple[ChatScenario, Target]:
    """The scenario and target of a Locust run, checked as `bench run` checks them (the tokenizer
    loads, the server is up, takes the key and serves the model) before Locust starts."""
    from bench.runner import preflight
    from bench.tokcheck import for_run

    check("locust", "bench", "`bench locust`")
    scn, target = load_chat_scenario(scenario), resolve(stack, url, model, api_key_env)
    for_run(scn, tokenizer)
    with httpx.Client() as http:
        preflight(scn, target, http)  # a server that is down or refuses the key: refused before Locust starts
    return scn, target


def watch_server(target: Target, launch: Callable[[], Any]) -> tuple[ServerDiff | None, str]:
    """Run ``launch`` while the server's own metrics are scraped (before, every second, after), as
    `bench run` does, so Locust runs get the same server diff, gauges and client/server agreement."""
    with httpx.Client(timeout=30.0) as http:
        view = ServerView(target, http)
        before = view.before()
        with view.sampler() as sampler:
            launch()
        after = view.after()
    server = server_metrics.diff(before, after)
    if server is not None:
        server.update({"sampled": sampler.summary(), "samples": sampler.samples, "source": view.source})
    return server, view.source


def finish_run(paths: RunPaths, scn: ChatScenario, target: Target, settings: LocustSettings,
               rate_rps: float | None, server: ServerDiff | None,
               source: str) -> tuple[Summary, dict[str, Path]]:
    """Ingest the records folder into records.jsonl, summary.json and report.html."""
    recs, summary = ingest(paths.records, scn, target, settings.users, settings.warmup_s, settings.cooldown_s,
                           all_logs(paths), server=server, rate_rps=rate_rps)
    summary["server_source"] = source
    return summary, write_run(paths.out_dir, recs, summary)


class RecordsProgress:
    """Counts for the progress display of a Locust run, read from its records folder while the
    run goes (finished requests and errors; the headless process and the master write the records
    as they arrive, workers ship theirs every second). Reads only what was appended since the
    last call."""

    def __init__(self, records_dir: Path) -> None:
        self.dir = records_dir
        self.offsets: dict[Path, int] = {}
        self.done = 0
        self.errors = 0

    def __call__(self) -> tuple[int, int, int]:
        for path in sorted(self.dir.glob("records-*.jsonl")) if self.dir.is_dir() else []:
            start = self.offsets.get(path, 0)
            if path.stat().st_size < start:  # rewritten (the folder is cleared when a run starts)
                start = 0
            with open(path, "rb") as fh:
                fh.seek(start)
                chunk = fh.read()
            end = chunk.rfind(b"\n") + 1  # whole lines only: the rest is read next time
            lines = chunk[:end]
            self.offsets[path] = start + end
            self.done += lines.count(b"\n")
            self.errors += lines.count(b'"error":"')
        return self.done, self.errors, -1  # -1: requests in flight are not known here
