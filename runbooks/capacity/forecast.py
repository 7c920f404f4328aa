"""Growth forecast: document volume per quarter -> inference servers, workers, monthly cost.

Spec (ForecastInputs, every field required, requirement CAP-6's values in manual_forecast.yaml),
a pure generator (forecast), and a reader for a bench summary's measured throughput.
"""

from __future__ import annotations

import json
import math
import re
from datetime import date
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

from contract.models import Strict

MANUAL_FILE = Path(__file__).parent / "manual_forecast.yaml"


class ForecastInputs(Strict):

    first_quarter: str = Field(description="e.g. 'Q1 2027' (the command line's "
                               "default: the current quarter).")
    quarters: int = Field(ge=1, le=40, description="Quarters to forecast.")
    avg_pdfs_per_day: float = Field(gt=0, description="Average volume in the first quarter.")
    quarterly_growth: float = Field(ge=0, le=10, description="Growth per quarter, 0.2 = 20 %.")
    peak_factor: float = Field(ge=1, description="Peak hour / average hour.")
    per_server_pdfs_per_hour: float = Field(gt=0, description="One inference server, PDFs/h.")
    per_worker_pdfs_per_hour: float = Field(gt=0, description="One CPU worker, PDFs/h.")
    max_workers_per_server: int = Field(ge=1, description="Workers one server can feed.")
    gpu_server_monthly_usd: float = Field(ge=0, description="One GPU server, USD/month.")
    worker_monthly_usd: float = Field(ge=0, description="One CPU worker, USD/month.")


    @field_validator("first_quarter")
    @classmethod
    def _quarter(cls, value: str) -> str:
        if not re.fullmatch(r"Q[1-4] \d{4}", value):
            raise ValueError(f"{value!r} is not a quarter: write Q<1-4> <year>, e.g. 'Q1 2027'")
        return value


class QuarterPlan(BaseModel):
    model_config = ConfigDict(frozen=True)

    quarter: str
    avg_pdfs_per_day: float
    peak_pdfs_per_hour: float
    servers: int
    workers: int
    capacity_pdfs_per_hour: float = Field(description="min(servers, workers) throughput.")
    monthly_cost_usd: float
    bound_by: str = Field(description="Which limit sized the servers: 'peak' or 'workers'.")


def load_manual() -> ForecastInputs:
    with open(MANUAL_FILE, encoding="utf-8") as fh:
        return ForecastInputs(**yaml.safe_load(fh))


def _quarter_label(first: str, offset: int) -> str:
    q, year = int(first[1]), int(first[3:])
    index = (q - 1) + offset
    return f"Q{index % 4 + 1} {year + index // 4}"


def forecast(inputs: ForecastInputs) -> list[QuarterPlan]:
    plans = []
    for i in range(inputs.quarters):
        per_day = inputs.avg_pdfs_per_day * (1 + inputs.quarterly_growth) ** i
        peak = per_day / 24 * inputs.peak_factor
        workers = math.ceil(round(peak / inputs.per_worker_pdfs_per_hour, 9))
        by_peak = math.ceil(round(peak / inputs.per_server_pdfs_per_hour, 9))
        by_workers = math.ceil(workers / inputs.max_workers_per_server)
        servers = max(1, by_peak, by_workers)
        capacity = min(servers * inputs.per_server_pdfs_per_hour,
                       workers * inputs.per_worker_pdfs_per_hour)
        plans.append(QuarterPlan(
            quarter=_quarter_label(inputs.first_quarter, i),
            avg_pdfs_per_day=per_day,
            peak_pdfs_per_hour=peak,
            servers=servers,
            workers=workers,
            capacity_pdfs_per_hour=capacity,
            monthly_cost_usd=servers * inputs.gpu_server_monthly_usd
            + workers * inputs.worker_monthly_usd,
            bound_by="workers" if by_workers > by_peak else "peak",
        ))
    return plans


class BenchSummaryError(ValueError):
    """The bench summary does not carry a usable throughput (permanent: fix the file)."""


def _read_summary(path: Path) -> dict[str, Any]:
    if not Path(path).is_file():
        raise BenchSummaryError(f"bench summary {path}: no such file; pass the summary.json of a bench run folder "
                                "(.state/bench/<run>/summary.json)")
    try:
        raw: Any = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise BenchSummaryError(f"bench summary {path}: cannot read JSON ({exc})") from exc
    data = raw.get("summary", raw) if isinstance(raw, dict) else {}
    return data if isinstance(data, dict) else {}


