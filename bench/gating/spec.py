"""Gate files (bench/gates/*.yaml): which scenario to run and which gates decide."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bench.gating.models import AnyGate
from bench.scenario import read_yaml
from bench.validity import ValidityLimits
from contract.models import error_lines

GATE_DIR = Path(__file__).resolve().parent.parent / "gates"


class GateFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    scenario: str = Field(description="Scenario name (bench/scenarios) or path.")
    load: dict[str, Any] = Field(default_factory=dict, description="Overrides of the scenario's load.")
    validity: ValidityLimits = Field(default_factory=ValidityLimits, description="When the run counts as a "
                                     "measurement; replaces the scenario's validity limits when given.")
    gates: list[AnyGate] = Field(min_length=1, description="The checks; each item's `kind` picks one below.")


class GateFileError(ValueError):
    pass


def load_gate_file(name_or_path: str) -> GateFile:
    path = Path(name_or_path)
    if not path.is_file():
        path = GATE_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in GATE_DIR.glob("*.yaml"))
        raise GateFileError(f"gate file {name_or_path!r} not found (bundled: {', '.join(known)})")
    try:
        return GateFile.model_validate(read_yaml(path, "gate file"))
    except ValidationError as exc:
        lines = [f"{path}: {line}" for line in error_lines(exc, model=GateFile)]
        raise GateFileError("invalid gate file:\n  " + "\n  ".join(lines)) from None
