"""Calibration profiles: the numbers behind the simulator's latency model and answer shapes.

A profile is data (``simulator/profiles/<name>.yaml``) with its sources cited; this module only
defines the typed schema and loads it. Every default lives here, once.
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field, ValidationError, model_validator

from contract.models import Strict, describe

PROFILES_DIR = Path(__file__).parent / "profiles"


class ProfileError(ValueError):
    """A profile name or file that cannot be used (permanent: fix the input)."""


class Dist(Strict):
    """A seeded scalar distribution, clipped to [min, max] and rounded by the caller if needed."""

    kind: Literal["fixed", "uniform", "normal", "lognormal"] = Field(
        description="fixed: always `mean`; uniform: between min and max; "
                    "normal/lognormal: mean and sd of the value itself"
    )
    mean: float = Field(default=0.0, description="mean of the value (fixed: the value)")
    sd: float = Field(default=0.0, ge=0, description="standard deviation of the value")
    min: float = Field(default=0.0, description="lower clip")
    max: float = Field(default=1e9, description="upper clip")

    @model_validator(mode="after")
    def _check(self) -> Dist:
        if self.min > self.max:
            raise ValueError(f"min {self.min} > max {self.max}")
        if self.kind == "lognormal" and self.mean <= 0:
            raise ValueError("lognormal needs mean > 0")
        return self

    def sample(self, rng: random.Random) -> float:
        if self.kind == "fixed":
            value = self.mean
        elif self.kind == "uniform":
            value = rng.uniform(self.min, self.max)
        elif self.kind == "normal":
            value = rng.gauss(self.mean, self.sd)
        else:  # lognormal parameterised by the value's own mean and sd (easier to cite than mu/sigma)
            sigma2 = math.log(1.0 + (self.sd / self.mean) ** 2)
            mu = math.log(self.mean) - sigma2 / 2.0
            value = rng.lognormvariate(mu, math.sqrt(sigma2))
        return min(self.max, max(self.min, value))


class EngineLimits(Strict):
    """Scheduler limits, named like vLLM's flags (overridable from the command line)."""

    max_num_seqs: int = Field(default=256, ge=1, description="--max-num-seqs: most sequences in one batch")
    max_model_len: int = Field(default=16384, ge=16, description="--max-model-len: context length in tokens")
    max_num_batched_tokens: int = Field(
        default=8192, ge=1, description="token budget of one engine step (chunked prefill)")
    kv_cache_tokens: int = Field(default=1_048_576, ge=16, description="KV-cache capacity in tokens")
    block_size_tokens: int = Field(default=16, ge=1, description="KV-cache block size in tokens")


class LatencyModel(Strict):
    """Engine step time = step_base_ms + decode_per_seq_ms * decoding seqs
    + prefill_per_token_ms * prefill tokens + image_encode_ms * images started."""

    step_base_ms: float = Field(ge=0, description="fixed cost of one engine step (launch, sampling, scheduling)")
    decode_per_seq_ms: float = Field(ge=0, description="extra step time per sequence decoding in the step")
    prefill_per_token_ms: float = Field(ge=0, description="step time per prompt token prefilled in the step")
    image_encode_ms: float = Field(
        ge=0, description="vision-encoder time per image, charged in the step its prefill starts")
    image_patch_px: int = Field(default=28, ge=1, description="pixels per side of one image token after patch merging")
    image_max_tokens: int = Field(default=16384, ge=1, description="cap on tokens of one image")
    startup_s: float = Field(default=0.0, ge=0, description="time from process start to /health 200 (model load)")


class Footprint(Strict):
    """What one engine holds and how long it takes to load: the monolithic twin's per-worker costs
    (``--private-engines``: every worker carries its own engine, so N workers hold N copies)."""

    weights_bytes: int = Field(default=0, ge=0, description="GPU memory of one copy of the model weights, bytes")
    kv_bytes_per_token: int = Field(default=0, ge=0, description="KV-cache memory per token, bytes")
    engine_load_s: float = Field(
        default=0.0, ge=0,
        description="time an in-process engine takes to load before its worker is ready (monolithic mode); "
                    "a private engine answers /health 503 until then")


class MineruWorkload(Strict):
    """Shapes of MinerU answers, drawn per page/block from a seeded RNG."""

    blocks_per_page: Dist = Field(description="layout blocks planned per page")
    block_type_weights: dict[str, float] = Field(description="relative weight of each planned block type")
    output_tokens: dict[str, Dist] = Field(
        description="output tokens of a recognition answer by prompt kind: text, table, equation, image"
    )


class Reference(Strict):
    """Published capacity the profile was calibrated against (checked by a unit test)."""

    pages_per_s: float | None = Field(default=None, gt=0, description="pages/s at saturation")
    output_tokens_per_s: float | None = Field(default=None, gt=0, description="generated tokens/s at saturation")
    tolerance_frac: float = Field(default=0.2, gt=0, description="how close the simulated capacity must come")


class Profile(Strict):
    name: str = Field(description="profile name, equals the file stem")
    description: str
    sources: list[str] = Field(min_length=1, description="where the numbers come from")
    engine: EngineLimits = EngineLimits()
    latency: LatencyModel
    chat_output_tokens: Dist = Field(description="output length of a non-MinerU prompt without max_tokens")
    mineru: MineruWorkload
    reference: Reference = Reference()
    footprint: Footprint = Footprint()


def profile_names(directory: Path = PROFILES_DIR) -> list[str]:
    return sorted(p.stem for p in directory.glob("*.yaml"))


def load_profile(name_or_path: str, directory: Path = PROFILES_DIR) -> Profile:
    """Load a profile by name (a file in ``directory``) or by path to a YAML file."""
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        path = directory / f"{name_or_path}.yaml"
        if not path.is_file():
            raise ProfileError(
                f"unknown profile '{name_or_path}': valid names are {', '.join(profile_names(directory))} "
                f"(or pass a path to a profile .yaml)"
            )
    elif not path.is_file():
        raise ProfileError(f"profile file '{path}' does not exist")
    try:
        data = yaml.safe_load(path.read_text())
        return Profile.model_validate(data)
    except yaml.YAMLError as exc:
        raise ProfileError(f"profile file '{path}' is not valid YAML: {exc}") from exc
    except ValidationError as exc:
        problems = describe(exc)
        raise ProfileError(f"profile file '{path}' is invalid: {problems}") from exc
