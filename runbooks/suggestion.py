"""A next step a report suggests: one `runbook` action with its parameters, typed.

A :class:`Suggestion` is checked when it is made: the action must exist and take the parameters
given (its model in runbooks/params.py validates them, so a step that the command line would
refuse is a bug found where it is written, not at 3 a.m.). ``command()`` spells it as the
on-call engineer types it: ``runbook tune --set max_num_seqs=8  # why``.
"""

from __future__ import annotations

import shlex
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from contract.models import describe
from runbooks.names import Action
from runbooks.params import PARAMS, cli_flag


class Suggestion(BaseModel):
    model_config = ConfigDict(frozen=True)

    action: Action
    params: dict[str, Any] = Field(default_factory=dict, description="The action's parameters, by field name, "
                                   "in the order the command line spells them.")
    comment: str = Field(default="", description="Why, shown after `#`.")

    @model_validator(mode="after")
    def _action_takes_them(self) -> Suggestion:
        model = PARAMS[self.action]
        try:
            model.model_validate(self.params)
        except ValidationError as exc:
            raise ValueError(f"suggested `runbook {self.action}`: {describe(exc, root='params')}; "
                             f"it takes {', '.join(model.model_fields) or 'no parameters'}") from None
        return self

    def words(self) -> list[str]:
        """The command without its comment, one word each."""
        words = ["runbook", self.action.value]
        fields = PARAMS[self.action].model_fields
        for name, value in self.params.items():
            flag = cli_flag(name, fields[name])
            if isinstance(value, bool):
                words.append(f"--{flag}" if value else f"--no-{flag}")
            elif isinstance(value, dict):
                for key, item in value.items():
                    words += [f"--{flag}", f"{key}={item}"]
            else:
                words += [f"--{flag}", str(value)]
        return words

    def line(self) -> str:
        """The command as typed, without its comment."""
        return " ".join(shlex.quote(w) for w in self.words())

    def command(self) -> str:
        """The command as a report shows it: ``runbook ACTION OPTIONS  # comment``."""
        return self.line() + (f"  # {self.comment}" if self.comment else "")


NextStep = Suggestion | str  # a `runbook` action, or a step in words (another tool, a manual step)


def render(step: NextStep) -> str:
    return step if isinstance(step, str) else step.command()
