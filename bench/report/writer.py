"""Write a run's files: records.jsonl, summary.json, report.html and the CSV exports
requests.csv and timeseries.csv (one folder per run; docs/bench-report.md lists the columns)."""

from __future__ import annotations

import csv
import json
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, cast

from bench.heap import frozen_heap
from bench.records import AnyRecord, write_jsonl
from bench.report.html import render
from bench.report.series import TIME_COLUMNS, build
from bench.summary import GateVerdict, Summary, Sweep
from contract.spec_loader import project_root


def runs_dir() -> Path:
    """Where run folders go by default: ``<project root>/.state/bench``, beside the local stacks'
    state (the same folder wherever the bench is started from)."""
    return project_root() / ".state" / "bench"


def new_run_dir(out_dir: Path | None, name: str) -> Path:
    """``out_dir`` when given (refused if it already holds a run: a run folder is never
    overwritten), else a new folder ``<runs_dir>/<UTC time>-<name>`` (``-2``, ``-3``... when two
    runs start in the same second)."""
    if out_dir is not None:
        if (out_dir / "summary.json").exists():
            raise ValueError(f"--out {out_dir}: already holds a run; pass a new folder (or leave --out out: "
                             f"each run gets its own under {runs_dir()})")
        return out_dir
    base = runs_dir() / f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{name}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, float) and obj != obj:  # NaN is not JSON
        return None
    return obj


def write_summary(path: Path, summary: Summary) -> None:
    path.write_text(json.dumps(summary, indent=2, default=str, allow_nan=False) + "\n")


def write_run(out_dir: Path, records: list[AnyRecord], summary: Summary,
              gates: GateVerdict | None = None, sweep: Sweep | None = None) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"records": out_dir / "records.jsonl", "summary": out_dir / "summary.json",
             "report": out_dir / "report.html"}
    full = summary.copy()
    if gates is not None:
        full["gates"] = gates
    if sweep is not None:
        full["sweep"] = sweep
    with frozen_heap():  # the libraries and the records out of collections (bench/heap.py)
        write_jsonl(paths["records"], records)
        write_summary(paths["summary"], full)
        paths.update(write_report(out_dir, full, records))
    return paths


def write_report(out_dir: Path, summary: Summary, records: list[AnyRecord]) -> dict[str, Path]:
    """report.html, requests.csv and timeseries.csv of a run folder, from its summary and records."""
    rs = build(records)
    paths = {"report": out_dir / "report.html", "requests_csv": out_dir / "requests.csv",
             "timeseries_csv": out_dir / "timeseries.csv"}
    _write_csv(paths["requests_csv"], rs.columns, rs.rows)
    _write_csv(paths["timeseries_csv"], TIME_COLUMNS, rs.time_rows())
    paths["report"].write_text(render(summary, records, rs))
    return paths


def _write_csv(path: Path, columns: Sequence[str], rows: Iterable[dict[str, Any]]) -> None:
    """Empty cells for missing values; booleans as true/false."""
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(columns)
        for row in rows:
            w.writerow(["" if row.get(c) is None else str(row[c]).lower() if isinstance(row[c], bool) else row[c]
                        for c in columns])


class RunFolderError(ValueError):
    """A path given as a run folder that is not one (missing, or not written by the bench)."""


_RUN_HINT = "pass a run folder written by `bench run` or `bench gate` (it holds summary.json and records.jsonl)"


def load_summary(path: Path) -> Summary:
    if not path.exists():
        raise RunFolderError(f"{path}: no such file or folder; {_RUN_HINT}")
    p = path / "summary.json" if path.is_dir() else path
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        raise RunFolderError(f"{path}: no summary.json; {_RUN_HINT}") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise RunFolderError(f"{p}: not a bench summary ({type(exc).__name__}: {exc}); {_RUN_HINT}") from None
    if not isinstance(data, dict) or not isinstance(data.get("requests"), dict):
        raise RunFolderError(f"{p}: not a bench summary (no 'requests' section); {_RUN_HINT}")
    return cast(Summary, data)


def records_path(run_dir: Path) -> Path:
    """The run folder's records.jsonl; RunFolderError when the folder has none."""
    path = run_dir / "records.jsonl"
    if not path.is_file():
        raise RunFolderError(f"{run_dir}: no records.jsonl; {_RUN_HINT}")
    return path
