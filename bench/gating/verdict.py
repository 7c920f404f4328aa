"""Evaluate gates and turn the results into a verdict with an exit code.

0 go: the run is valid and every required gate passed.
1 no-go: the run is valid and at least one gate failed.
2 invalid: the run itself is invalid (client bottleneck, too few samples) or a required gate
  could not be evaluated -- the bench cannot vouch for the answer, so it gives none.
"""

from __future__ import annotations

from typing import Literal

from bench.gating.context import GateContext, GateResult
from bench.summary import GateVerdict

EXIT = {"go": 0, "no-go": 1, "invalid": 2}


def evaluate(gates: list, ctx: GateContext) -> list[GateResult]:
    return [g.evaluate(ctx) for g in gates]


def verdict(results: list[GateResult], run_valid: bool, invalid_reasons: list[str] | None = None) -> GateVerdict:
    v: Literal["go", "no-go", "invalid"]
    failed = [r for r in results if r.status == "fail"]
    unknown = [r for r in results if r.status == "not_evaluable" and r.required]
    if not run_valid:
        v = "invalid"
        reason = "the run is invalid: " + "; ".join(invalid_reasons or ["see validity checks"])
    elif failed:
        v = "no-go"
        reason = "failed: " + ", ".join(r.name for r in failed)
    elif unknown:
        v = "invalid"
        reason = "required gates could not be evaluated: " + ", ".join(r.name for r in unknown)
    else:
        v = "go"
        skipped = [r.name for r in results if r.status == "not_evaluable"]
        reason = f"all {len(results) - len(skipped)} evaluated gates passed" + (
            f" ({len(skipped)} optional not evaluated: {', '.join(skipped)})" if skipped else "")
    return {"verdict": v, "exit_code": EXIT[v], "reason": reason,
            "results": [r.model_dump() for r in results]}
