"""The migration drill, measured: 10 % -> 50 % -> 100 % of documents on the split cohort under
steady load, then the same with faults on the split cohort's server, aborted by migrate-guard.

Run (~14 minutes on 2 cores: run A ~6, run B ~8):

    PYTHONPATH=$PWD .venv/bin/python benchmarks/migration_drill.py

On real processes (testsupport/migration.py): Redis, the router, the twin with the
``mineru25-h200`` profile (a shared server for the split cohort, one private engine per
monolithic worker), ``--split-workers`` + ``--mono-workers`` MinerU workers, each reading its
cohort's stream. A load thread submits one 1-page document every ``1 / --rate`` seconds for the
whole run; a shadow sample (``--shadow`` percent) is processed by both cohorts.

* run A, healthy: ``runbook migrate --to 10``; hold; ``--to 50`` (retried while the gate says
  "too few documents to judge"); hold; ``--to 100`` (waits for the monolithic stream to drain,
  stops the monolithic pool); hold.
* run B, faults: 10 %, then 50 % through the gate as in A; a 500 storm on the split server
  with ``runbook migrate-guard`` watching -> abort to 0 %; the storm cleared, a recovery at 0 %;
  the share set back to 50 % (a drill shortcut: a real re-promotion walks 10 -> 50 through the
  gate again); a hang (every request to the split server unanswered) -> abort again.

The windows are short, so the drill promotes with looser bounds than the rollout's gate
(bench/gates/migration-cohorts.yaml needs thousands of documents per cohort to pass "< 0.1 %"):
they are printed with the gate; migrate-guard judges by the rollout's own gate file, where one
failed split document in the window is a breach. Printed: a timeline every ``--tick-s`` (share, per cohort over
the last ``--window-s``: documents, error rate, p95; documents submitted and done), every
action's gate output, the abort times, and the accounting at the end (submitted, done, dead-
lettered, lost, duplicated), then the audit log.
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # testsupport/ is not installed

import numpy as np  # noqa: E402

from bench.gating.cohorts import judge  # noqa: E402
from bench.pdfgen import make_pdf  # noqa: E402
from contract.migration import MONOLITHIC, SPLIT, cohort_stream, shadow_of  # noqa: E402
from runbooks.actions.migrate import criteria, throughput  # noqa: E402
from runbooks.model import Report  # noqa: E402
from testsupport.migration import TwoCohorts  # noqa: E402
from worker.jobs import Job  # noqa: E402

# The promotions' gate. The rollout's (bench/gates/migration-cohorts.yaml) cannot pass on a
# drill's tens of documents ("< 0.1 %" with 0 errors needs ~3,800 split documents), so the
# drill promotes with these looser bounds; migrate-guard aborts by the rollout's own gate, where
# one failed split document is a certain breach of "< 0.1 %".
GATE = """name: drill-cohorts
scenario: pipeline-smoke
gates:
  - kind: cohorts
    # short windows: "< 50 %" errors passes from 4 clean split documents, a p95 ratio <= 2 from
    # 4 ok documents per cohort, the shadow sample from 4 equivalent pairs
    criteria: {max_error_fraction: 0.5, max_p95_increase_fraction: 1.0, max_crashes: 0,
               min_latency_documents: 4, min_shadow_equivalent_fraction: 0.5}
