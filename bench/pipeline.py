"""The ``pipeline`` workload: PDFs enqueued on the worker queue, followed until their output is
written.

Jobs go through the worker's own queue code (worker.queue.JobQueue.enqueue), so the bench
writes exactly what ``splitstack submit`` writes. A document's end time is the worker's
'done' timestamp on the job record (written after the output was committed), mapped onto the
bench's monotonic clock through the send's wall time; this is exact on one host (the local
stack) and bounded by the observation time otherwise.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.pdfgen import count_pages, make_pdf
from bench.records import PipelineRecord
from bench.scenario import PipelineScenario
from bench.target import Target

TERMINAL = ("done", "dead_lettered")
MARKDOWN = "document.md"  # worker/store.py's output file name


@dataclass(frozen=True)
class Document:
    path: str
    pages: int


@dataclass
class PipelineWorkload:
    documents: list[Document]
    redis_url: str
    stream: str
    group: str
    dead_letter_stream: str
    output_dir: str | None
    job_timeout_s: float
    poll_interval_s: float
    name: str = "pipeline"

    @classmethod
    def build(cls, scn: PipelineScenario, target: Target) -> PipelineWorkload:
        if target.stack is None or target.queue_url is None:
            raise ValueError("the pipeline scenario needs a stack with a queue: use --stack NAME "
                             "(a --url target has no worker queue)")
        spec = target.stack_spec()
        docs = []
        if scn.documents.directory:
            folder = Path(scn.documents.directory).resolve()
            paths = sorted(folder.glob("*.pdf"))
            if not paths:
                raise ValueError(f"documents.directory {folder}: no *.pdf files there")
            docs = [Document(str(p), count_pages(p)) for p in paths]
        else:
            rng = np.random.default_rng(scn.load.seed)
            pages = scn.documents.pages.sample(rng, scn.documents.generate_count)
            base = (target.state_dir or Path(".state/local")) / "bench-pdfs" / f"seed{scn.load.seed}"
            for i, n in enumerate(pages):
                p = base / f"doc-{i:04d}-{n}p.pdf"
                if not p.is_file():
                    make_pdf(p, n, seed=scn.load.seed * 100_000 + i)
                docs.append(Document(str(p.resolve()), n))
        out = target.output_dir
        return cls(docs, target.queue_url, spec.queue.stream, spec.queue.group, spec.queue.dead_letter_stream,
                   str(out) if out else None, scn.job_timeout_s, scn.poll_interval_s)

    async def sender(self, process: int, timeout_s: float) -> PipelineSender:
        import redis.asyncio as aioredis

        from worker.queue import JobQueue

        client = aioredis.Redis.from_url(self.redis_url, decode_responses=True)
        queue = JobQueue(client, self.stream, self.group, self.dead_letter_stream, consumer=f"bench-{process}")
        return PipelineSender(self, queue, client, process)


class PipelineSender:
    def __init__(self, wl: PipelineWorkload, queue, client, process: int) -> None:
        self.wl, self.queue, self.client, self.process = wl, queue, client, process

    async def send(self, index: int, intended_ns: int, phase: str, t0: int) -> PipelineRecord:
        from worker.jobs import Job

        doc = self.wl.documents[index % len(self.wl.documents)]
        job = Job(source=doc.path, correlation_id=f"bench-{self.process}-{index}")
        rec = PipelineRecord(request_id=job.job_id, phase=phase, process=self.process, document=doc.path,
                             pages=doc.pages, intended_ns=intended_ns, sent_ns=0, wall_sent_s=0.0)
        rec.sent_ns = time.monotonic_ns() - t0
        rec.wall_sent_s = time.time()
        try:
            await self.queue.enqueue(job)
        except Exception as exc:  # redis down: the document was never submitted
            rec.status, rec.error, rec.error_detail = "failed", "enqueue_error", str(exc)
            rec.end_ns = time.monotonic_ns() - t0
            return rec
        deadline = time.monotonic() + self.wl.job_timeout_s
        key = self.queue.job_key(job.job_id)
        state: dict = {}
        while time.monotonic() < deadline:
            state = await self.client.hgetall(key)
            if state.get("state") in TERMINAL:
                break
            await asyncio.sleep(self.wl.poll_interval_s)
        observed = time.monotonic_ns() - t0
        s = state.get("state")
        if s not in TERMINAL:
            rec.status, rec.error = "timeout", "timeout"
            rec.error_detail = f"not done after {self.wl.job_timeout_s:g} s (last state {s})"
            return rec
        done_wall = float(state.get("updated_at", time.time()))
        rec.end_ns = min(observed, max(rec.sent_ns, rec.sent_ns + int((done_wall - rec.wall_sent_s) * 1e9)))
        if s == "dead_lettered":
            rec.status, rec.error = "failed", f"dead_lettered:{state.get('kind', 'unknown')}"
            rec.error_detail = state.get("reason")
            return rec
        rec.status = "done"
        self._read_output(rec, job.job_id)
        return rec

    def _read_output(self, rec: PipelineRecord, job_id: str) -> None:
        if not self.wl.output_dir:
            return
        folder = Path(self.wl.output_dir) / job_id
        try:
            import json

            meta = json.loads((folder / "metadata.json").read_text())
            rec.server_requests = meta.get("requests_sent")
            md = folder / MARKDOWN
            if md.is_file():
                rec.output_sha256 = hashlib.sha256(md.read_bytes()).hexdigest()
        except (OSError, ValueError):
            pass  # output on another host: latency is still known, equivalence is not

    async def aclose(self) -> None:
        await self.client.aclose()
