"""Two cohorts under the same traffic, in the same window: the migration's live judgement.

Each criterion of the production rollout (error rate < 0.1 % and no worse than the monolithic
baseline; p95 latency within 10 % of it; no worker crash) is judged on an interval, not a point:

* ``fail`` when the interval is wholly on the wrong side (a breach, certain at 95 %): the
  migration aborts;
* ``pass`` when it is wholly on the right side;
* ``too_few`` when it straddles the bound: too few documents to judge, wait for more.

Error rates use Wilson score intervals (a 0-error cohort of n documents has an upper bound of
about 3.8/n, so "< 0.1 %" can pass only from about 3,800 documents); the p95 ratio uses a seeded
bootstrap and needs ``min_samples_for(95)`` documents per cohort.

The shadow sample (contract/migration.py: some documents processed by both cohorts) is judged
on its output equivalence: a pair is equivalent when the two Markdown outputs, normalized
(whitespace runs collapsed, blank lines dropped), have a line similarity of at least
``shadow_min_similarity`` (difflib's ratio over the lists of lines: 1.0 when identical). Not
strict equality, because vLLM does not promise bit-identical output under different batching
(a greedy decode can flip a token where two logits tie), and the two cohorts batch differently;
a line-level ratio keeps one changed block in a long document from failing the pair while a
different layout or a missing page does. The equivalent fraction is judged on a Wilson interval
against ``min_shadow_equivalent_fraction``.
"""

from __future__ import annotations

import difflib
import math
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from bench.stats import min_samples_for
from contract.migration import MONOLITHIC, SPLIT

Judgement = Literal["pass", "fail", "too_few"]
Z95 = 1.959964


class CohortSample(BaseModel):
    """One document of the window: its cohort, whether it succeeded, its latency."""

    model_config = ConfigDict(frozen=True)
    topology: Literal["split", "monolithic"]
    ok: bool
    latency_s: float | None = Field(default=None, ge=0, description="Submission to output (ok ones).")
    pages: int = Field(default=0, ge=0, description="Pages of the document (ok ones; 0 when unknown).")


class ShadowPair(BaseModel):
    """One document of the shadow sample: processed by its cohort and, as a copy, by the other."""

    model_config = ConfigDict(frozen=True)
    document_id: str
    topology: Literal["split", "monolithic"] = Field(description="The cohort the document itself went to.")
    similarity: float | None = Field(default=None, ge=0, le=1, description="markdown_similarity of the two "
                                     "outputs; None when the shadow copy failed (no second output).")


