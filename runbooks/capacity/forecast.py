"""Growth forecast: document volume per quarter -> inference servers, workers, monthly cost.

Spec (ForecastInputs, every field required, the manual's values in manual_forecast.yaml),
a pure generator (forecast), and a reader for a bench summary's measured throughput.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from contract.models import Strict

MANUAL_FILE = Path(__file__).parent / "manual_forecast.yaml"


class ForecastInputs(Strict):

    first_quarter: str = Field(pattern=r"^Q[1-4] \d{4}$", description="e.g. 'Q1 2025'.")
    quarters: int = Field(ge=1, le=40, description="Quarters to forecast.")
    avg_pdfs_per_day: float = Field(gt=0, description="Average volume in the first quarter.")
    quarterly_growth: float = Field(ge=0, le=10, description="Growth per quarter, 0.2 = 20 %.")
    peak_factor: float = Field(ge=1, description="Peak hour / average hour.")
    per_server_pdfs_per_hour: float = Field(gt=0, description="One inference server, PDFs/h.")
    per_worker_pdfs_per_hour: float = Field(gt=0, description="One CPU worker, PDFs/h.")
    max_workers_per_server: int = Field(ge=1, description="Workers one server can feed.")
    gpu_server_monthly_usd: float = Field(ge=0, description="One GPU server, USD/month.")
    worker_monthly_usd: float = Field(ge=0, description="One CPU worker, USD/month.")


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


def per_server_from_bench(path: Path, *, pages_per_pdf: float | None = None) -> float:
    """PDFs/h one inference server sustained in a bench run.

    Reads, at the top level or under "summary": `pdfs_per_hour` (preferred) or `pages_per_s`
    (then pages_per_pdf is required), and optionally `inference_servers` (default 1) to get a
    per-server figure from a run against several servers.
    """
    try:
        raw: Any = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise BenchSummaryError(f"bench summary {path}: cannot read JSON ({exc})") from exc
    data = raw.get("summary", raw) if isinstance(raw, dict) else {}
    if not isinstance(data, dict):
        data = {}
    servers = data.get("inference_servers", 1)
    if not isinstance(servers, int) or servers < 1:
        raise BenchSummaryError(
            f"bench summary {path}: inference_servers {servers!r} must be a positive integer")
    if isinstance(data.get("pdfs_per_hour"), (int, float)) and data["pdfs_per_hour"] > 0:
        return float(data["pdfs_per_hour"]) / servers
    if isinstance(data.get("pages_per_s"), (int, float)) and data["pages_per_s"] > 0:
        if not pages_per_pdf:
            raise BenchSummaryError(
                f"bench summary {path} gives pages_per_s but no pdfs_per_hour: pass "
                f"--pages-per-pdf (average pages of one PDF) to convert it")
        return float(data["pages_per_s"]) * 3600 / pages_per_pdf / servers
    raise BenchSummaryError(
        f"bench summary {path}: no positive 'pdfs_per_hour' or 'pages_per_s' at the top level "
        f"or under 'summary'; run the bench first or pass --per-server-pdfs-per-hour")


def render_table(plans: list[QuarterPlan]) -> str:
    """The manual's table layout plus capacity and cost columns (markdown)."""
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
                    pages_per_pdf: float | None = None) -> tuple[ForecastInputs, str]:
    """The manual's inputs with the command line's overrides (None = keep) and, from a bench
    summary, the per-server capacity; returns them with where that capacity came from.
    Raises BenchSummaryError or pydantic's ValidationError naming the bad input."""
    updates = {k: v for k, v in overrides.items() if v is not None}
    source = f"manual ({MANUAL_FILE.relative_to(MANUAL_FILE.parents[2])})"
    if bench_summary is not None:
        updates["per_server_pdfs_per_hour"] = per_server_from_bench(bench_summary, pages_per_pdf=pages_per_pdf)
        source = f"bench summary {bench_summary}"
    return ForecastInputs.model_validate({**load_manual().model_dump(), **updates}), source
