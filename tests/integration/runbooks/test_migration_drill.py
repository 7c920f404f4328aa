"""The migration drill, shortened: both topologies at once on real processes (Redis, the router,
the twin with the mineru25-h200 profile: a shared server for the split cohort and a private
engine for the monolithic one, a MinerU worker per cohort: testsupport/migration.py).

0 -> 10 % by `runbook migrate`, then the fault phase at 50 %: a 500 storm on the split cohort's
server, `runbook migrate-guard` aborts to 0 % with a page; the fault is cleared and every
document ends exactly once, in the cohort the router chose, with its output naming that
topology. (The promotion path 10 -> 50 -> 100 with its gates is in test_migrate_actions.py: a
passing window needs hundreds of documents per cohort, more than a CI run of the twin has; the
full drill under steady load is benchmarks/migration_drill.py.)"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from pdf_fixtures import make_pdf

from contract.migration import MONOLITHIC, SPLIT
from testsupport.migration import TwoCohorts

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]


def test_drill_abort_on_a_500_storm_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    pytest.importorskip("mineru", reason="the worker extra (mineru) is not installed")
    d = TwoCohorts(tmp_path)
    try:
        d.start()
        h, control = d.h, d.control
        docs = [make_pdf(tmp_path / "docs" / f"d{i}.pdf", 1, seed=i) for i in range(24)]
        assert d.run("migrate", to=10).outcome == "applied"
        ids = h.submit(docs[:8])
        h.wait_terminal(ids, timeout_s=180)
        control.set_share(50)  # the fault phase starts at 50 %
        d.note("share set to 50 % (drill)")
        d.fault(error_rate=1.0, error_status=500)
        t_fault = time.time()
        ids += h.submit(docs[8:])
        r = d.run("migrate-guard", watch_s=240, every_s=2)
        assert r.outcome == "rolled_back" and control.share() == 0, (r.render(), d.timeline)
        t_abort = time.time() - t_fault
        assert d.pages and "-> 0 %" in d.pages[0]
        d.fault(error_rate=0.0)
        rows = h.wait_terminal(ids, timeout_s=240)
        # every document exactly once: one record, one terminal state, at most one output, in its cohort
        assert len(rows) == len(ids) == len(set(ids)) == 24
        cohorts = {job_id: row.get("topology") for job_id, row in rows.items()}
        assert set(cohorts.values()) <= {SPLIT, MONOLITHIC} and SPLIT in cohorts.values()
        done = [job_id for job_id, row in rows.items() if row["state"] == "done"]
        assert len(done) >= 8, rows  # at least the eight submitted before the fault
        for job_id in done:
            meta = json.loads((h.outputs / job_id / "metadata.json").read_text())
            assert meta["topology"] == cohorts[job_id], (job_id, meta["topology"], cohorts[job_id])
        assert d.router.alive()
        d.note(f"abort {t_abort:.1f} s after the fault; states "
               f"{sorted((v['state'], cohorts[k]) for k, v in rows.items())}")
        print("\n".join(d.timeline))
    finally:
        d.close()
