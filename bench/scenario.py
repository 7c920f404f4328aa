"""Scenarios as validated YAML: ``chat`` (OpenAI chat completions) and ``pipeline`` (PDFs
through the worker queue). Unknown keys are errors, and errors name the file and field."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import numpy as np
import yaml
from pydantic import Field, TypeAdapter, ValidationError, model_validator

from bench.dataset import read_trace
from bench.load import LoadSpec
from bench.validity import ValidityLimits
from contract.models import StrictMutable, error_lines, format_loc

SCENARIO_DIR = Path(__file__).parent / "scenarios"


class Strict(StrictMutable):
    """Scenario models: unknown keys are errors; runs fill some fields in after parsing."""


class Dist(Strict):
    """A length distribution in tokens, sampled with the run's seed and clipped to [min, max]."""

    kind: Literal["fixed", "uniform", "normal", "lognormal"] = Field(default="fixed", description="Shape.")
    mean: float = Field(gt=0, description="Mean (fixed: the value), tokens.")
    sd: float = Field(default=0.0, ge=0, description="Standard deviation, tokens.")
    min: int = Field(default=1, ge=1, description="Lower clip, tokens.")
    max: int = Field(default=1_000_000, ge=1, description="Upper clip, tokens.")

    @model_validator(mode="after")
    def _bounds(self) -> Dist:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) > max ({self.max})")
        if self.kind in ("normal", "lognormal") and self.sd <= 0:
            raise ValueError(f"kind {self.kind!r} needs sd > 0")
        return self

    def sample(self, rng: np.random.Generator, n: int) -> list[int]:
        if self.kind == "fixed":
            v = np.full(n, self.mean)
        elif self.kind == "uniform":
            v = rng.uniform(self.min, self.max + 1, n)
        elif self.kind == "normal":
            v = rng.normal(self.mean, self.sd, n)
        else:  # lognormal parameterised by the mean and sd of the lengths themselves
            s2 = np.log(1 + (self.sd / self.mean) ** 2)
            v = rng.lognormal(np.log(self.mean) - s2 / 2, np.sqrt(s2), n)
        return [int(x) for x in np.clip(np.floor(v), self.min, self.max)]


class Images(Strict):
    count: int = Field(default=0, ge=0, le=16, description="Images per request (0 = text only).")
    width_px: int = Field(default=256, ge=8, le=4096, description="Image width, pixels.")
    height_px: int = Field(default=256, ge=8, le=4096, description="Image height, pixels.")


class RequestSLO(Strict):
    """Per-request objectives for goodput: a request is 'good' when it meets every one set."""

    ttft_ms: float | None = Field(default=None, gt=0, description="Max time to first token, ms.")
    tpot_ms: float | None = Field(default=None, gt=0, description="Max time per output token, ms.")
    e2e_ms: float | None = Field(default=None, gt=0, description="Max end-to-end latency, ms.")


class Dataset(Strict):
    """The user's own prompts (bench/dataset.py): each request of the pool is one of its records."""

    path: str = Field(description="JSONL of prompts or chat messages, or ShareGPT-style conversations (a JSON "
                      "array or JSONL); relative to the scenario file, or absolute.")
    format: Literal["auto", "prompts", "chat", "sharegpt"] = Field(
        default="auto", description="Record shape; auto tells them apart by their keys (prompt, messages, "
        "conversations).")
    order: Literal["shuffle", "file"] = Field(
        default="shuffle", description="shuffle: a seeded sample (load.seed) in random order; file: as written.")
    limit: int | None = Field(default=None, ge=1, le=100_000, description="Use at most this many records.")
    output_tokens: Literal["dataset", "scenario"] = Field(
        default="dataset", description="dataset: each record's max_tokens, else its answer's length (ShareGPT), "
        "else the scenario's output_tokens; scenario: always the scenario's output_tokens.")


