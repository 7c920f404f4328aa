"""Recording rules for the migration's two cohorts side by side (split and monolithic).

Every worker series carries a ``topology`` label (the scrape target's label, contract/migration.py),
so one rule per measure, ``by (topology)``, gives both cohorts under the same traffic and the
same window: what the `cohorts` gate (bench/gating) and the dashboard's migration row read.
"""

from __future__ import annotations

from contract import metrics as c
from contract.migration import TOPOLOGY_LABEL
from slo.spec import SLOSpec

WINDOW = "5m"
ERROR_RATIO = f"slo:cohort_pdf_error_ratio:rate{WINDOW}"
P50 = f"slo:cohort_pdf_latency_p50_seconds:rate{WINDOW}"
P95 = f"slo:cohort_pdf_latency_p95_seconds:rate{WINDOW}"
PDFS_PER_S = f"slo:cohort_pdfs_per_second:rate{WINDOW}"
PAGES_PER_S = f"slo:cohort_pages_per_second:rate{WINDOW}"
CRASHES = "slo:cohort_worker_restarts:increase1h"
POISON = "slo:cohort_poison_jobs:increase1h"  # jobs that killed their workers (OOM, crash)
RECORDS = (ERROR_RATIO, P50, P95, PDFS_PER_S, PAGES_PER_S, CRASHES, POISON)
FILE_STEM = "migration-cohorts"


def cohort_rules(spec: SLOSpec) -> dict:
    """The rule group, as the generated file holds it."""
    sel = f'job="{spec.jobs.workers}"' + (f', namespace="{spec.jobs.namespace}"' if spec.jobs.namespace else "")
    by = f"sum by ({TOPOLOGY_LABEL})"

    def rate(metric: str, *extra: str) -> str:
        return f"{by} (rate({metric}{{{', '.join((sel, *extra))}}}[{WINDOW}]))"

    def quantile(q: str) -> str:
        return (f"histogram_quantile({q}, sum by (le, {TOPOLOGY_LABEL}) "
                f"(rate({c.PDF_END_TO_END_DURATION}_bucket{{{sel}}}[{WINDOW}])))")

    bad, good = rate(c.PDFS_FAILED), rate(c.PDFS_PROCESSED)
    rules: list[dict[str, object]] = [
        {"record": ERROR_RATIO, "expr": f"{bad} / ({good} + {bad})"},
        {"record": P50, "expr": quantile("0.5")},
        {"record": P95, "expr": quantile("0.95")},
        {"record": PDFS_PER_S, "expr": good},
        {"record": PAGES_PER_S, "expr": rate(c.PAGES_PROCESSED)},
        # A worker process restarted (crashed or recycled) after it had processed documents:
        # its processed counter went back to 0.
        {"record": CRASHES, "expr": f"{by} (resets({c.PDFS_PROCESSED}{{{sel}}}[1h]))"},
        {"record": POISON, "expr": f'{by} (increase({c.PDFS_FAILED}{{{sel}, kind="poison"}}[1h]))'},
    ]
    if spec.jobs.namespace:  # two stacks in one Prometheus: each one's records apart
        rules = [{**r, "labels": {"namespace": spec.jobs.namespace}} for r in rules]
    return {"groups": [{"name": "migration-cohorts", "interval": "30s", "rules": rules}]}