class Criteria(BaseModel):
    """The rollout's criteria, judged on 95 % intervals."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    max_error_fraction: float = Field(default=0.001, gt=0, lt=1, description="Split cohort's error rate must "
                                      "be below this (and no worse than the monolithic cohort's).")
    max_p95_increase_fraction: float = Field(default=0.10, ge=0, description="Split cohort's p95 latency may "
                                             "exceed the monolithic cohort's by at most this fraction.")
    max_crashes: int = Field(default=0, ge=0, description="Split-cohort worker crashes allowed in the window.")
    min_latency_documents: int = Field(
        default=min_samples_for(95), ge=2, description="Ok documents per cohort before the p95 is judged "
        "(default: enough for 10 beyond the p95); a short drill may lower it, at the cost of wider intervals.")
    shadow_min_similarity: float = Field(
        default=0.95, gt=0, le=1, description="A shadow pair is equivalent when its normalized Markdown line "
        "similarity is at least this (1.0: identical text).")
    min_shadow_equivalent_fraction: float = Field(
        default=0.9, gt=0, le=1, description="Share of shadow pairs that must be equivalent (95 % interval); "
        "0 mismatches pass from about 35 pairs at 0.9.")


class Check(BaseModel):
    name: str
    judgement: Judgement
    measured: str
    bound: str


class CohortVerdict(BaseModel):
    judgement: Judgement  # fail if any fails, else too_few if any is, else pass
    checks: list[Check]
    counts: dict[str, int]
    pages: dict[str, int] = Field(default_factory=dict, description="Pages of the ok documents per cohort.")

    def lines(self) -> list[str]:
        return [f"{c.name}: {c.judgement} (measured {c.measured}; bound {c.bound})" for c in self.checks]


def normalized_lines(markdown: str) -> list[str]:
    return [line for line in (" ".join(raw.split()) for raw in markdown.splitlines()) if line]


def markdown_similarity(a: str, b: str) -> float:
    """1.0 for the same text up to whitespace; the share of matching lines otherwise."""
    la, lb = normalized_lines(a), normalized_lines(b)
    if la == lb:
        return 1.0
    return difflib.SequenceMatcher(None, la, lb, autojunk=False).ratio()


def _shadow_check(pairs: list[ShadowPair], criteria: Criteria) -> Check:
    compared = [p for p in pairs if p.similarity is not None]
    same = sum(p.similarity is not None and p.similarity >= criteria.shadow_min_similarity for p in compared)
    failed = len(pairs) - len(compared)
    n = len(compared)
    lo, hi = wilson(same, n)
    want = criteria.min_shadow_equivalent_fraction
    judgement: Judgement = "pass" if lo >= want else "fail" if hi < want else "too_few"
    worst = min((p.similarity for p in compared if p.similarity is not None), default=None)
    return Check(name="shadow output equivalence", judgement=judgement,
                 measured=f"{same}/{n} pairs equivalent, 95 % interval {lo:.1%}..{hi:.1%}"
                          + (f", lowest similarity {worst:.3f}" if worst is not None else "")
                          + (f"; {failed} shadow cop{'y' if failed == 1 else 'ies'} failed (not compared)"
                             if failed else ""),
                 bound=f">= {want:.0%} of pairs with normalized Markdown line similarity "
                       f">= {criteria.shadow_min_similarity:g}")


def wilson(bad: int, n: int) -> tuple[float, float]:
    if n == 0:
        return 0.0, 1.0
    p = bad / n
    den = 1 + Z95 ** 2 / n
    mid = (p + Z95 ** 2 / (2 * n)) / den
    half = Z95 * math.sqrt(p * (1 - p) / n + Z95 ** 2 / (4 * n * n)) / den
    return max(0.0, mid - half), min(1.0, mid + half)


def _p95_ratio_ci(split: np.ndarray, mono: np.ndarray, draws: int = 2000) -> tuple[float, float, float]:
    rng = np.random.default_rng(0)  # seeded: the same window gives the same verdict
    s = np.percentile(rng.choice(split, (draws, split.size)), 95, axis=1)
    m = np.percentile(rng.choice(mono, (draws, mono.size)), 95, axis=1)
    ratio = s / np.maximum(m, 1e-9)
    point = float(np.percentile(split, 95) / max(float(np.percentile(mono, 95)), 1e-9))
    return point, float(np.percentile(ratio, 2.5)), float(np.percentile(ratio, 97.5))


def _side(low: float, high: float, bound: float) -> Judgement:
    return "fail" if low > bound else "pass" if high <= bound else "too_few"


def judge(samples: list[CohortSample], criteria: Criteria, crashes: dict[str, int] | None = None,
          shadow: list[ShadowPair] | None = None) -> CohortVerdict:
    """``shadow``: the window's shadow pairs (None: no shadow sample taken, the check is left out)."""
    by = {t: [s for s in samples if s.topology == t] for t in (SPLIT, MONOLITHIC)}
    n = {t: len(v) for t, v in by.items()}
    bad = {t: sum(not s.ok for s in v) for t, v in by.items()}
    checks: list[Check] = []
    lo, hi = wilson(bad[SPLIT], n[SPLIT])
    checks.append(Check(name="split error rate", judgement=_side(lo, hi, criteria.max_error_fraction),
                        measured=f"{bad[SPLIT]}/{n[SPLIT]}, 95 % interval {lo:.4%}..{hi:.4%}",
                        bound=f"< {criteria.max_error_fraction:.2%}"))
    mlo, mhi = wilson(bad[MONOLITHIC], n[MONOLITHIC])
    worse: Judgement = "fail" if lo > mhi else "pass" if hi <= max(mhi, criteria.max_error_fraction) else "too_few"
    checks.append(Check(name="split error rate vs monolithic", judgement=worse,
                        measured=f"split {lo:.4%}..{hi:.4%}, monolithic {bad[MONOLITHIC]}/{n[MONOLITHIC]} "
                                 f"{mlo:.4%}..{mhi:.4%}", bound="split no worse (intervals)"))
    need = criteria.min_latency_documents
    lat = {t: np.array([s.latency_s for s in v if s.ok and s.latency_s is not None]) for t, v in by.items()}
    limit = 1 + criteria.max_p95_increase_fraction
    if min(lat[SPLIT].size, lat[MONOLITHIC].size) < need:
        checks.append(Check(name="p95 latency vs monolithic", judgement="too_few",
                            measured=f"{lat[SPLIT].size} split / {lat[MONOLITHIC].size} monolithic ok documents",
                            bound=f"ratio <= {limit:g}; needs >= {need} ok documents per cohort"))
    else:
        point, rlo, rhi = _p95_ratio_ci(lat[SPLIT], lat[MONOLITHIC])
        checks.append(Check(name="p95 latency vs monolithic", judgement=_side(rlo, rhi, limit),
                            measured=f"ratio {point:.3f}, 95 % interval {rlo:.3f}..{rhi:.3f}",
                            bound=f"<= {limit:g}"))
    if crashes is not None:
        got = crashes.get(SPLIT, 0)
        checks.append(Check(name="split worker crashes", judgement="fail" if got > criteria.max_crashes else "pass",
                            measured=str(got), bound=f"<= {criteria.max_crashes}"))
    if shadow is not None:
        checks.append(_shadow_check(shadow, criteria))
    js = {c.judgement for c in checks}
    overall: Judgement = "fail" if "fail" in js else "too_few" if "too_few" in js else "pass"
    pages = {t: sum(s.pages for s in v if s.ok) for t, v in by.items()}
    return CohortVerdict(judgement=overall, checks=checks, counts=n, pages=pages)
