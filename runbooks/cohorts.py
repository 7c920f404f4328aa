"""What the migration actions read and change on a live stack: the split share (Redis, next to
the jobs stream), the window's documents per cohort (the job records the workers keep), the
monolithic pool (stopped by the platform) and the page an abort sends.

The window's documents come from the job records, not from Prometheus: each record names its
cohort (the router writes it), its submission time and its end, so both cohorts are judged on
exactly the documents submitted in the same window, and a routed document not finished
``stuck_after_s`` after its submission counts as failed, queued or running (a hung server is a
breach, not an absence of data).

The shadow sample's pairs come from the same records: a document the router copied names the
copy's cohort (``shadow``), the copy has its own record (``<id>:shadow``, not in the index), and
both outputs are read from the output store and compared (bench/gating/cohorts.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from bench.gating.cohorts import CohortSample, ShadowPair, markdown_similarity
from contract.migration import MONOLITHIC, SPLIT, check_share, cohort_stream, shadow_id, shadow_key, share_key

ABORT_ALERT = "MigrationCohortBreach"


@dataclass
class CohortControl:
    redis: Any  # a sync redis.Redis with decode_responses=True
    stream: str  # queue.stream: the jobs stream producers write to
    group: str
    decommission: Callable[[], list[str]]  # stops the monolithic pool; names what it stopped
    page: Callable[[str], str]  # sends the abort page; says where it went
    # A committed output's Markdown by job id (None: not there); None: outputs not readable here,
    # the shadow sample is not judged.
    read_markdown: Callable[[str], str | None] | None = None

    def share(self) -> int:
        raw = self.redis.get(share_key(self.stream))
        return int(raw) if raw is not None else 0

    def set_share(self, percent: int) -> int:
        old = self.redis.set(share_key(self.stream), str(check_share(percent)), get=True)
        return int(old) if old is not None else 0

    def shadow_share(self) -> int:
        raw = self.redis.get(shadow_key(self.stream))
        return int(raw) if raw is not None else 0

    def set_shadow_share(self, percent: int) -> int:
        old = self.redis.set(shadow_key(self.stream), str(check_share(percent)), get=True)
        return int(old) if old is not None else 0

    def samples(self, now: float, window_s: float, stuck_after_s: float) -> list[CohortSample]:
        ids = self.redis.zrangebyscore(f"{self.stream}:index", now - window_s, now)
        pipe = self.redis.pipeline(transaction=False)
        for job_id in ids:
            pipe.hmget(f"{self.stream}:job:{job_id}", "topology", "state", "submitted_at", "updated_at", "pages")
        out = []
        for topology, state, submitted, updated, pages in pipe.execute() if ids else []:
            if topology not in (SPLIT, MONOLITHIC) or submitted is None:
                continue  # not routed (yet): no cohort
            if state == "done":
                out.append(CohortSample(topology=topology, ok=True, pages=int(float(pages or 0)),
                                        latency_s=max(0.0, float(updated) - float(submitted))))
            elif state == "dead_lettered":
                out.append(CohortSample(topology=topology, ok=False))
            elif state in ("queued", "running", "fanned_out") and now - float(submitted) > stuck_after_s:
                # routed to its cohort and unfinished this long after its submission: a breach,
                # taken or not. A hung server's workers stop taking documents (their readiness
                # probe fails, the breaker opens), so a hang leaves documents queued, not
                # running; a cohort too slow to start a document within stuck_after_s breaches too.
                out.append(CohortSample(topology=topology, ok=False))
        return out

    def shadow_pairs(self, now: float, window_s: float) -> list[ShadowPair] | None:
        """The window's finished shadow pairs (a copy still running is left out); None when no
        sample is taken (shadow share 0 and no copy in the window) or outputs are not readable."""
        if self.read_markdown is None:
            return None
        ids = self.redis.zrangebyscore(f"{self.stream}:index", now - window_s, now)
        pipe = self.redis.pipeline(transaction=False)
        for job_id in ids:
            pipe.hmget(f"{self.stream}:job:{job_id}", "topology", "state", "shadow")
            pipe.hget(f"{self.stream}:job:{shadow_id(job_id)}", "state")
        rows = pipe.execute() if ids else []
        copied = 0
        pairs: list[ShadowPair] = []
        for i, job_id in enumerate(ids):
            (topology, state, shadow), shadow_state = rows[2 * i], rows[2 * i + 1]
            if not shadow or topology not in (SPLIT, MONOLITHIC):
                continue
            copied += 1
            if state != "done" or shadow_state not in ("done", "dead_lettered"):
                continue  # the document failed (the error rate judges it) or a side is unfinished
            if shadow_state == "dead_lettered":
                pairs.append(ShadowPair(document_id=job_id, topology=topology))
                continue
            mine, theirs = self.read_markdown(job_id), self.read_markdown(shadow_id(job_id))
            if mine is not None and theirs is not None:
                pairs.append(ShadowPair(document_id=job_id, topology=topology,
                                        similarity=markdown_similarity(mine, theirs)))
        return pairs if copied or self.shadow_share() > 0 else None

    def backlog(self, topology: str) -> int:
        """Entries of a cohort's stream not yet delivered or not yet acked."""
        stream = cohort_stream(self.stream, topology)
        for g in self.redis.xinfo_groups(stream) if self.redis.exists(stream) else []:
            if g.get("name") == self.group:
                return int(g.get("lag") or 0) + int(g.get("pending") or 0)
        return 0


def alertmanager_pager(url: str, stack: str, timeout_s: float = 5.0,
                       auth: tuple[str, str] | None = None) -> Callable[[str], str]:
    """A page through Alertmanager's v2 API (POST /api/v2/alerts), routed like every page;
    ``auth``: the (user, password) its API asks for (the local stack's is behind basic auth)."""

    def page(summary: str) -> str:
        alert = {"labels": {"alertname": ABORT_ALERT, "severity": "page", "service": "pipeline", "stack": stack},
                 "annotations": {"summary": summary,
                                 "description": "runbook migrate-guard set the split share to 0"}}
        try:
            r = httpx.post(f"{url}/api/v2/alerts", json=[alert], timeout=timeout_s, auth=auth)
            r.raise_for_status()
        except httpx.HTTPError as exc:
            return f"page NOT sent to {url} ({type(exc).__name__}: {exc}); the abort itself is done"
        return f"paged through {url} ({ABORT_ALERT})"

    return page