def _positive(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def per_server_from_bench(path: Path, *, pages_per_pdf: float | None = None) -> float:
    """PDFs/h one inference server sustained in a bench run.

    Reads the summary.json `bench run`/`bench gate` write for a pipeline scenario
    (`throughput.documents_per_h`, else `throughput.pages_per_s`), or a hand-written one with
    `pdfs_per_hour` / `pages_per_s` at the top level or under "summary"; pages need
    ``pages_per_pdf``. An optional `inference_servers` (default 1) gives a per-server figure from
    a run against several servers.
    """
    data = _read_summary(path)
    if data.get("kind") == "chat":
        raise BenchSummaryError(
            f"bench summary {path} is a chat run (requests, not PDFs): run a pipeline scenario "
            "(e.g. `bench run pipeline-smoke --stack local --concurrency 8`) and pass its summary.json")
    servers = data.get("inference_servers", 1)
    if not isinstance(servers, int) or servers < 1:
        raise BenchSummaryError(
            f"bench summary {path}: inference_servers {servers!r} must be a positive integer")
    throughput: dict[str, Any] = data["throughput"] if isinstance(data.get("throughput"), dict) else {}
    pdfs = _positive(data.get("pdfs_per_hour")) or _positive(throughput.get("documents_per_h"))
    if pdfs:
        return pdfs / servers
    pages = _positive(data.get("pages_per_s")) or _positive(throughput.get("pages_per_s"))
    if pages:
        if not pages_per_pdf:
            raise BenchSummaryError(
                f"bench summary {path} gives pages_per_s but no PDFs per hour: pass "
                f"--pages-per-pdf (average pages of one PDF) to convert it")
        return pages * 3600 / pages_per_pdf / servers
    raise BenchSummaryError(
        f"bench summary {path}: no completed documents (throughput.documents_per_h or pdfs_per_hour) "
        f"and no pages_per_s; run a pipeline scenario first or pass --per-server-pdfs-per-hour")


def bench_load_note(path: Path) -> str:
    """How far a bench figure is the server's capacity: an open loop below saturation measures
    the offered rate, not what the server can take."""
    load = (_read_summary(path).get("run") or {}).get("load") or {}
    if load.get("mode") == "open":
        return (f"an open loop at {load.get('rate_rps')} req/s: the rate offered, a lower bound of capacity "
                "unless the server was saturated (a closed loop or `bench sweep` measures capacity)")
    if load.get("mode") == "closed":
        return f"a closed loop with {load.get('concurrency')} users"
    return "load shape not recorded"


def current_quarter(today: date) -> str:
    return f"Q{(today.month - 1) // 3 + 1} {today.year}"


def render_table(plans: list[QuarterPlan]) -> str:
    """Requirement CAP-6's table layout plus capacity and cost columns (markdown)."""
    rows = ["| Quarter | Avg PDFs/Day | Peak PDFs/Hour | vLLM Servers | Workers | "
            "Capacity PDFs/Hour | Monthly Cost |",
            "|---|---|---|---|---|---|---|"]
    for p in plans:
        rows.append(
            f"| {p.quarter} | {p.avg_pdfs_per_day:,.0f} | {p.peak_pdfs_per_hour:,.0f} | "
            f"{p.servers} | {p.workers} | {p.capacity_pdfs_per_hour:,.0f} | "
            f"${p.monthly_cost_usd:,.0f} |")
    return "\n".join(rows)



def forecast_inputs(overrides: dict[str, Any], bench_summary: Path | None = None,
                    pages_per_pdf: float | None = None, today: date | None = None) -> tuple[ForecastInputs, str]:
    """Requirement CAP-6's inputs with the command line's overrides (None = keep) and, from a bench
    summary, the per-server capacity; returns them with where that capacity came from. The
    forecast starts in the quarter of ``today`` (the clock's) unless ``first_quarter`` is given.
    Raises BenchSummaryError or pydantic's ValidationError naming the bad input."""
    updates = {k: v for k, v in overrides.items() if v is not None}
    updates.setdefault("first_quarter", current_quarter(today or date.today()))
    source = f"requirement CAP-6 ({MANUAL_FILE.relative_to(MANUAL_FILE.parents[2])})"
    if bench_summary is not None:
        updates["per_server_pdfs_per_hour"] = per_server_from_bench(bench_summary, pages_per_pdf=pages_per_pdf)
        source = f"bench summary {bench_summary} ({bench_load_note(bench_summary)})"
    return ForecastInputs.model_validate({**load_manual().model_dump(), **updates}), source
