"""The shape of a run's summary (summary.json), and of `bench compare`'s result, typed.

TypedDicts, not models: the summary is built section by section (bench/metrics.py, then
bench/runner.py, Locust's ingest, the gate and sweep commands) and written with ``json.dumps`` as
it is, so typing it changes no byte of the file and costs nothing at run time; old summaries
read back (``bench compare``, ``bench report``) are the same dicts. Sections are optional
(``total=False``): a pipeline run has no ``goodput``, a chat run no ``requests_per_page``, a
summary of an older version may lack newer ones. Sections owned by other modules (the server's
metrics, the agreement checks, the sweep) stay plain mappings here.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired

# typing_extensions' TypedDict: pydantic validates it on Python 3.11 (the tests check real summaries
# against these types with a TypeAdapter), typing's only from 3.12.
from typing_extensions import TypedDict

# A distribution (bench/metrics.py: describe): {"n": 0} when empty. "p99.9" is not a Python name,
# hence the functional form.
Describe = TypedDict("Describe", {"n": int, "mean": float, "std": float, "min": float, "max": float,
                                  "p50": float, "p90": float, "p95": float, "p99": float, "p99.9": float},
                     total=False)


class Requests(TypedDict):
    sent: int
    ok: int
    errors: int
    error_rate: float | None
    all_phases: int


class Throughput(TypedDict, total=False):
    sent_rps: float
    actual_sent_rps: float
    completed_rps: float  # chat
    output_tokens_per_s: float
    goodput_rps: float
    documents_per_h: float  # pipeline
    pages_per_s: float


class Goodput(TypedDict):
    good: int
    fraction: float | None
    slo: dict[str, float]


class Tokens(TypedDict, total=False):
    output: Describe
    prompt: Describe
    prompt_mismatch_vs_server: int
    prompt_source: str | None  # added by bench/runner.py
    output_source: dict[str, int]
    continuous_usage_stats: bool
    merged_event_requests: Any


class Check(TypedDict):
    check: str
    measured: Any
    threshold: str
    passed: bool
    why: str | None


class Validity(TypedDict):
    valid: bool
    checks: list[Check]
    warnings: list[str]
    limits: dict[str, Any]


class FirstFailure(TypedDict):
    error: str
    detail: str | None
    at_s: float
    request_id: str


class Agreement(TypedDict):
    """The client's mean latency beside the server's histogram mean (bench/agreement.py)."""

    metric: str
    histogram: str
    client_ms: float
    server_ms: float
    client_n: int
    server_n: float
    diff_ms: float
    tolerance_ms: float
    agrees: bool


class CountAgreement(TypedDict):
    """The client's count beside the server's counter of the same thing (bench/agreement.py)."""

    count: str
    client: int
    server: int
    counter: str
    agrees: bool
    client_counted: NotRequired[int]


class Observer(TypedDict):
    """What the run asked of the server beyond its requests (bench/runner.py)."""

    continuous_usage_stats: bool
    server_gauge_interval_s: float
    server_metrics_reads: int
    text: NotRequired[str]


class SweepPoint(TypedDict):
    """One run of a sweep (bench/search.py)."""

    rate_rps: float
    repeat: int
    achieved_rps: float
    value: float | None
    error_rate: float | None
    valid: bool
    meets: bool
    percentiles: dict[str, float | None]
    output_tokens_per_s: float | None


class Sweep(TypedDict, total=False):
    """``bench sweep``'s result (bench/search.py): the runs and the maximum rate meeting the SLO."""

    metric: str
    percentile: float
    threshold: float
    spec: dict[str, Any]
    points: list[SweepPoint]
    client_limited: bool
    max_rate_rps: float | None
    ci_rps: list[float] | None
    bracket_rps: list[float]
    saturation_rps: float | None
    conclusion: str
    scenario: str


class GateVerdict(TypedDict):
    """The gates' verdict (bench/gating/verdict.py); each result is a GateResult dumped."""

    verdict: Literal["go", "no-go", "invalid"]
    exit_code: int
    reason: str
    results: list[dict[str, Any]]
    gate_file: NotRequired[str]


class Quantile(TypedDict):
    """A histogram quantile as an estimate inside one bucket, or why there is none
    (bench/server_metrics.py: bucket_quantile)."""

    estimate_s: float | None
    bucket_s: NotRequired[list[float]]
    why: NotRequired[str]


class HistogramDiff(TypedDict):
    count: float
    sum_s: float
    mean_s: float | None
    quantiles: dict[str, Quantile]
    buckets: dict[str, float]


class GaugeDiff(TypedDict):
    before: float | None
    after: float


class GaugeSample(TypedDict):
    t_s: float
    metric: str
    value: float


class GaugeStats(TypedDict):
    """A gauge sampled during the run (bench/sampler.py): samples, their maximum and mean."""

    n: int
    max: float
    mean: float


class ServerDiff(TypedDict):
    """The server's /metrics over the run (bench/server_metrics.py: diff), and its gauges sampled
    during it (bench/runner.py adds ``sampled``, ``samples`` and ``source``)."""

    histograms: dict[str, HistogramDiff]
    counters: dict[str, float]
    gauges: dict[str, GaugeDiff]
    sampled: NotRequired[dict[str, GaugeStats]]
    samples: NotRequired[list[GaugeSample]]
    source: NotRequired[str]


class RunFacts(TypedDict, total=False):
    scenario: str
    scenario_kind: str
    target: str | None
    queue: str | None
    deployment: str | None
    topology: str | None
    model: str | None
    stack: str | None
    load: dict[str, Any]
    load_label: str
    started_at_unix_s: float
    wall_s: float
    measure_start_ns: int
    measure_end_ns: int
    client: dict[str, Any]


class Summary(TypedDict, total=False):
    kind: Literal["chat", "pipeline"]
    window_s: float
    throughput_window_s: float
    requests: Requests
    errors_by_reason: dict[str, int]
    latency: dict[str, Describe]  # by metric of bench/metric_table.py
    throughput: Throughput
    goodput: Goodput  # chat
    tokens: Tokens  # chat
    requests_per_page: Describe  # pipeline
    percentile_method: str
    first_failures: list[FirstFailure]
    validity: Validity
    server: ServerDiff | None
    agreement: list[Agreement]
    count_agreement: list[CountAgreement]
    run: RunFacts
    pipeline: dict[str, Any]
    server_source: str
    observer: Observer | None
    tokenizer_crosscheck: dict[str, Any]
    gates: GateVerdict
    sweep: Sweep


# -- `bench compare` (bench/compare.py) ------------------------------------------------------

class CompareRow(TypedDict, total=False):
    """One statistic of one metric: both runs' values, the change, its interval and the call."""

    metric: str
    stat: str
    n_baseline: int
    n_candidate: int
    min_samples: int
    baseline: float
    candidate: float
    change: float
    ci_low: float
    ci_high: float
    call: str
    note: str


class CompareRunInfo(TypedDict):
    """What the side-by-side view shows of each run."""

    scenario: str | None
    target: str | None
    model: str | None
    load: str | None
    topology: str | None
    window_s: float | None
    valid: bool | None
    requests: Requests | dict[str, int]
    throughput: Throughput
    latency: dict[str, Describe]


class Comparison(TypedDict):
    """`bench compare`'s result (bench/compare.py)."""

    rows: list[CompareRow]
    confidence: float
    resamples: int
    validity: dict[str, bool | None]
    topology: dict[str, str | None]
    topologies_differ: bool
    differences: dict[str, list[str]]
    min_effect: float
    min_effect_error_rate: float
    min_samples: dict[str, int]
    runs: dict[str, CompareRunInfo]
    method: str
