"""Chaos on the real local stack: faults in the middle of a run of documents, and what became of
every document. Used by tests/integration/worker/test_chaos_suite.py (short faults, in CI) and
benchmarks/chaos.py (20 s faults, prints the table).

The rig is `splitstack up`'s own stack (supervisord: Redis with AUTH, Prometheus, the
simulator, two MinerU workers) on free ports with a private state dir. Each scenario submits a
batch of documents, waits until the pipeline works, injects a fault (the simulator's fault API
at run time, a signal to a process, `down` and `up`), removes it, waits for every document to
end, and reports:

* done / dead-lettered (by kind) / lost / duplicated: lost = not ended, or "done" without its
  output; duplicated = a document that ended more than once (two "job done" lines of the
  workers, or two dead letters, or done and dead-lettered);
* recovery_s: from the fault's end (its removal; the signal, for a Redis kill; for a server, a
  worker or a stack that had to be started again, the moment it was healthy, its start time
  reported apart) until every worker has finished a document again: the pipeline runs at full
  width.

Before a fault, every worker has finished a document (``warm_up``): the fault hits a run in
progress, whose workers have measured the server's speed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis

from contract.spec_loader import project_root
from runbooks.audit import AuditLog
from runbooks.context import ActionContext
from runbooks.platforms.local import LocalPlatform
from runbooks.registry import invoke
from stack.launcher import LocalStack
from stack.secrets import queue_url, resolve_api_key
from testsupport.procs import wait_until
from testsupport.stack import local_stack
from testsupport.worker import metric_value
from worker.jobs_view import list_jobs, submit

ROOT = project_root(Path(__file__))
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "pdfs"))
TERMINAL = ("done", "dead_lettered")
_WORKER = re.compile(r"-w(\d+)-\d+$")


@dataclass
class Outcome:
    scenario: str
    submitted: int
    done: int
    dead: dict[str, int]
    lost: int
    duplicated: int
    fault_s: float
    recovery_s: float | None
    start_s: float | None = None  # what had to start again first: `splitstack restart`, `up`
    start_what: str = ""
    notes: list[str] = field(default_factory=list)

    def row(self) -> str:
        dead = ", ".join(f"{k} {v}" for k, v in sorted(self.dead.items())) or "0"
        rec = f"{self.recovery_s:.1f}" if self.recovery_s is not None else "n/a"
        start = f" (+ {self.start_what} {self.start_s:.1f} s)" if self.start_s is not None else ""
        return (f"| {self.scenario} | {self.fault_s:g} | {self.submitted} | {self.done} | {dead} | "
                f"{self.lost} | {self.duplicated} | {rec}{start} |")


HEADER = ("| scenario | fault s | submitted | done | dead-lettered (kind) | lost | duplicated | "
          "fault end to full throughput, s |\n| --- | --- | --- | --- | --- | --- | --- | --- |")


class ChaosRig:
    def __init__(self, root: Path, workers: int = 2, visibility_timeout_s: float = 5.0) -> None:
        self.root = root
        self.workers = workers
        self.stack: LocalStack = local_stack(root / "state", **{
            "inference_servers.0.engine": "sim", "worker_pool.replicas": workers,
            "queue.visibility_timeout_s": visibility_timeout_s})
        self.spec = self.stack.spec
        self.docs = root / "docs"
        self._warm: set[str] = set()  # "-w<index>-<pid>" of workers that finished a document

    # -- lifecycle ----------------------------------------------------------------------------
    def up(self) -> None:
        self.stack.up()

    def down(self) -> None:
        self.stack.down()

    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(queue_url(self.spec, self.stack.paths), decode_responses=True,
                                    socket_connect_timeout=2, socket_timeout=5)

    def pid(self, program: str) -> int:
        return int(self.stack.supervisor.process_info()[program]["pid"])

    @property
    def server(self) -> str:
        return f"server-{self.spec.worker_server.name}"

    @property
    def server_url(self) -> str:
        return f"http://{self.spec.local.host}:{self.spec.worker_server.port}"

    def faults(self, **changes: Any) -> None:
        key = resolve_api_key(self.spec, self.stack.paths)
        r = httpx.put(f"{self.server_url}/sim/faults", json=changes, timeout=5,
                      headers={"Authorization": f"Bearer {key}"})
        r.raise_for_status()

    def restart(self, component: str) -> float:
        """`splitstack restart COMPONENT` (the runbook action, applied); seconds it took."""
        ctx = ActionContext(spec=self.spec, platform=LocalPlatform(self.stack), apply=True,
                            audit=AuditLog(self.stack.paths.audit_log, time.time))
        t0 = time.monotonic()
        report = invoke(ctx, "restart", {"component": component, "reason": "chaos"})
        assert report.outcome == "applied", report.render()
        return time.monotonic() - t0

    def deadline_s(self) -> float:
        """The longest request deadline the workers gave last (mineru_vllm_client_deadline_seconds):
        how long a request the server never answers waits before it is retried."""
        return max(metric_value(httpx.get(f"http://{self.spec.local.host}:"
                                          f"{self.spec.worker_pool.metrics_port + i}/metrics", timeout=5).text,
                                "mineru_vllm_client_deadline_seconds") for i in range(self.workers))

    def all_ready(self) -> bool:
        try:
            return all(httpx.get(f"http://{self.spec.local.host}:{self.spec.worker_pool.metrics_port + i}/readyz",
                                 timeout=2).status_code == 200 for i in range(self.workers))
        except httpx.HTTPError:
            return False

    # -- documents -------------------------------------------------------------------------------
    def make_docs(self, name: str, count: int, pages: int = 2) -> list[Path]:
        from pdf_fixtures import make_pdf

        return [make_pdf(self.docs / name / f"d{i:03d}.pdf", 1 + i % pages, seed=hash(name) % 1000 + i)
                for i in range(count)]

    def submit(self, paths: list[Path]) -> list[str]:
        return submit(self.redis(), self.spec, paths)

    def rows(self, ids: list[str]) -> dict[str, dict[str, str]]:
        return {r["job_id"]: r for r in list_jobs(self.redis(), self.spec, ids=ids)}

    def wait_ended(self, ids: list[str], timeout_s: float) -> dict[str, dict[str, str]]:
        def ended() -> dict[str, dict[str, str]] | None:
            try:
                rows = self.rows(ids)
            except redis.RedisError:
                return None
            return rows if all(r.get("state") in TERMINAL for r in rows.values()) else None
        try:
            return wait_until(ended, timeout_s, f"{len(ids)} documents ended", interval_s=0.25)
        except TimeoutError:
            return self.rows(ids)

    def warm_up(self, timeout_s: float = 90) -> None:
        """Until every worker process running now has finished documents: a fault then hits
        workers that have measured the server's speed, as in the middle of a run. (A worker
        that never got an answer sizes its deadlines on a slow prior, and the slow answers of a
        cold start lengthen them for the next 64 answers: worker/deadlines.py.)"""
        for round_ in range(3):
            pending = [i for i in range(self.workers) if f"-w{i}-{self.pid(f'worker-{i}')}" not in self._warm]
            if not pending:
                return
            # About 100 answers per worker: the deadline's speed estimate (p90 of the last 64
            # answers) no longer holds the slow first answers of a cold start.
            ids = self.submit(self.make_docs(f"warm-up {len(self._warm)}-{round_}", 4 * self.workers))
            rows = self.wait_ended(ids, timeout_s)
            self._warm |= {"-w" + r["consumer"].rsplit("-w", 1)[-1]
                           for r in rows.values() if r.get("state") == "done" and r.get("consumer")}
        pending = [i for i in range(self.workers) if f"-w{i}-{self.pid(f'worker-{i}')}" not in self._warm]
        if not pending:
            return
        raise RuntimeError(f"workers {pending} finished no warm-up document")

    def wait_worker_ready(self, index: int, old_pid: int, timeout_s: float = 60) -> None:
        """Until supervisord runs a new process for worker ``index`` and it answers /readyz."""
        url = f"http://{self.spec.local.host}:{self.spec.worker_pool.metrics_port + index}/readyz"

        def ready() -> bool:
            info = self.stack.supervisor.process_info().get(f"worker-{index}", {})
            if info.get("statename") != "RUNNING" or int(info.get("pid") or 0) in (0, old_pid):
                return False
            return httpx.get(url, timeout=2).status_code == 200
        wait_until(ready, timeout_s, f"worker-{index} restarted and ready", interval_s=0.1)

    def wait_started(self, ids: list[str], done: int = 1, timeout_s: float = 60) -> None:
        wait_until(lambda: sum(r.get("state") == "done" for r in self.rows(ids).values()) >= done,
                   timeout_s, f"{done} document(s) done before the fault")

    # -- evidence -----------------------------------------------------------------------------------
    def terminal_events(self) -> Counter[str]:
        """How many times each job ended: 'job done' lines in every worker log, dead letters."""
        events: Counter[str] = Counter()
        for log in self.stack.paths.logs.glob("worker-*.log"):
            for line in log.read_text(errors="replace").splitlines():
                if '"job done"' not in line:
                    continue
                try:
                    events[json.loads(line)["job_id"]] += 1
                except (ValueError, KeyError):
                    continue
        for _id, fields in self.redis().xrange(self.spec.queue.dead_letter_stream):
            events[fields.get("job_id", "")] += 1
        return events

    def outcome(self, name: str, ids: list[str], rows: dict[str, dict[str, str]], fault_end: float,
                fault_s: float, start_s: float | None = None, start_what: str = "") -> Outcome:
        outputs = self.stack.paths.data / self.spec.output_store.path
        done = [i for i in ids if rows[i].get("state") == "done"]
        dead = Counter(rows[i].get("kind", "?") for i in ids if rows[i].get("state") == "dead_lettered")
        missing = [i for i in done if not (outputs / i / "metadata.json").is_file()]
        lost = len(ids) - len(done) - sum(dead.values()) + len(missing)
        events = self.terminal_events()
        duplicated = sum(1 for i in ids if events[i] > 1)
        return Outcome(name, len(ids), len(done), dict(dead), lost, duplicated, fault_s,
                       recovery_s(rows, fault_end, self.workers), start_s, start_what)


def recovery_s(rows: dict[str, dict[str, str]], fault_end: float, workers: int) -> float | None:
    """Seconds from the fault's end until every worker has finished a document again (the last
    completion when the batch ran out before some worker got one)."""
    firsts: dict[int, float] = {}
    last = None
    for r in rows.values():
        if r.get("state") != "done":
            continue
        at = float(r.get("updated_at", 0))
        if at < fault_end:
            continue
        last = max(last or at, at)
        m = _WORKER.search(r.get("consumer", ""))
        if m:
            i = int(m.group(1))
            firsts[i] = min(firsts.get(i, at), at)
    if len(firsts) >= workers:
        return max(firsts.values()) - fault_end
    return None if last is None else last - fault_end


# -- scenarios ----------------------------------------------------------------------------------
Scenario = Callable[[ChaosRig, float, int], Outcome]


def _faulted(rig: ChaosRig, name: str, fault_s: float, count: int, on: Callable[[], None],
             off: Callable[[], None]) -> Outcome:
    rig.warm_up()
    ids = rig.submit(rig.make_docs(name, count))
    rig.wait_started(ids)
    on()
    time.sleep(fault_s)
    deadline = rig.deadline_s()
    off()
    end = time.time()
    rows = rig.wait_ended(ids, 120 + fault_s)
    out = rig.outcome(name, ids, rows, end, fault_s)
    out.notes.append(f"request deadline at the fault's end: {deadline:.1f} s")
    return out


def hang(rig: ChaosRig, fault_s: float, count: int) -> Outcome:
    """Every inference request hangs (no answer, connection kept open)."""
    return _faulted(rig, "hang", fault_s, count, lambda: rig.faults(hang_rate=1.0),
                    lambda: rig.faults(hang_rate=0.0))


def slow(rig: ChaosRig, fault_s: float, count: int) -> Outcome:
    """Every request 8 s slower: past the deadline a fast server earned (worker/deadlines.py)."""
    return _faulted(rig, "slow server (+8 s per request)", fault_s, count,
                    lambda: rig.faults(added_latency_ms=8000), lambda: rig.faults(added_latency_ms=0))


def storm_503(rig: ChaosRig, fault_s: float, count: int) -> Outcome:
    return _faulted(rig, "503 storm", fault_s, count,
                    lambda: rig.faults(error_rate=1.0, error_status=503, retry_after_s=1),
                    lambda: rig.faults(error_rate=0.0))


def storm_500(rig: ChaosRig, fault_s: float, count: int) -> Outcome:
    return _faulted(rig, "500 storm", fault_s, count, lambda: rig.faults(error_rate=1.0, error_status=500),
                    lambda: rig.faults(error_rate=0.0))


def server_kill(rig: ChaosRig, fault_s: float, count: int) -> Outcome:
    """SIGKILL the server; it stays down (a crashed pod) until `splitstack restart` after fault_s."""
    name = "server SIGKILL, restart"
    ids = rig.submit(rig.make_docs(name, count))
    rig.wait_started(ids)
    os.kill(rig.pid(rig.server), signal.SIGKILL)
    time.sleep(fault_s)
    start_s = rig.restart(rig.server)
    end = time.time()  # the server is back (health-gated): its own start time is start_s
    rows = rig.wait_ended(ids, 120)
    return rig.outcome(name, ids, rows, end, fault_s, start_s, "server restart")


def worker_kill(rig: ChaosRig, fault_s: float, count: int) -> Outcome:
    """SIGKILL one worker mid-document (as the OOM killer does): supervisord restarts it, its job
    is taken over within seconds (its process is gone: worker/queue.py), its page-render processes die with it. Recovery
    counts from the restarted worker's readiness; kill to ready is its start time."""
    import psutil

    name = "worker SIGKILL"
    ids = rig.submit(rig.make_docs(name, count))
    rig.wait_started(ids)
    pid = rig.pid("worker-0")
    children = psutil.Process(pid).children(recursive=True)
    os.kill(pid, signal.SIGKILL)
    t0 = time.monotonic()
    rig.wait_worker_ready(0, pid)  # supervisord starts it again: its own start time, apart
    start_s = time.monotonic() - t0
    end = time.time()
    # The run goes on: on a loaded machine the other worker can finish the whole first batch
    # before the restarted one is ready, and recovery would have nothing to count.
    ids += rig.submit(rig.make_docs(name + " after", count))
    rows = rig.wait_ended(ids, 120)
    out = rig.outcome(name, ids, rows, end, 0, start_s, "worker restart")
    alive = [c.pid for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    out.notes.append(f"render processes of the killed worker still alive: {len(alive)} of {len(children)}")
    return out


def _redis_signal(rig: ChaosRig, sig: signal.Signals, count: int) -> Outcome:
    name = f"Redis {sig.name}"
    ids = rig.submit(rig.make_docs(name, count))
    rig.wait_started(ids)
    os.kill(rig.pid("queue"), sig)
    end = time.time()
    rows = rig.wait_ended(ids, 120)
    return rig.outcome(name, ids, rows, end, 0)


def redis_kill(rig: ChaosRig, fault_s: float, count: int) -> Outcome:
    return _redis_signal(rig, signal.SIGKILL, count)


def redis_term(rig: ChaosRig, fault_s: float, count: int) -> Outcome:
    """A clean exit: supervisord starts it again, as a pod's restartPolicy would."""
    return _redis_signal(rig, signal.SIGTERM, count)


def down_mid_run(rig: ChaosRig, fault_s: float, count: int) -> Outcome:
    """`splitstack down` with documents in flight, then `up` again after fault_s."""
    name = "down mid-run, up"
    ids = rig.submit(rig.make_docs(name, count, pages=4))
    rig.wait_started(ids)
    workers, *_rest = rig.stack.stop_order()  # what `down` stops first; the queue still answers
    rig.stack.supervisor.stop_and_wait(workers)
    running = [i for i, r in rig.rows(ids).items() if r.get("state") == "running"]
    rig.down()
    time.sleep(fault_s)
    t0 = time.monotonic()
    rig.up()
    start_s = time.monotonic() - t0
    end = time.time()
    rows = rig.wait_ended(ids, 120)
    out = rig.outcome(name, ids, rows, end, fault_s, start_s, "`up`")
    out.notes.append(f"documents left 'running' by down (not drained): {len(running)}")
    return out


def parser_failure(rig: ChaosRig, fault_s: float, count: int) -> Outcome:
    """Documents that fail deep inside MinerU (tests/fixtures/pdfs: a page under 1 pt tall),
    among good ones: dead-lettered at once as 'parse_failed', naming the page."""
    from pdf_fixtures import make_sliver_page_pdf

    name = "parser failure"
    bad = [make_sliver_page_pdf(rig.docs / name / f"bad{i}.pdf", seed=i) for i in range(2)]
    good = rig.make_docs(name, max(2, count - 2))
    ids = rig.submit([bad[0], *good, bad[1]])
    end = time.time()
    rows = rig.wait_ended(ids, 120)
    out = rig.outcome(name, ids, rows, end, 0)
    out.notes += [f"{r['kind']}: {r['reason']}" for r in rows.values() if r.get("state") == "dead_lettered"]
    return out


SCENARIOS: dict[str, Scenario] = {
    "hang": hang, "slow": slow, "503": storm_503, "500": storm_500, "server-kill": server_kill,
    "worker-kill": worker_kill, "redis-kill": redis_kill, "redis-term": redis_term,
    "parser-failure": parser_failure, "down": down_mid_run,
}
EXPECTED_DEAD = {"parser-failure": {"parse_failed": 2}}