"""


class Load(threading.Thread):
    """Steady open-loop load: one document every ``interval_s``, until stopped."""

    def __init__(self, d: TwoCohorts, docs: list[Path], interval_s: float) -> None:
        super().__init__(daemon=True)
        self.d, self.docs, self.interval_s = d, docs, interval_s
        self.ids: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        i, start = 0, time.monotonic()
        while not self.stop.is_set():
            self.ids += self.d.h.submit([self.docs[i % len(self.docs)]])
            i += 1
            self.stop.wait(max(0.0, start + i * self.interval_s - time.monotonic()))


class Ticker(threading.Thread):
    """The timeline: every ``tick_s``, the share and each cohort over the last ``window_s``."""

    def __init__(self, d: TwoCohorts, load: Load, tick_s: float, window_s: float, stuck_after_s: float) -> None:
        super().__init__(daemon=True)
        self.d, self.load, self.tick_s, self.window_s, self.stuck_after_s = d, load, tick_s, window_s, stuck_after_s
        self.stop = threading.Event()

    def line(self) -> str:
        c = self.d.control
        samples = c.samples(time.time(), self.window_s, self.stuck_after_s)
        parts = []
        for t in (SPLIT, MONOLITHIC):
            mine = [s for s in samples if s.topology == t]
            bad = sum(not s.ok for s in mine)
            lat = [s.latency_s for s in mine if s.ok and s.latency_s is not None]
            p95 = f"{np.percentile(lat, 95):5.1f} s" if lat else "    - "
            rate = f"{bad / len(mine):4.0%}" if mine else "   -"
            parts.append(f"{t} n={len(mine):3d} err={rate} p95={p95}")
        done = sum(1 for s in samples if s.ok)
        return (f"share {c.share():3d} % | " + " | ".join(parts)
                + f" | submitted {len(self.load.ids)}, done in window {done}")

    def run(self) -> None:
        while not self.stop.wait(self.tick_s):
            self.d.note(self.line())


def gate_output(d: TwoCohorts, a: argparse.Namespace) -> list[str]:
    """What the cohorts gate says of the last window now (as `migrate` judges it)."""
    c, now = d.control, time.time()
    v = judge(c.samples(now, a.gate_window_s, a.stuck_after_s), criteria(str(d.gate)),
              shadow=c.shadow_pairs(now, a.gate_window_s))
    return [f"      gate: {v.judgement} {v.counts}; {throughput(v, a.gate_window_s)}",
            *(f"        {line}" for line in v.lines())]


def promote(d: TwoCohorts, a: argparse.Namespace, to: int, deadline_s: float, **params: object) -> Report:
    """`migrate --to`, retried while the gate says too few documents, until ``deadline_s``."""
    end, first = time.monotonic() + deadline_s, True
    while True:
        gate = gate_output(d, a) if to != 10 else []
        r = d.run("migrate", to=to, window_s=a.gate_window_s, stuck_after_s=a.stuck_after_s, **params)
        last = r.outcome != "refused" or "too few" not in r.summary or time.monotonic() > end
        # the gate's whole output on the first try and the last; a retry's first line only
        d.timeline[-1:-1] = gate if first or last else gate[:1]
        if last:
            return r
        first = False
        time.sleep(a.retry_s)


def accounting(d: TwoCohorts, ids: list[str], timeout_s: float) -> str:
    """Every submitted document: terminal once, in one cohort stream once; none lost or duplicated."""
    try:
        rows = d.h.wait_terminal(ids, timeout_s)
    except TimeoutError:
        rows = d.h.states(ids)
    states = collections.Counter(row.get("state") for row in rows.values())
    r, stream = d.h.redis(), d.h.spec.queue.stream
    routed: collections.Counter[str] = collections.Counter()
    copies = 0
    for t in (SPLIT, MONOLITHIC):
        for _id, fields in r.xrange(cohort_stream(stream, t)):
            job_id = Job.from_fields(fields).job_id
            if shadow_of(job_id):
                copies += 1
            else:
                routed[job_id] += 1
    lost = [i for i in ids if rows.get(i, {}).get("state") not in ("done", "dead_lettered") or not routed[i]]
    duplicated = [i for i, n in routed.items() if n > 1]
    outputs_missing = [i for i in ids if rows.get(i, {}).get("state") == "done"
                       and not (d.outputs / i / "metadata.json").is_file()]
    return (f"submitted {len(ids)}, done {states.get('done', 0)}, dead-lettered {states.get('dead_lettered', 0)}, "
            f"lost {len(lost)}, duplicated {len(duplicated)}, done without output {len(outputs_missing)}; "
            f"shadow copies routed {copies}")


def run_a(d: TwoCohorts, a: argparse.Namespace) -> None:
    d.note(f"run A (healthy): load {a.rate:g} documents/s, shadow {a.shadow} %")
    promote(d, a, 10, 0, shadow=a.shadow)
    time.sleep(a.hold_s)
    if promote(d, a, 50, a.promote_deadline_s).outcome != "applied":
        d.note("run A stops at 10 %: the gate did not pass within the step's deadline")
        return
    time.sleep(a.hold_s)
    r = promote(d, a, 100, a.promote_deadline_s, drain_timeout_s=120)
    d.timeline += [f"      done: {x}" for x in r.done]
    time.sleep(a.hold_s / 2)


def run_b(d: TwoCohorts, a: argparse.Namespace) -> None:
    d.note(f"run B (faults): load {a.rate:g} documents/s, shadow {a.shadow} %")
    promote(d, a, 10, 0, shadow=a.shadow)
    time.sleep(a.hold_s)
    r = promote(d, a, 50, a.promote_deadline_s)
    if r.outcome != "applied":
        d.note("the 50 % step was not applied: share set to 50 % for the fault phase (drill)")
        d.control.set_share(50)
    time.sleep(a.hold_s / 3)
    for name, fault in (("500 storm", {"error_rate": 1.0, "error_status": 500}), ("hang", {"hang_rate": 1.0})):
        d.fault(**fault)
        t_fault = time.monotonic()
        r = d.run("migrate-guard", watch_s=a.guard_watch_s, every_s=a.every_s, window_s=a.guard_window_s,
                  stuck_after_s=a.stuck_after_s, gate=a.guard_gate)
        d.timeline += [f"      {line}" for line in r.evidence[-3:]]
        took = time.monotonic() - t_fault
        d.note(f"ABORT ({name}): {r.outcome} {took:.1f} s after the fault: {r.summary}")
        d.fault(error_rate=0.0, hang_rate=0.0)
        if name == "hang":
            break
        d.note(f"recovery at 0 %: {a.recover_s:g} s (the storm's documents finish, then leave the window)")
        time.sleep(a.recover_s)
        d.control.set_share(50)
        d.note("share set back to 50 % for the hang (drill shortcut; the audit log has no record of it)")
        time.sleep(a.hold_s / 3)


def drill(name: str, a: argparse.Namespace, body) -> list[str]:
    with tempfile.TemporaryDirectory(prefix=f"drill-{name}-") as tmp:
        root = Path(tmp)
        d = TwoCohorts(root, split_workers=a.split_workers, mono_workers=a.mono_workers)
        docs = [make_pdf(root / "docs" / f"d{i}.pdf", 1, seed=i) for i in range(20)]
        try:
            d.start()
            gate = root / "drill-gate.yaml"
            gate.write_text(GATE)
            d.gate = gate
            load = Load(d, docs, 1.0 / a.rate)
            ticker = Ticker(d, load, a.tick_s, a.window_s, a.stuck_after_s)
            load.start()
            ticker.start()
            t0 = time.monotonic()
            body(d, a)
            load.stop.set()
            load.join()
            ticker.stop.set()
            ticker.join()
            d.note(f"load stopped after {time.monotonic() - t0:.0f} s; waiting for every document to end")
            d.note("accounting: " + accounting(d, load.ids, a.drain_s))
            audit = [f"  {e['time'][11:19]} {e['action']} {e.get('params', {}).get('to', '')} "
                     f"{e['outcome']}: {e.get('summary', '')}" for e in d.audit.records()]
            return [f"== run {name} ==", *d.timeline, "audit log:", *audit]
        finally:
            d.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default="AB", help="which runs: A, B or AB")
    ap.add_argument("--rate", type=float, default=0.3, help="documents submitted per second (steady)")
    ap.add_argument("--split-workers", type=int, default=2)
    ap.add_argument("--mono-workers", type=int, default=2)
    ap.add_argument("--shadow", type=int, default=20, help="shadow sample, percent of documents")
    ap.add_argument("--hold-s", type=float, default=60.0, help="time at each share")
    ap.add_argument("--promote-deadline-s", type=float, default=180.0,
                    help="how long a step is retried while the gate says too few documents")
    ap.add_argument("--retry-s", type=float, default=10.0)
    ap.add_argument("--window-s", type=float, default=60.0, help="the timeline's window")
    ap.add_argument("--gate-window-s", type=float, default=240.0,
                    help="the window migrate judges (at 10 %% and 0.3 documents/s, ~7 split documents)")
    ap.add_argument("--guard-window-s", type=float, default=45.0, help="the window migrate-guard judges")
    ap.add_argument("--guard-gate", default="migration-cohorts",
                    help="the gate file migrate-guard judges by (default: the rollout's own)")
    ap.add_argument("--stuck-after-s", type=float, default=30.0,
                    help="a document unfinished this long after its submission counts as failed")
    ap.add_argument("--every-s", type=float, default=2.0, help="migrate-guard's period")
    ap.add_argument("--guard-watch-s", type=float, default=120.0)
    ap.add_argument("--recover-s", type=float, default=50.0, help="at 0 %% after the storm: longer than "
                    "--guard-window-s, so the storm's documents leave the guard's window")
    ap.add_argument("--tick-s", type=float, default=15.0)
    ap.add_argument("--drain-s", type=float, default=180.0, help="wait for the documents to end after the load")
    a = ap.parse_args()
    print(f"migration drill: twin mineru25-h200, {a.split_workers} split + {a.mono_workers} monolithic "
          f"workers, {a.rate:g} documents/s (1 page each), gate window {a.gate_window_s:g} s, guard window "
          f"{a.guard_window_s:g} s, timeline "
          f"window {a.window_s:g} s, stuck after "
          f"{a.stuck_after_s:g} s, migrate-guard every {a.every_s:g} s by gate {a.guard_gate}; promotions by "
          f"the drill gate:\n{GATE}", flush=True)
    for name, body in (("A", run_a), ("B", run_b)):
        if name in a.runs:
            print("\n".join(drill(name, a, body)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
