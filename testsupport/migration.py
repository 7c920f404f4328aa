"""Both topologies at once on real processes, for the migration's drills and tests: Redis, the
router, the twin with one profile (a shared server for the split cohort, private engines for the
monolithic one: `sim serve --private-engines`), MinerU workers per cohort reading their cohort's
stream; the actions run against it through a :class:`runbooks.cohorts.CohortControl`.

Used by tests/integration/runbooks/test_migration_drill.py, test_migration_shadow.py and
benchmarks/migration_drill.py. Every process is stopped by :meth:`TwoCohorts.close`."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from contract.migration import ENV_COHORT_STREAMS
from runbooks.audit import AuditLog
from runbooks.cohorts import CohortControl
from runbooks.connect import markdown_reader
from runbooks.context import ActionContext
from runbooks.model import Report
from runbooks.registry import invoke
from testsupport.procs import Service, free_port
from testsupport.worker import API_KEY, Harness

# A gate file for short windows: the rollout's criteria with a looser error bound (a drill has
# tens of documents, not thousands) and fewer documents before the p95 and the shadow sample
# are judged (wider intervals).
DRILL_GATE = """name: drill-cohorts
scenario: pipeline-smoke
gates:
  - kind: cohorts
    criteria: {max_error_fraction: 0.05, max_p95_increase_fraction: 0.10, max_crashes: 0,
               min_latency_documents: %(min_latency)d, min_shadow_equivalent_fraction: 0.5}
"""


class HarnessTarget:
    """The platform an action sees: the drill's processes (no supervisord, no Kubernetes)."""

    kind = "local"

    def __init__(self, h: Harness) -> None:
        self.spec = h.spec

    def target(self) -> str:
        return "drill harness"

    def verify_target(self) -> list[str]:
        return []


@dataclass
class TwoCohorts:
    root: Path
    profile: str = "mineru25-h200"
    split_workers: int = 1
    mono_workers: int = 1
    engine_load_scale: float = 0.02  # the private engines' load time, scaled (60 s -> 1.2 s)
    min_latency_documents: int = 10
    pages: list[str] = field(default_factory=list)  # the abort pages sent (the drill's receiver)
    timeline: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        env = {ENV_COHORT_STREAMS: "1"}
        self.h = Harness(self.root / "split", sim_profile=self.profile, env_extra=env)
        self.mono = Harness(self.root / "mono", sim_profile=self.profile, env_extra=env,
                            redis_port=self.h.redis_port,
                            overrides={"deployment_mode": "monolithic",
                                       "worker_pool.in_process.backend": "private-server"})
        self.mono.outputs = self.h.outputs  # one output store, as a stack's pools share
        self.gate = self.root / "drill-gate.yaml"
        self.audit = AuditLog(self.root / "audit.jsonl", time.time)
        self.workers: list[Service] = []
        self.t0 = time.time()

    def start(self) -> TwoCohorts:
        h, q = self.h, self.h.spec.queue
        h.start_redis()
        h.start_sim()
        self.engines, urls = self.mono.start_private_engines(self.mono_workers, "--engine-load-scale",
                                                             f"{self.engine_load_scale:g}")
        argv = [sys.executable, "-m", "worker.router", "--redis-url", h.redis_url, "--stream", q.stream,
                "--group", q.group]
        self.router = h._start("router", argv, free_port())  # noqa: SLF001 - the harness owns every process
        self.workers = [h.start_worker(i, wait_ready=False) for i in range(self.split_workers)]
        self.workers += [self.mono.start_worker(self.split_workers + i, wait_ready=False, server_url=u)
                         for i, u in enumerate(urls)]
        for w in self.workers:
            h.wait_ready(w)
        self.gate.write_text(DRILL_GATE % {"min_latency": self.min_latency_documents})
        self.outputs = h.outputs
        self.control = CohortControl(h.redis(), q.stream, q.group, decommission=self.decommission,
                                     page=lambda s: self.pages.append(s) or "paged (drill receiver)",
                                     read_markdown=markdown_reader(h.spec, h.outputs))
        self.t0 = time.time()
        return self

    def decommission(self) -> list[str]:
        """`migrate --to 100`'s last step: the monolithic pool (its workers, then their engines) stops."""
        stopped = []
        for proc in [*self.workers[self.split_workers:], self.engines]:
            if proc.alive():
                proc.stop()
                stopped.append(proc.name)
        return stopped

    def close(self) -> None:
        self.mono.close()
        self.h.close()

    def note(self, line: str) -> None:
        self.timeline.append(f"t+{time.time() - self.t0:6.1f} s {line}")

    def run(self, name: str, **params: Any) -> Report:
        """A runbook action, applied, against the drill's cohorts and gate file; noted in the timeline."""
        ctx = ActionContext(spec=self.h.spec, platform=HarnessTarget(self.h), audit=self.audit, apply=True,
                            migration=self.control)
        r = invoke(ctx, name, {"gate": str(self.gate), "window_s": 300, "stuck_after_s": 20, **params})
        self.note(f"{name} {params}: {r.outcome}: {r.summary}")
        return r

    def fault(self, **faults: Any) -> None:
        """Inject (or clear) a fault on the split cohort's shared server (the simulator's /sim/faults)."""
        httpx.put(f"http://127.0.0.1:{self.h.server_port}/sim/faults", json=faults,
                  headers={"Authorization": f"Bearer {API_KEY}"}, timeout=5).raise_for_status()
        self.note(f"split server faults: {faults}")