class ChatScenario(Strict):
    kind: Literal["chat"]
    name: str
    description: str = ""
    stream: bool = Field(default=True, description="Stream the answers (SSE).")
    continuous_usage_stats: bool = Field(
        default=False,
        description="Ask for usage on every streamed event (vLLM's stream_options.continuous_usage_stats): exact "
        "tokens per event, so ITL is per token even when the server merges tokens into one event, at a cost to "
        "the server on every event (docs/bench-metrics.md, 'What the bench costs the server'). Off (default): "
        "usage at the end only, as other tools ask and every server accepts; ITL counts one token per event "
        "with text, and the summary says how many answers had tokens merged into events.")
    prompt_tokens: Dist | None = Field(
        default=None, description="Prompt length (text part), tokens, made exact with the server's /tokenize or, "
        "on a server without one, the run's tokenizer. Not with a dataset (its records are the prompts).")
    dataset: Dataset | None = Field(default=None, description="Send the user's own prompts instead of generated "
                                    "ones (bench/dataset.py has the formats).")
    output_tokens: Dist = Field(description="max_tokens of each request, tokens.")
    ignore_eos: bool = Field(
        default=True, description="vLLM's ignore_eos so outputs have exactly max_tokens tokens."
    )
    temperature: float = Field(default=0.0, ge=0, le=2, description="Sampling temperature of every request.")
    images: Images = Field(default_factory=Images, description="Generated images sent with each prompt.")
    prompt_pool: int = Field(default=128, ge=1, le=100_000, description="Distinct prepared requests.")
    server_gauge_interval_s: float = Field(
        default=1.0, ge=0,
        description="How often the server's queue and KV gauges are sampled from its /metrics during the "
        "run, s; 0 = never. Each sample makes the server render its whole exposition (~50 KB on vLLM "
        "0.32, on its API event loop), a few ms that land in some requests' latency: turn it off when "
        "measuring the client's own timing accuracy.")
    keep_output: bool = Field(default=False, description="Keep generated text in the records.")
    tokenizer: str | None = Field(
        default=None,
        description="Hugging Face tokenizer directory (or locally cached name). On a server with /tokenize: the "
        "client-side token-count cross-check (bench/tokcheck.py; a warning only, the server's counts stay "
        "authoritative; outputs are checked with keep_output). On a server without /tokenize: what counts the "
        "prompts (and outputs, when the server sends no usage). `bench run --tokenizer` overrides it.",
    )
    slo: RequestSLO = Field(default_factory=RequestSLO, description="Per-request objectives for goodput.")
    validity: ValidityLimits = Field(
        default_factory=ValidityLimits,
        description="When the run counts as a measurement (bench/validity.py); a gate file's own validity "
        "limits replace these.")
    load: LoadSpec = Field(description="How requests are sent: open or closed loop, rate, duration.")

    @model_validator(mode="after")
    def _one_prompt_source(self) -> ChatScenario:
        if (self.prompt_tokens is None) == (self.dataset is None):
            raise ValueError("set exactly one of prompt_tokens (generated prompts) or dataset (your own)")
        if self.dataset is not None and self.images.count:
            raise ValueError("images: generated images go with generated prompts; put a dataset's images in its "
                             "records (images: [paths] or image_url parts)")
        return self


class Documents(Strict):
    directory: str | None = Field(default=None, description="Folder of PDFs to submit (cycled).")
    generate_count: int = Field(default=0, ge=0, description="Else: PDFs generated (seeded).")
    pages: Dist = Field(default_factory=lambda: Dist(kind="fixed", mean=2, max=50),
                        description="Pages of generated PDFs.")

    @model_validator(mode="after")
    def _one_source(self) -> Documents:
        if (self.directory is None) == (self.generate_count == 0):
            raise ValueError("documents: set exactly one of directory or generate_count")
        return self


class PipelineScenario(Strict):
    kind: Literal["pipeline"]
    name: str
    description: str = ""
    documents: Documents = Field(description="The PDFs submitted.")
    job_timeout_s: float = Field(default=300.0, gt=0, description="A document not done by then fails.")
    poll_interval_s: float = Field(default=0.05, gt=0, description="How often completion is checked, s.")
    stall_timeout_s: float = Field(
        default=60.0, gt=0,
        description="The run is stalled (and invalid) when no outstanding document changes state (picked "
        "up, part done, done) for this long, s; keep it above the longest single-document processing time.")
    validity: ValidityLimits = Field(
        default_factory=ValidityLimits,
        description="When the run counts as a measurement (bench/validity.py); a gate file's own validity "
        "limits replace these.")
    load: LoadSpec = Field(description="How requests are sent: open or closed loop, rate, duration.")


Scenario = Annotated[ChatScenario | PipelineScenario, Field(discriminator="kind")]
_ADAPTER: TypeAdapter[ChatScenario | PipelineScenario] = TypeAdapter(Scenario)


class ScenarioError(ValueError):
    pass


def _loc(loc: tuple) -> str:
    if loc and loc[0] in ("chat", "pipeline"):  # the discriminator tag pydantic inserts
        loc = loc[1:]
    return format_loc(loc)


