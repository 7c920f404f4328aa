"""Everything the repository cites, a reader of the repository can open.

* Every requirement ID cited anywhere (``SLO-3``, ``ALERT-4``, ``RUNBOOK-6``, ``MIG-5``, ``CAP-7``,
  ``DASH-1``) is defined, once, in docs/requirements.md.
* Every repository path cited in docs, comments, docstrings, config or messages exists: a path
  that starts with one of the repository's top-level folders and ends in a file extension the
  repository uses (``bench/locust/session.py``), or a folder ending in ``/`` (``runbooks/pages/``).
  Paths resolve from the repository root, or from the citing file's folder (a markdown image).
  Examples that are not citations are listed in ``PATH_EXAMPLES`` with their reason.
* No file cites a document the repository does not hold (``BANNED``): it cites the requirement.
"""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = "docs/requirements.md"
SELF = "tests/unit/test_citations.py"

ID = re.compile(r"\b(?:SLO|ALERT|DASH|RUNBOOK|MIG|CAP)-\d+\b")
DEFINITION = re.compile(r"^\| ((?:SLO|ALERT|DASH|RUNBOOK|MIG|CAP)-\d+) \|", re.MULTILINE)

# Cited paths that are examples, not citations: path -> why it does not exist.
PATH_EXAMPLES = {
    "alerts/mine.rules.yml": "a made-up rule file name a test gives the PrometheusRule component",
    "bench/gates/NAME.yaml": "a placeholder in `bench gate --gate` help text",
    "images/lock/": "written by the image push per stack, never committed",
    "images/lock/prod.json": "written by the image push for prod, never committed",
    "simulator/profiles/my-gpu.yaml": "the output file of an example `sim fit` command",
}

# Files whose bytes are a cache key: an edit, even of a comment, invalidates the cache. Their
# cited paths are not checked (fix them with the next change of what the file pins).
FROZEN = {
    "tools/go-tools.env": "the Go tools cache key (tools/build-go-tools.sh digests the file): an edit rebuilds "
                          "every Go-built tool, 30-60 min on 2 cores",
}

# Documents the repository does not hold; cite the requirement ID (docs/requirements.md) instead.
BANNED = re.compile(
    r"operations manual|design doc(?:ument)?s?\b|\bthe manual\b|\bmanual's\b|\bmanual:|migration plan",
    re.IGNORECASE)
# (file, text on the line) where a banned phrase means something else.
BANNED_ALLOWED = {
    ("runbooks/actions/migrate.py", "is the manual abort"): "an operator's abort by hand, not a document",
}


