"""The shadow sample on real processes (testsupport/migration.py: Redis, the router, the twin with
the mineru25-h200 profile, a MinerU worker per cohort): every sampled document is processed by
both cohorts, its copy's output lands beside its own, the gate compares the two, and the copy is
counted nowhere: not in the job list, not in the workers' SLO metrics, not in the dead letters
(even when the copy fails for good)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from pdf_fixtures import make_pdf

from bench.gating.cohorts import Criteria, judge
from contract.migration import MONOLITHIC, SPLIT, shadow_id
from testsupport.migration import TwoCohorts
from testsupport.procs import wait_until
from testsupport.worker import metric_value
from worker.jobs_view import list_jobs

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]


def _copies_finished(d: TwoCohorts, ids: list[str], timeout_s: float) -> dict[str, str]:
    r, stream = d.h.redis(), d.h.spec.queue.stream

    def states() -> dict[str, str] | None:
        got = {i: r.hget(f"{stream}:job:{shadow_id(i)}", "state") or "" for i in ids}
        return got if all(s in ("done", "dead_lettered") for s in got.values()) else None
    return wait_until(states, timeout_s, f"{len(ids)} shadow copies finished", interval_s=0.25)


def test_shadow_pairs_are_compared_and_counted_once(tmp_path: Path) -> None:
    pytest.importorskip("mineru", reason="the worker extra (mineru) is not installed")
    d = TwoCohorts(tmp_path)
    try:
        d.start()
        h, control = d.h, d.control
        docs = [make_pdf(tmp_path / "docs" / f"d{i}.pdf", 1, seed=i) for i in range(14)]
        r = d.run("migrate", to=10, shadow=100)  # every document also on the other cohort
        assert r.outcome == "applied" and control.shadow_share() == 100, r.render()
        assert any(e["params"].get("shadow") == 100 and any("shadow sample" in s for s in e["plan"])
                   for e in d.audit.records() if e.get("action") == "migrate")
        ids = h.submit(docs[:8])
        rows = h.wait_terminal(ids, timeout_s=180)
        assert {row["state"] for row in rows.values()} == {"done"}
        assert set(_copies_finished(d, ids, 180).values()) == {"done"}

        # the output of each copy lies beside its document's, from the other cohort
        for job_id, row in rows.items():
            mine = json.loads((h.outputs / job_id / "metadata.json").read_text())
            copy = json.loads((h.outputs / shadow_id(job_id) / "metadata.json").read_text())
            assert (mine["topology"], mine["shadow_of"]) == (row["topology"], None)
            assert copy["shadow_of"] == job_id and {mine["topology"], copy["topology"]} == {SPLIT, MONOLITHIC}
        pairs = control.shadow_pairs(time.time(), 300)
        assert pairs is not None and len(pairs) == 8
        assert [p.similarity for p in pairs] == [1.0] * 8  # the twin answers an image the same on both
        verdict = judge(control.samples(time.time(), 300, 20), Criteria(min_shadow_equivalent_fraction=0.5),
                        shadow=pairs)
        check = verdict.checks[-1]
        assert (check.name, check.judgement) == ("shadow output equivalence", "pass"), verdict.lines()
        assert check.measured.startswith("8/8 pairs equivalent")

        # counted once: the job list, the workers' counters (documents and pages)
        assert sorted(row["job_id"] for row in list_jobs(h.redis(), h.spec)) == sorted(ids)
        texts = [h.metrics(w) for w in d.workers]
        assert sum(metric_value(t, "mineru_pdfs_processed_total") for t in texts) == 8
        assert sum(metric_value(t, "mineru_pages_processed_total") for t in texts) == 8

        # a copy that fails is no dead letter and no failure: a document that is no PDF fails on
        # both cohorts for good; the dead letters and the failure counter hold it once
        bad = tmp_path / "docs" / "not-a.pdf"
        bad.write_bytes(b"this is no PDF\n" * 20)
        more = h.submit([bad])
        rows = h.wait_terminal(more, timeout_s=120)
        assert rows[more[0]]["state"] == "dead_lettered"
        assert _copies_finished(d, more, 120) == {more[0]: "dead_lettered"}
        assert [f["job_id"] for f in h.dead_letters()] == more
        texts = [h.metrics(w) for w in d.workers]
        assert sum(metric_value(t, "mineru_pdfs_failed_total") for t in texts) == 1
        assert sum(metric_value(t, "mineru_pdfs_processed_total") for t in texts) == 8
        pairs = control.shadow_pairs(time.time(), 300)
        assert pairs is not None and len(pairs) == 8  # a failed document is the error rate's, not a pair
        print("\n".join(d.timeline))
    finally:
        d.close()
