"""The migration's cohort choice: deterministic per document, monotonic in the share; the shadow
sample: deterministic, independent of the cohort, whole documents only."""

from __future__ import annotations

import pytest

from contract.migration import (
    MONOLITHIC,
    SPLIT,
    bucket,
    check_share,
    cohort_of,
    cohort_stream,
    shadow_bucket,
    shadow_id,
    shadow_key,
    shadow_of,
    share_key,
)
from worker.jobs import Job, PartOf
from worker.router import shadow_args

IDS = [f"doc-{i}" for i in range(2000)]


def test_bucket_is_stable_and_spread() -> None:
    assert bucket("doc-1") == bucket("doc-1")
    counts = [0] * 10
    for i in IDS:
        counts[bucket(i) // 10] += 1
    assert all(150 <= c <= 250 for c in counts), counts  # 2000 ids over 10 deciles


def test_raising_the_share_only_adds_documents_to_split() -> None:
    on = {s: {i for i in IDS if cohort_of(i, s) == SPLIT} for s in (0, 10, 50, 100)}
    assert on[0] == set() and on[100] == set(IDS)
    assert on[10] <= on[50] <= on[100]
    assert 120 <= len(on[10]) <= 280 and 880 <= len(on[50]) <= 1120
    assert cohort_of("doc-1", 0) == MONOLITHIC


def test_names_and_bad_input() -> None:
    assert cohort_stream("jobs", SPLIT) == "jobs:split"
    assert share_key("jobs") == "jobs:migration:share"
    with pytest.raises(ValueError, match="topology 'gpu'"):
        cohort_stream("jobs", "gpu")
    with pytest.raises(ValueError, match="share 101 is outside 0..100"):
        check_share(101)


def test_the_shadow_sample_is_deterministic_and_independent_of_the_cohort() -> None:
    sample = {i for i in IDS if shadow_bucket(i) < 10}
    assert sample == {i for i in IDS if shadow_bucket(i) < 10}  # the same ids every time
    assert 120 <= len(sample) <= 280
    on_split = {i for i in IDS if cohort_of(i, 50) == SPLIT}
    # both cohorts' documents are in the sample, about half each
    assert 0.35 <= len(sample & on_split) / len(sample) <= 0.65
    assert shadow_key("jobs") == "jobs:migration:shadow"


def test_shadow_ids_name_their_document_and_no_other() -> None:
    assert shadow_id("doc-1") == "doc-1:shadow"
    assert shadow_of("doc-1:shadow") == "doc-1"
    assert shadow_of("doc-1:shadow.p0003") == "doc-1"  # a fanned-out shadow's part
    for plain in ("doc-1", "doc-1.p0003", "a:shadowy", ":shadow", "doc:shadow:x"):
        assert shadow_of(plain) is None, plain


def test_the_router_copies_whole_documents_only() -> None:
    job = Job(job_id="doc-7", source="/in/7.pdf", submitted_at=100.0)
    b, copy_json, doc, at = shadow_args(job)
    assert b == shadow_bucket("doc-7") and doc == "doc-7" and at == 100.0
    copy = Job.model_validate_json(str(copy_json))
    assert copy.job_id == "doc-7:shadow" and copy.source == job.source and copy.submitted_at == 100.0
    part = Job(job_id="doc-7.p0000", source="/in/7.pdf", part_of=PartOf(parent_id="doc-7", index=0, total=2))
    assert shadow_args(part) == []
    assert shadow_args(Job(job_id="doc-7:shadow", source="/in/7.pdf")) == []  # no copy of a copy
    assert shadow_args(Job(job_id="d" * 125, source="/in/7.pdf")) == []  # the copy's id would be too long
    assert shadow_args(None) == []
