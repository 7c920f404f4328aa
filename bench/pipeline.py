"""The ``pipeline`` workload: PDFs enqueued on the worker queue, followed until their output is
written.

Jobs go through the worker's own queue code (worker.queue.JobQueue.enqueue), so the bench
writes exactly what ``splitstack submit`` writes. One poller per client process reads the job
records (``<stream>:job:<id>``) of every outstanding document in one pipelined round trip per
``poll_interval_s``.

A document's end time:
* local stack (one host, one clock): the worker's 'done' timestamp on the job record (written
  after the output was committed), mapped onto the bench's monotonic clock through the send's
  wall time, clamped to [sent, observed];
* deployed stack: the poll that first saw the terminal state (error <= poll_interval_s plus one
  Redis round trip). Worker clocks on other hosts are not trusted: skew would move every latency.

Outputs: with an output store this host can read (the local stack, or ``--outputs-at``), each
done document's metadata and markdown are read (requests per page, output hash) and a missing
output is flagged; without one, completion, pages and processing time come from the job record
alone, and the summary says what could not be verified.

A run stalls when no outstanding document changes state for ``stall_timeout_s``: outstanding
and later documents then end at once as ``stalled`` and the run is marked invalid with the
queue's state as the reason (no hang until job_timeout_s).
"""

from __future__ import annotations

import asyncio
import hashlib
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from redis.exceptions import RedisError

from bench.pdfgen import count_pages, make_pdf
from bench.records import Phase, PipelineRecord
from bench.scenario import PipelineScenario
from bench.summary import Check
from bench.target import Target, mask_url
from contract.outputs import store_root
from worker.errors import TransientError
from worker.jobs import Job
from worker.objectstore import open_store
from worker.queue import JobQueue
from worker.store import DirectoryStore, OutputStore

TERMINAL = ("done", "dead_lettered")
MARKDOWN = "document.md"  # worker/store.py's output file names
METADATA = "metadata.json"
STALLED = "stalled"


@dataclass(frozen=True)
class Document:
    path: str  # on this host (page count, upload)
    pages: int
    source: str  # what the job carries: where the workers read it


@dataclass
class PipelineWorkload:
    documents: list[Document]
    redis_url: str = field(repr=False)  # may hold a password
    stream: str
    group: str
    dead_letter_stream: str
    output_dir: str | None  # the store's location (a folder, or s3://bucket/prefix), for reports
    job_timeout_s: float
    poll_interval_s: float
    stall_timeout_s: float = 60.0
    worker_clock: bool = True  # end time from the worker's timestamp (one host) or observed
    folder: str = ""  # where this host keeps the documents
    name: str = "pipeline"
    store: OutputStore | None = field(default=None, repr=False)  # reads outputs; None: records only

    @classmethod
    def build(cls, scn: PipelineScenario, target: Target) -> PipelineWorkload:
        if target.queue_url is None:
            raise ValueError("the pipeline scenario needs a worker queue: use --stack NAME (a running local "
                             "stack) or --stack NAME --queue-url redis://... (a deployed one); a --url "
                             "target alone has no queue")
        spec = target.stack_spec()
        docs = []
        if scn.documents.directory:
            base = Path(scn.documents.directory).resolve()
            paths = sorted(base.glob("*.pdf"))
            if not paths:
                raise ValueError(f"documents.directory {base}: no *.pdf files there")
            pairs = [(p, count_pages(p)) for p in paths]
        else:
            rng = np.random.default_rng(scn.load.seed)
            pages = scn.documents.pages.sample(rng, scn.documents.generate_count)
            root = target.state_dir or Path(".state/local" if target.deployment is None else ".state/bench")
            base = (root / "bench-pdfs" / f"seed{scn.load.seed}").resolve()
            pairs = []
            for i, n in enumerate(pages):
                p = base / f"doc-{i:04d}-{n}p.pdf"
                if not p.is_file():
                    make_pdf(p, n, seed=scn.load.seed * 100_000 + i)
                pairs.append((p, n))
        for p, n in pairs:
            src = f"{target.documents_at}/{p.name}" if target.documents_at else str(p.resolve())
            docs.append(Document(str(p.resolve()), n, src))
        out = target.output_dir
        store: OutputStore | None = DirectoryStore(out) if out else None
        where = str(out) if out else None
        if spec.output_store.kind == "s3":  # read through the workers' own store (obstore)
            store = open_store(spec, Path(tempfile.mkdtemp(prefix="bench-outputs-")))
            where = store_root(spec)
        return cls(docs, target.queue_url, spec.queue.stream, spec.queue.group, spec.queue.dead_letter_stream,
                   where, scn.job_timeout_s, scn.poll_interval_s, scn.stall_timeout_s,
                   worker_clock=target.deployment is None, folder=str(base), store=store)

    def describe(self) -> dict[str, Any]:
        return {"queue": mask_url(self.redis_url), "stream": self.stream, "group": self.group,
                "dead_letter_stream": self.dead_letter_stream, "documents_folder": self.folder,
                "documents_at": self.documents[0].source.rsplit("/", 1)[0] if self.documents else None,
                "completion_from": "output store" if self.output_dir else "job records in Redis",
                "output_dir": self.output_dir,
                "end_time": "worker timestamp (same host)" if self.worker_clock else
                f"observed by polling (<= {self.poll_interval_s:g} s + one Redis round trip)",
                "stall_timeout_s": self.stall_timeout_s}

    async def sender(self, process: int, timeout_s: float) -> PipelineSender:
        import redis.asyncio as aioredis

        client = aioredis.Redis.from_url(self.redis_url, decode_responses=True)
        queue = JobQueue(client, self.stream, self.group, self.dead_letter_stream, consumer=f"bench-{process}")
        return PipelineSender(self, queue, client, process)


