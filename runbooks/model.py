"""What every runbook action returns and raises: a :class:`Report`, or one of two failures.

The two failures follow the kopf split (STYLE 6): :class:`Refused` is permanent (bad input, a
target that is not the spec's, a precondition that does not hold: nothing was changed, running
again will not help) and :class:`PlatformError` is an operation the platform could not do right
now (unreachable cluster or Prometheus, a timeout: nothing or only compensated changes remain,
retrying later may work).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, computed_field, model_serializer

from runbooks.cases import Case
from runbooks.suggestion import NextStep, render


class Refused(Exception):
    """Permanent: the action will not run; the message names the bad input and the fix."""


class PlatformError(Exception):
    """Retryable: the platform (cluster, local stack, Prometheus) failed or did not answer."""


Outcome = Literal["planned", "applied", "noop", "refused", "rolled_back", "failed", "report"]


class PlannedStep(BaseModel):
    """One change (or check) an action makes, as shown in the dry-run plan and the audit log."""

    model_config = ConfigDict(frozen=True)

    verb: str = Field(description="What is done: restart, set, scale, cordon, delete-pod, check...")
    target: str = Field(description="The component, node or object it acts on.")
    detail: str = Field(default="", description="Values and why.")

    def line(self) -> str:
        return f"{self.verb} {self.target}" + (f": {self.detail}" if self.detail else "")


class Report(BaseModel):
    """The result of one action run; rendered by the CLI and written to the audit log.

    ``suggestions`` are the next steps as made (typed `runbook` actions, or words);
    ``next_steps`` is how they read, and what the JSON output carries.
    """

    model_config = ConfigDict(extra="forbid")

    action: str = Field(description="The action's name (runbooks/names.py), or what was asked for when "
                        "no such action exists.")
    outcome: Outcome
    summary: str = Field(description="One line an on-call engineer reads first.")
    case: Case | None = Field(default=None, description="The runbook case this handles or found.")
    plan: list[PlannedStep] = Field(default_factory=list)
    done: list[str] = Field(default_factory=list, description="Steps executed, in order.")
    evidence: list[str] = Field(default_factory=list, description="What was observed, and where.")
    suggestions: list[NextStep] = Field(default_factory=list, exclude=True,
                                        description="What to run next: `runbook` actions, or steps in words.")
    data: dict[str, Any] = Field(default_factory=dict)

    @computed_field(description="`runbook ...` commands (and other steps) to run next, as typed.")  # type: ignore[prop-decorator]
    @property
    def next_steps(self) -> list[str]:
        return [render(s) for s in self.suggestions]

    @model_serializer(mode="wrap")
    def _data_last(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """The JSON output keeps its order: evidence, next_steps, then data."""
        out: dict[str, Any] = handler(self)
        if "data" in out:
            out["data"] = out.pop("data")
        return out

    @property
    def ok(self) -> bool:
        return self.outcome in ("planned", "applied", "noop", "report")

    def render(self) -> str:
        lines = [f"[{self.outcome}] {self.action}: {self.summary}"]
        if self.case:
            lines.append(f"case: {self.case}")
        if self.evidence:
            lines.append("evidence:")
            lines += [f"  - {e}" for e in self.evidence]
        if self.plan:
            lines.append("plan:" if self.outcome == "planned" else "plan (as run):")
            lines += [f"  {i}. {s.line()}" for i, s in enumerate(self.plan, 1)]
        if self.done:
            lines.append("done:")
            lines += [f"  - {d}" for d in self.done]
        if self.next_steps:
            lines.append("next:")
            lines += [f"  $ {n}" for n in self.next_steps]
        if self.outcome == "planned":
            lines.append("dry run: nothing was changed; add --apply to run the plan")
        return "\n".join(lines)
