"""docs/reference/*.md are generated from the scenario and gate models, and docs/bench-metrics.md's
metric table from bench/metric_table.py: stale docs fail here."""

import pytest

from bench import metric_table
from bench.reference import DOCS, METRICS_BEGIN, METRICS_DOC, METRICS_END, documents, metric_table_block, metrics_doc


def test_reference_docs_are_current():
    for name, text in documents().items():
        assert (DOCS / name).read_text() == text, f"docs/reference/{name} is stale: run `python -m bench.reference`"


def test_every_field_is_explained():
    for name, text in documents().items():
        for line in text.splitlines():
            if line.startswith("| `"):
                assert not line.rstrip().endswith("|  |"), f"{name}: no description for {line.split('|')[1]}"


def test_metric_table_in_the_docs_is_current():
    text = METRICS_DOC.read_text()
    block = text.split(METRICS_BEGIN, 1)[1].split(METRICS_END, 1)[0]
    assert block == metric_table_block(), \
        "docs/bench-metrics.md's metric table is stale: run `python -m bench.reference`"
    assert metrics_doc(text) == text


def test_metric_table_block_has_one_row_per_metric():
    rows = [line for line in metric_table_block().splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == [m.name for m in metric_table.METRICS]


def test_a_doc_without_the_markers_is_refused_naming_them():
    with pytest.raises(ValueError, match="generated block's markers are missing"):
        metrics_doc("# bench metrics\n")