class PipelineSender:
    def __init__(self, wl: PipelineWorkload, queue, client, process: int) -> None:
        self.wl, self.queue, self.client, self.process = wl, queue, client, process
        self.waiting: dict[str, tuple[asyncio.Future, str | None]] = {}  # job id -> (result, last updated_at)
        self.last_progress = time.monotonic()
        self.stalled: str | None = None
        self._poller: asyncio.Task | None = None

    async def send(self, index: int, intended_ns: int, phase: Phase, t0: int) -> PipelineRecord:
        doc = self.wl.documents[index % len(self.wl.documents)]
        job = Job(source=doc.source, correlation_id=f"bench-{self.process}-{index}")
        rec = PipelineRecord(request_id=job.job_id, phase=phase, process=self.process, document=doc.path,
                             pages=doc.pages, intended_ns=intended_ns, sent_ns=0, wall_sent_s=0.0)
        rec.sent_ns = time.monotonic_ns() - t0
        rec.wall_sent_s = time.time()
        if self.stalled:  # submitting more would only queue behind the stall
            rec.status, rec.error, rec.error_detail = "timeout", STALLED, "not submitted: " + self.stalled
            rec.end_ns = rec.sent_ns
            return rec
        try:
            await self.queue.enqueue(job)
        except (RedisError, OSError) as exc:  # redis down: the document was never submitted
            rec.status, rec.error, rec.error_detail = "failed", "enqueue_error", str(exc)
            rec.end_ns = time.monotonic_ns() - t0
            return rec
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        if not self.waiting:
            self.last_progress = time.monotonic()  # the stall clock runs only while work is outstanding
        self.waiting[job.job_id] = (fut, None)
        if self._poller is None:
            self._poller = asyncio.ensure_future(self._poll_loop())
        try:
            state, observed_mono = await asyncio.wait_for(asyncio.shield(fut), self.wl.job_timeout_s)
        except TimeoutError:
            self.waiting.pop(job.job_id, None)
            rec.status, rec.error = "timeout", "timeout"
            rec.error_detail = f"not done after {self.wl.job_timeout_s:g} s"
            return rec
        observed = observed_mono - t0
        if state.get("state") == STALLED:
            rec.status, rec.error, rec.error_detail = "timeout", STALLED, state["reason"]
            rec.end_ns = observed
            return rec
        self._finish(rec, state, observed, job.job_id)
        return rec

    def _finish(self, rec: PipelineRecord, state: dict[str, str], observed: int, job_id: str) -> None:
        if self.wl.worker_clock:
            done_wall = float(state.get("updated_at", time.time()))
            rec.end_ns = min(observed, max(rec.sent_ns, rec.sent_ns + int((done_wall - rec.wall_sent_s) * 1e9)))
        else:
            rec.end_ns = observed
        if state.get("processing_s"):
            rec.processing_s = float(state["processing_s"])
        if state.get("state") == "dead_lettered":
            rec.status, rec.error = "failed", f"dead_lettered:{state.get('kind', 'unknown')}"
            rec.error_detail = state.get("reason")
            return
        rec.status = "done"
        if state.get("pages"):
            rec.worker_pages = int(state["pages"])
        if state.get("requests_sent"):  # workers record it in the job state; metadata.json wins below
            rec.server_requests = int(state["requests_sent"])
        self._read_output(rec, job_id)

    async def _poll_loop(self) -> None:
        import redis

        while True:
            await asyncio.sleep(self.wl.poll_interval_s)
            if not self.waiting:
                continue
            ids = list(self.waiting)
            try:
                async with self.client.pipeline(transaction=False) as p:
                    for job_id in ids:
                        p.hgetall(self.queue.job_key(job_id))
                    states = await p.execute()
                problem = None
            except (redis.RedisError, OSError) as exc:
                states, problem = [], f"the queue stopped answering ({type(exc).__name__}: {exc})"
            now_mono = time.monotonic_ns()
            for job_id, state in zip(ids, states):
                fut, last = self.waiting.get(job_id, (None, None))
                if fut is None:
                    continue
                stamp = state.get("updated_at")
                if stamp != last:
                    self.waiting[job_id] = (fut, stamp)
                    if last is not None:  # queued -> running, a part done, done: the queue moves
                        self.last_progress = time.monotonic()
                if state.get("state") in TERMINAL:
                    self.last_progress = time.monotonic()
                    del self.waiting[job_id]
                    if not fut.done():
                        fut.set_result((state, now_mono))
            if self.waiting and time.monotonic() - self.last_progress > self.wl.stall_timeout_s:
                await self._declare_stall(problem)

    async def _declare_stall(self, problem: str | None) -> None:
        reason = (f"no document of this run changed state for {self.wl.stall_timeout_s:g} s while "
                  f"{len(self.waiting)} were outstanding")
        reason += f": {problem}" if problem else f" ({await self._queue_facts()}): no worker is consuming"
        self.stalled = reason
        now_mono = time.monotonic_ns()
        for fut, _ in self.waiting.values():
            if not fut.done():
                fut.set_result(({"state": STALLED, "reason": reason}, now_mono))
        self.waiting.clear()

    async def _queue_facts(self) -> str:
        import redis

        try:
            groups = {g["name"]: g for g in await self.client.xinfo_groups(self.wl.stream)}
            g = groups.get(self.wl.group)
            if g is None:
                return f"group {self.wl.group!r} is gone from {self.wl.stream!r}"
            cons = await self.client.xinfo_consumers(self.wl.stream, self.wl.group)
            seen = ", ".join(f"{c['name']} last job {c['idle'] / 1000:.0f} s ago" for c in cons[:6]) or "none"
            return (f"{self.wl.stream}/{self.wl.group}: lag {g.get('lag')}, pending {g.get('pending')}; "
                    f"consumers: {seen}")
        except (redis.RedisError, OSError) as exc:
            return f"queue state unavailable: {type(exc).__name__}: {exc}"

    def _read_output(self, rec: PipelineRecord, job_id: str) -> None:
        store = self.wl.store
        if store is None:
            return  # completion from the job record only; the summary says what is not verified
        try:
            meta = store.read_metadata(job_id)
            rec.server_requests = meta.get("requests_sent")
            rec.output_sha256 = hashlib.sha256(store.read_file(job_id, MARKDOWN)).hexdigest()
            rec.output_verified = True
        except (OSError, ValueError, KeyError, TransientError):
            rec.output_verified = False  # marked done, yet no readable output in this store

    async def aclose(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            try:
                await self._poller
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - shutting down; the run is over
                pass
        await self.client.aclose()


def outputs_summary(records: list[PipelineRecord], wl: PipelineWorkload) -> dict[str, Any]:
    """What this run could verify about the documents' outputs, and what it could not."""
    done = [r for r in records if r.phase == "measure" and r.status == "done"]
    out: dict[str, Any] = {**wl.describe(), "done": len(done)}
    if wl.output_dir:
        out["verified"] = sum(1 for r in done if r.output_verified)
        out["missing"] = sum(1 for r in done if r.output_verified is False)
        out["not_verified"] = [] if not out["missing"] else [
            f"{out['missing']} documents marked done have no readable output under {wl.output_dir}"]
    else:
        out["verified"] = 0
        out["missing"] = None
        out["not_verified"] = [
            "output files (written, complete): no output store readable here (--outputs-at)",
            "output hash (output_equivalence gate)"]
    proc = [r.processing_s for r in done if r.processing_s is not None]
    out["worker_processing_s_mean"] = float(np.mean(proc)) if proc else None
    out["worker_pages"] = sum(r.worker_pages or 0 for r in done)
    return out


def pipeline_checks(records: list[PipelineRecord]) -> list[Check]:
    """Validity check: the queue kept moving (no stall)."""
    stalled = [r for r in records if r.error == STALLED]
    why = stalled[0].error_detail if stalled else "documents kept moving through the queue"
    return [{"check": "queue progress", "measured": len(stalled), "threshold": "== 0 stalled documents",
             "passed": not stalled, "why": why}]


def summary_lines(p: dict[str, Any]) -> list[str]:
    """The pipeline block of the printed summary: where completion came from, what is unverified."""
    lines = [f"queue: {p['queue']} stream {p['stream']!r} group {p['group']!r}; completion from "
             f"{p['completion_from']}; end time {p['end_time']}"]
    if p.get("canary"):
        c = p["canary"]
        lines.append(f"canary: job {c['job_id']} {c['state']} in {c['latency_s']:.2f} s before the load")
    if p.get("output_dir"):
        lines.append(f"outputs: {p['verified']} of {p['done']} done documents verified in {p['output_dir']}")
    for item in p.get("not_verified", []):
        lines.append(f"[yellow]not verified:[/] {item}")
    return lines
