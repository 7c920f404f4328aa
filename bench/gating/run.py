"""A gate run: a gate file's scenario against a target, its gates evaluated, the verdict and the
run folder written. `bench gate`, `bench check` and `splitstack demo` call this; they only print
what it returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import httpx
from rich.console import Console

from bench.gating.context import GateContext
from bench.gating.spec import GateFile, load_gate_file
from bench.gating.verdict import evaluate, verdict
from bench.progress import DEFAULT_EVERY_S, plan_for, run_progress
from bench.records import AnyRecord, read_jsonl
from bench.report.writer import load_summary, new_run_dir, records_path, write_run
from bench.runner import run_scenario
from bench.scenario import ChatScenario, PipelineScenario, load_scenario
from bench.summary import GateVerdict, Summary
from bench.target import QueueOptions, Target, resolve


@dataclass(frozen=True)
class GateRun:
    """What a gate run produced: the run's summary, the verdict (exit code inside) and its files."""

    summary: Summary
    gates: GateVerdict
    paths: dict[str, Path]

    @property
    def exit_code(self) -> int:
        return int(self.gates["exit_code"])


def load_gate(gate_file: str) -> tuple[GateFile, ChatScenario | PipelineScenario]:
    """The gate file and its scenario, with the file's load overrides applied."""
    gf = load_gate_file(gate_file)
    return gf, load_scenario(gf.scenario, gf.load)


def load_run(run_dir: Path) -> tuple[Summary, list[AnyRecord]]:
    """A run folder's summary and records (a clear FileNotFoundError when it is not a run)."""
    summary = load_summary(run_dir)
    return summary, list(read_jsonl(records_path(run_dir)))


def run_gate(gate_file: str, *, target: Target | None = None, stack: str | None = "local",
             url: str | None = None, model: str | None = None, api_key_env: str | None = None,
             queue: QueueOptions | None = None, baseline: Path | None = None, out_dir: Path | None = None,
             console: Console | None = None, topology: str | None = None,
             progress_every: float = DEFAULT_EVERY_S, tokenizer: str | None = None) -> GateRun:
    """Run the gate file's scenario against ``target`` (or the target the options name), evaluate
    its gates and write the run folder. ``console`` shows progress: a live line on a terminal, else
    a line every ``progress_every`` seconds.
    Raises ValueError/RuntimeError for inputs or targets that cannot be run (exit 2 territory)."""
    gf, scn = load_gate(gate_file)
    run_dir = new_run_dir(out_dir, f"gate-{gf.name}")  # a bad --out or baseline is refused before any load
    base_sum, base_rec = load_run(baseline) if baseline is not None else (None, None)
    target = target or resolve(stack, url, model, api_key_env, None, queue, scn.kind == "pipeline", topology)
    res = run_scenario(scn, target, tokenizer=tokenizer,
                       limits=gf.validity if "validity" in gf.model_fields_set else scn.validity,
                       shown=(lambda: run_progress(plan_for(scn.load, f"gate {gf.name}"), console, progress_every,
                                                   counts=scn.load.processes == 1)) if console is not None else None)
    with httpx.Client(timeout=30.0) as http:
        results = evaluate(gf.gates, GateContext(res.summary, res.records, target, http, base_sum, base_rec))
    g = _verdict(res.summary, results)
    g["gate_file"] = gf.name
    paths = write_run(run_dir, res.records, res.summary, gates=g)
    return GateRun(res.summary, g, paths)


def check_run(run_dir: Path, gate_file: str, baseline: Path | None = None) -> GateRun:
    """Evaluate a gate file's offline gates on a run already on disk; rewrites its summary and report."""
    gf = load_gate_file(gate_file)
    summary, records = load_run(run_dir)
    base_sum, base_rec = load_run(baseline) if baseline is not None else (None, None)
    results = evaluate(gf.gates, GateContext(summary, records, None, None, base_sum, base_rec))
    g = _verdict(summary, results)
    without_gates = summary.copy()
    without_gates.pop("gates", None)
    paths = write_run(run_dir, records, without_gates, gates=g)
    return GateRun(summary, g, paths)


def _verdict(summary: Summary, results: list) -> GateVerdict:
    bad = [f"{c['check']}: {c['why']}" for c in summary["validity"]["checks"] if not c["passed"]]
    return verdict(results, summary["validity"]["valid"], bad)
