"""The migration's cohort choice: deterministic per document, monotonic in the share."""

from __future__ import annotations

import pytest

from contract.migration import MONOLITHIC, SPLIT, bucket, check_share, cohort_of, cohort_stream, share_key

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