def _files() -> list[str]:
    """Tracked files plus new ones not ignored (so a file is checked before its first commit)."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:  # pragma: no cover - needs git
        pytest.fail(f"listing the repository's files with `git ls-files` failed ({exc}); run the tests in "
                    "a git checkout")
    return sorted({f for f in out.decode().split("\0") if f and (ROOT / f).is_file()})


FILES = _files()


def _texts() -> dict[str, str]:
    texts = {}
    for f in FILES:
        try:
            texts[f] = (ROOT / f).read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # binary
    return texts


TEXTS = _texts()


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def defined_ids() -> Counter[str]:
    return Counter(DEFINITION.findall(TEXTS[REQUIREMENTS]))


def test_every_requirement_is_defined_once() -> None:
    ids = defined_ids()
    assert len(ids) >= 40, f"{REQUIREMENTS} defines only {sorted(ids)}: the table rows start `| ID |`"
    twice = sorted(i for i, n in ids.items() if n > 1)
    assert not twice, f"{REQUIREMENTS} defines these IDs more than once: {twice}; give each its own number"


def test_every_cited_requirement_id_is_defined() -> None:
    ids = defined_ids()
    undefined = [f"{f}:{_line(t, m.start())}: {m.group(0)}"
                 for f, t in TEXTS.items() if f != SELF for m in ID.finditer(t) if m.group(0) not in ids]
    assert not undefined, ("requirement IDs cited but not defined in docs/requirements.md (define them "
                           "there or cite an existing one):\n" + "\n".join(undefined))


def test_requirements_are_cited() -> None:
    """The IDs are used: the SLO spec, the generated alerts and the docs cite them."""
    cited = {m.group(0) for f, t in TEXTS.items() if f not in (REQUIREMENTS, SELF) for m in ID.finditer(t)}
    for f, must in (("slo/objectives.yaml", {"SLO-1", "SLO-3", "ALERT-1", "ALERT-4"}),
                    ("alerts/generated/pdf-error-rate.rules.yml", {"ALERT-4"}),
                    ("docs/migration.md", {"MIG-5", "MIG-8"})):
        assert must <= set(ID.findall(TEXTS[f])), f"{f} no longer cites {sorted(must - set(ID.findall(TEXTS[f])))}"
    assert len(cited) >= 25, f"only {sorted(cited)} are cited outside {REQUIREMENTS}"


# --- repository paths -------------------------------------------------------------------------------
TOPS = sorted({PurePosixPath(f).parts[0] for f in FILES if len(PurePosixPath(f).parts) > 1
               and not PurePosixPath(f).parts[0].startswith(".")})
EXTENSIONS = {PurePosixPath(f).suffix for f in FILES if PurePosixPath(f).suffix}
# A top-level folder, not preceded by a path or URL character (so ../x, /abs/x and https://.../x
# are not read as repository paths), then path characters.
_TOPS = "|".join(map(re.escape, TOPS))
PATH = re.compile(rf"(?<![\w./~$@-])(?:{_TOPS})/[\w./-]*")
FOLDERS = {str(p) for f in FILES for p in PurePosixPath(f).parents if str(p) != "."}


def cited_paths(text: str) -> list[tuple[int, str]]:
    """(position, path) for every repository path the text cites."""
    out = []
    for m in PATH.finditer(text):
        path = m.group(0).rstrip(".,;:")
        if path.endswith("/") or PurePosixPath(path).suffix in EXTENSIONS:
            out.append((m.start(), path))
    return out


def _exists(path: str, cited_in: str) -> bool:
    here = PurePosixPath(cited_in).parent
    for p in (PurePosixPath(path), here / path):
        if path.endswith("/") and (str(p).rstrip("/") in FOLDERS or (ROOT / p).is_dir()):
            return True
        if not path.endswith("/") and (ROOT / p).is_file():
            return True
    return False


def test_path_matcher_is_precise() -> None:
    text = ("see bench/locust/session.py, runbooks/pages/ and `slo/objectives.yaml`; not bench.metrics, "
            "bench/server_metrics.diff, ../generated/x.rules.yml, https://example.com/docs/a.md or "
            "stack/test fixtures")
    assert [p for _, p in cited_paths(text)] == [
        "bench/locust/session.py", "runbooks/pages/", "slo/objectives.yaml"]
    assert _exists("images/bench-report-run.png", "docs/bench-report.md")  # relative to the doc
    assert not _exists("bench/locust/cli.py", "docs/bench-locust.md")


def test_every_cited_repository_path_exists() -> None:
    dead = [f"{f}:{_line(t, pos)}: {path}" for f, t in TEXTS.items() if f != SELF and f not in FROZEN
            for pos, path in cited_paths(t) if path not in PATH_EXAMPLES and not _exists(path, f)]
    assert not dead, ("paths cited that do not exist (renamed or removed? cite the current path; an example "
                      "that is not a citation goes in PATH_EXAMPLES with its reason):\n" + "\n".join(dead))


def test_path_examples_are_still_cited_and_still_missing() -> None:
    cited = {p for f, t in TEXTS.items() if f != SELF for _, p in cited_paths(t)}
    stale = sorted(p for p in PATH_EXAMPLES if p not in cited or (ROOT / p).exists())
    assert not stale, f"PATH_EXAMPLES entries no longer needed (not cited, or the path now exists): {stale}"


# --- documents the repository does not hold ----------------------------------------------------------
def test_no_citation_of_documents_the_repository_does_not_hold() -> None:
    found = []
    for f, t in TEXTS.items():
        if f == SELF:
            continue
        for m in BANNED.finditer(t):
            start, end = t.rfind("\n", 0, m.start()) + 1, t.find("\n", m.end())
            line = t[start:end if end >= 0 else len(t)]
            if not any(f == af and snippet in line for af, snippet in BANNED_ALLOWED):
                found.append(f"{f}:{_line(t, m.start())}: {m.group(0)!r} in {line.strip()[:120]!r}")
    assert not found, ("these cite a document the repository does not hold; state the requirement in "
                       "docs/requirements.md and cite its ID instead:\n" + "\n".join(found))


def test_banned_phrases_are_caught() -> None:
    for text in ("as the Operations Manual says", "the design documents' claim", "the manual's ceiling",
                 "(manual: 2-4 per worker)", "source: migration plan (claim)", "the design doc"):
        assert BANNED.search(text), text
    for text in ("manual_alert:", "runbooks/capacity/manual_forecast.yaml", "load_manual()", "a manual step"):
        assert not BANNED.search(text), text
