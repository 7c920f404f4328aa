"""Turn a Locust run's per-process record files into one bench run (records, summary, report).

Phases are assigned here by send time relative to the first send (records of all machines
share wall-clock time); validity adds Locust's own CPU warnings, which mean a Locust process
was the bottleneck, the same rule the asyncio engine applies to itself, and, when the folder has
the master's ``collection.json`` (bench/locust/collect.py), whether every expected worker was
there, drained, and delivered every record it sent: a run with lost records is not a valid run.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, cast

from bench.engine import RunResult
from bench.load import NS, LoadSpec
from bench.locust.manifest import MANIFEST, RECORD_GLOB, read_manifest
from bench.records import AnyRecord, RequestRecord, read_jsonl
from bench.runner import summarize
from bench.scenario import ChatScenario
from bench.summary import Check, ServerDiff
from bench.target import Target
from bench.validity import ValidityLimits

# a local process's own warnings, and the master's about its workers
CPU_WARNING = re.compile(r"CPU usage (above|was too high)|exceeded cpu threshold", re.I)


def collection_check(manifest: dict[str, Any]) -> Check:
    """Validity check: every expected worker connected, drained, and delivered all its records."""
    workers = manifest["workers"]
    expected, connected = manifest["expected_workers"], len(manifest["connected_at_start"])
    sent = sum(w["records_sent"] or 0 for w in workers)
    received = sum(w["records_received"] for w in workers)
    abandoned = sum(w["abandoned"] or 0 for w in workers)
    problems = []
    if connected < expected:
        problems.append(f"only {connected} of {expected} workers were connected when the load started")
    silent = sorted(set(manifest["connected_at_start"]) - {w["client_id"] for w in workers})
    if silent:
        problems.append(f"workers {silent} were connected at the start but sent no records and never drained")
    for w in workers:
        if not w["drained"]:
            problems.append(f"worker {w['index']} ({w['tag']}) never confirmed its drain (it died, or lost its "
                            "connection): its last records may be missing")
        elif w["records_received"] != w["records_sent"]:
            problems.append(f"worker {w['index']} ({w['tag']}): the master got {w['records_received']} of "
                            f"{w['records_sent']} records")
    if abandoned:
        problems.append(f"{abandoned} requests were still in flight after the drain and are not recorded "
                        "(raise --drain-timeout-s)")
    return {"check": "locust records complete",
            "measured": f"{received} of {sent} records from {len(workers)} of {expected} workers, "
                        f"{abandoned} abandoned",
            "threshold": "all workers, all records, 0 abandoned", "passed": not problems,
            "why": "; ".join(problems) if problems else f"every worker's records arrived ({MANIFEST})"}


def ingest(records_dir: Path, scn: ChatScenario, target: Target, users: int, warmup_s: float,
           cooldown_s: float, locust_log: str = "", limits: ValidityLimits | None = None,
           server: ServerDiff | None = None, rate_rps: float | None = None):
    """``server``: the server's /metrics diffed across the run (bench/locust/session.py scrapes it).
    ``rate_rps``: the run's --rate; the load is then a constant-rate open loop, and validity checks
    that Locust achieved it (its users pace themselves and fall short when responses are slow)."""
    files = sorted(records_dir.glob(RECORD_GLOB))
    if not files:
        raise FileNotFoundError(f"{records_dir}: no Locust record files ({RECORD_GLOB}): pass the folder of the "
                                "headless process or master (<out>/locust-records); workers ship theirs to it")
    # Locust users run chat scenarios: every record in these files is a RequestRecord.
    recs = cast(list[RequestRecord], [r for f in files for r in read_jsonl(f)])
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
    window = {"duration_s": max(1e-3, (end - start) / NS), "warmup_s": warmup_s, "cooldown_s": cooldown_s,
              "seed": scn.load.seed}
    load = LoadSpec.model_validate({"mode": "open", "arrival": "constant", "rate_rps": rate_rps, **window}
                                   if rate_rps else {"mode": "closed", "concurrency": users, **window})
    result = RunResult(cast(list[AnyRecord], recs), load, start, end, t0 / NS, last / NS, [], len(recs))
    warnings = len(CPU_WARNING.findall(locust_log))
    extra: list[Check] = [{
        "check": "locust CPU warnings", "measured": warnings, "threshold": "== 0", "passed": warnings == 0,
        "why": "no Locust process reported high CPU" if warnings == 0 else
        "a Locust process reported CPU saturation: add Locust processes (--processes N / more machines)"}]
    manifest = read_manifest(records_dir)
    if manifest is not None:
        extra.append(collection_check(manifest))
    summary = summarize(scn, target, result, limits or scn.validity, t0 / NS, server, extra)
    summary["run"]["client"]["tool"] = "locust"
    summary["run"]["client"]["locust"] = manifest  # mode and per-worker counts (None: collected by hand)
    return recs, summary
