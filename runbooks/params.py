"""Base of every action's parameters: unknown keys are errors (a typo must not vanish)."""

from __future__ import annotations

from pydantic import Field

from contract.models import Strict


class ActionParams(Strict):
    """Base of every action's parameters (strict: a typo in a parameter is refused)."""


class ServerParams(ActionParams):
    server: str | None = Field(
        default=None, description="Inference server name from the spec; default: the workers' server."
    )
