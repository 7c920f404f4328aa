"""docs/reference/*.md are generated from the scenario and gate models: stale docs fail here."""

from bench.reference import DOCS, documents


def test_reference_docs_are_current():
    for name, text in documents().items():
        assert (DOCS / name).read_text() == text, f"docs/reference/{name} is stale: run `python -m bench.reference`"


def test_every_field_is_explained():
    for name, text in documents().items():
        for line in text.splitlines():
            if line.startswith("| `"):
                assert not line.rstrip().endswith("|  |"), f"{name}: no description for {line.split('|')[1]}"
