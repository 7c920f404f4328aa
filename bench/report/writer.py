"""Write a run's files: records.jsonl, summary.json, report.html (one folder per run)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from bench.records import AnyRecord, write_jsonl
from bench.report.html import render

RUNS_DIR = Path(".state/bench")  # default home of run folders, relative to where the bench runs


def new_run_dir(out_dir: Path | None, name: str) -> Path:
    """``out_dir`` when given, else a new folder ``.state/bench/<UTC time>-<name>``."""
    return out_dir or RUNS_DIR / f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{name}"


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, float) and obj != obj:  # NaN is not JSON
        return None
    return obj


def write_summary(path: Path, summary: dict[str, Any]) -> None:
    path.write_text(json.dumps(summary, indent=2, default=str, allow_nan=False) + "\n")


def write_run(out_dir: Path, records: list[AnyRecord], summary: dict[str, Any],
              gates: dict[str, Any] | None = None, sweep: dict[str, Any] | None = None) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"records": out_dir / "records.jsonl", "summary": out_dir / "summary.json",
             "report": out_dir / "report.html"}
    write_jsonl(paths["records"], records)
    full = dict(summary)
    if gates is not None:
        full["gates"] = gates
    if sweep is not None:
        full["sweep"] = sweep
    write_summary(paths["summary"], full)
    paths["report"].write_text(render(full, records))
    return paths


def load_summary(path: Path) -> dict[str, Any]:
    p = path / "summary.json" if path.is_dir() else path
    try:
        return json.loads(p.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{p}: no summary.json; pass a run folder written by `bench run`") from None
