"""Base of every action's parameters: unknown keys are errors (a typo must not vanish)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ActionParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ServerParams(ActionParams):
    server: str | None = Field(
        default=None, description="Inference server name from the spec; default: the workers' server."
    )
