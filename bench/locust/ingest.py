"""Turn a Locust run's per-process record files into one bench run (records, summary, report).

Phases are assigned here by send time relative to the first send (records of all machines
share wall-clock time); validity adds Locust's own CPU warnings, which mean a Locust process
was the bottleneck, the same rule the asyncio engine applies to itself.
"""

from __future__ import annotations

import re
from pathlib import Path

from bench.engine import RunResult
from bench.load import NS, LoadSpec
from bench.records import RequestRecord, read_jsonl
from bench.runner import summarize
from bench.scenario import ChatScenario
from bench.target import Target
from bench.validity import ValidityLimits

CPU_WARNING = re.compile(r"CPU usage (above|was too high)", re.I)


def ingest(records_dir: Path, scn: ChatScenario, target: Target, users: int, warmup_s: float,
           cooldown_s: float, locust_log: str = "", limits: ValidityLimits | None = None):
    files = sorted(records_dir.glob("*.jsonl"))
    if not files:
        raise FileNotFoundError(f"{records_dir}: no Locust record files (records-*.jsonl); collect them from "
                                "every worker machine into one folder")
    recs: list[RequestRecord] = [r for f in files for r in read_jsonl(f)]  # type: ignore[misc]
    if not recs:
        raise ValueError(f"{records_dir}: record files are empty: did the Locust run send anything?")
    t0 = min(r.sent_ns for r in recs)
    last = max(r.sent_ns for r in recs) - t0
    start, end = int(warmup_s * NS), max(int(warmup_s * NS) + 1, last - int(cooldown_s * NS))
    for r in recs:
        for name in ("intended_ns", "sent_ns", "headers_ns", "end_ns"):
            v = getattr(r, name)
            if v is not None:
                setattr(r, name, v - t0)
        r.event_ns = [t - t0 for t in r.event_ns]
        r.phase = "warmup" if r.sent_ns < start else ("cooldown" if r.sent_ns >= end else "measure")
    recs.sort(key=lambda r: r.sent_ns)
    load = LoadSpec(mode="closed", concurrency=users, duration_s=max(1e-3, (end - start) / NS),
                    warmup_s=warmup_s, cooldown_s=cooldown_s, seed=scn.load.seed)
    result = RunResult(recs, load, start, end, t0 / NS, last / NS, [], len(recs))  # type: ignore[arg-type]
    warnings = len(CPU_WARNING.findall(locust_log))
    extra = [{"check": "locust CPU warnings", "measured": warnings, "threshold": "== 0", "passed": warnings == 0,
              "why": "no Locust process reported high CPU" if warnings == 0 else
              "a Locust process reported CPU saturation: add workers (--processes / more machines)"}]
    summary = summarize(scn, target, result, limits or ValidityLimits(), t0 / NS, None, extra)
    summary["run"]["client"]["tool"] = "locust"
    return recs, summary