def parse_scenario(data: object, origin: str) -> ChatScenario | PipelineScenario:
    try:
        return _ADAPTER.validate_python(data)
    except ValidationError as exc:
        problems = error_lines(exc, root="<top>", loc=_loc, model=(ChatScenario, PipelineScenario))
        lines = [f"{origin}: {line}" for line in problems]
        raise ScenarioError("invalid scenario:\n  " + "\n  ".join(lines)) from None


def load_scenario(name_or_path: str, overrides: dict | None = None) -> ChatScenario | PipelineScenario:
    """A scenario by file path or by name in bench/scenarios; ``overrides`` patch ``load``."""
    path = Path(name_or_path)
    if not path.is_file():
        path = SCENARIO_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml"))
        raise ScenarioError(f"scenario {name_or_path!r}: no such file and no bundled scenario of "
                            f"that name (bundled: {', '.join(known)})")
    data = read_yaml(path, "scenario")
    if overrides:
        check_load_flags(overrides)
    if overrides and isinstance(data, dict):
        load = dict(data.get("load") or {})
        for key, value in overrides.items():
            if value is None:
                continue
            if key in ("rate_rps", "concurrency"):  # switching loop kind clears the other knob
                load.pop("concurrency" if key == "rate_rps" else "rate_rps", None)
                load["mode"] = "open" if key == "rate_rps" else "closed"
            if key in ("duration_s", "count"):
                load.pop("count" if key == "duration_s" else "duration_s", None)
            load[key] = value
        data["load"] = load
    scn = parse_scenario(data, str(path))
    if isinstance(scn, ChatScenario) and scn.dataset is not None:
        ds = Path(scn.dataset.path)
        scn.dataset.path = str(ds if ds.is_absolute() else (path.parent / ds).resolve())
    if scn.load.arrival == "trace" and scn.load.trace_path:
        read_trace(Path(scn.load.trace_path))  # a bad trace is refused here, naming its line
    return scn


# The command-line flag of each ``load`` override: what an error about an override names.
LOAD_FLAGS = {"rate_rps": "--rate", "concurrency": "--concurrency", "duration_s": "--duration-s",
              "count": "--count", "processes": "--processes", "seed": "--seed", "normalize": "--normalize",
              "fail_fast_s": "--fail-fast-s"}
# Flags that pick one of two ways to do the same thing: giving both is refused, never resolved silently.
EXCLUSIVE_LOAD_FLAGS = (("rate_rps", "concurrency", "an open loop at a rate or a closed loop of users"),
                        ("duration_s", "count", "a measured window in seconds or a number of measured requests"),
                        ("normalize", "concurrency", "normalize rescales an open loop's arrivals"))


def check_load_flags(overrides: dict) -> None:
    """Refuse load flags given together that contradict each other, and flag values out of the
    ``load`` field's bounds, naming the flag (not the scenario file the value would land in)."""
    given = {k: v for k, v in overrides.items() if v is not None}
    for a, b, why in EXCLUSIVE_LOAD_FLAGS:
        if a in given and b in given:
            raise ScenarioError(f"{LOAD_FLAGS.get(a, a)} and {LOAD_FLAGS.get(b, b)} were both given: {why}; "
                                "give one of them")
    for key, value in given.items():
        field = LoadSpec.model_fields.get(key)
        if field is None or not field.metadata:
            continue
        try:
            TypeAdapter(Annotated[field.annotation, *field.metadata]).validate_python(value)  # type: ignore[arg-type]
        except ValidationError as exc:
            msg = exc.errors()[0]["msg"].removeprefix("Input should be ").removeprefix("Value error, ")
            raise ScenarioError(f"{LOAD_FLAGS.get(key, key)} {value}: must be {msg}") from None


def read_yaml(path: Path, what: str) -> object:
    """A YAML file's document; a file that is not YAML names itself, the line and the problem."""
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        context, start = getattr(exc, "context", None), getattr(exc, "context_mark", None)
        if context and start is not None:
            problem += f"; {context} on line {start.line + 1}"
        raise ScenarioError(f"{what} {path}:{where}: not valid YAML ({problem}); fix the file "
                            "(indentation, a missing ':' or an unclosed quote or bracket)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"{what} {path}: cannot be read ({exc})") from None


def load_chat_scenario(name_or_path: str) -> ChatScenario:
    """A ``chat`` scenario, the only kind the Locust users send; a pipeline scenario is refused."""
    scn = load_scenario(name_or_path)
    if not isinstance(scn, ChatScenario):
        raise ScenarioError(f"scenario {name_or_path!r} is a {scn.kind} scenario: the locustfile drives chat "
                            "scenarios; run pipeline scenarios with `bench run`")
    return scn
