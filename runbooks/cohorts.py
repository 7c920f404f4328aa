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
from urllib.parse import urlsplit

import httpx

from bench.gating.cohorts import CohortSample, ShadowPair, markdown_similarity
from contract import naming, sizing
from contract.migration import (
    MONOLITHIC,
    MONOLITHIC_POOL_DEPLOYMENT,
    ROUTER_DEPLOYMENT,
    SPLIT,
    check_share,
    cohort_stream,
    shadow_id,
    shadow_key,
    share_key,
)
from contract.spec import Spec
from contract.worker_env import with_password
from runbooks.model import PlatformError, Refused

ABORT_ALERT = "MigrationCohortBreach"
# KEYS: cohort stream, jobs stream; ARGV: group, message id, field/value pairs. Moves one entry
# back, atomically; an entry already moved (a retry) is gone from the cohort stream: 0.
_RETURN_LUA = """
if #redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2]) == 0 then return 0 end
redis.call('XADD', KEYS[2], '*', unpack(ARGV, 3))
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
return 1
"""
ALERTMANAGER_SERVICE = "alertmanager-operated"  # the Prometheus operator's, for any Alertmanager
ALERTMANAGER_PORT = 9093


@dataclass
class CohortControl:
    redis: Any  # a sync redis.Redis with decode_responses=True
    stream: str  # queue.stream: the jobs stream producers write to
    group: str
    decommission: Callable[[], list[str]]  # stops the monolithic pool; names what it stopped
    page: Callable[[str], str]  # sends the abort page; says where it went
    # Where only the deployment's program can decommission the monolithic pool (Kubernetes):
    # the exact change and command, printed instead of a stop step.
    decommission_change: str | None = None
    # The cluster's migration ended (`pulumi up` removed the router and the monolithic pool)
    # while Redis still holds its share: what is left is returning the cohort streams' entries.
    finished: bool = False
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

    def leftovers(self, topology: str) -> int:
        """Entries still in a cohort's stream (undelivered, or pending for a worker that is gone)."""
        return len(self._unfinished(cohort_stream(self.stream, topology)))

    def return_leftovers(self) -> dict[str, int]:
        """Move every entry left in the cohort streams back to the jobs stream, once each (one
        script per entry: XADD to the jobs stream, XACK and XDEL on the cohort's), and drop the
        share; per cohort, how many. For after `pulumi up` ended the migration: the workers now
        read the jobs stream, and no worker of the old pods is left to read the cohort streams."""
        moved = {}
        for topology in (SPLIT, MONOLITHIC):
            stream = cohort_stream(self.stream, topology)
            n = 0
            for message_id, fields in self._unfinished(stream):
                pairs = [x for kv in fields.items() for x in kv]
                n += int(self.redis.eval(_RETURN_LUA, 2, stream, self.stream, self.group, message_id, *pairs))
            moved[topology] = n
        self.redis.delete(share_key(self.stream))
        return moved

    def _unfinished(self, stream: str) -> list[tuple[str, dict[str, str]]]:
        """Entries of a cohort stream its workers have not acked: pending ones (their worker is
        gone) and those after the group's last delivered id (never read). Acked entries stay in
        a stream until trimmed: they are done, not left over."""
        if not self.redis.exists(stream):
            return []
        group = next((g for g in self.redis.xinfo_groups(stream) if g.get("name") == self.group), None)
        if group is None:
            return []
        pending = [str(p["message_id"]) for p in self.redis.xpending_range(stream, self.group, "-", "+", 10**6)]
        out = [(i, f) for i in pending for _id, f in self.redis.xrange(stream, i, i) if f]
        out += self.redis.xrange(stream, f"({group['last-delivered-id']}", "+")
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


def abort_alert(stack: str, summary: str) -> dict[str, Any]:
    """The abort page, in Alertmanager's v2 API form, routed like every page."""
    return {"labels": {"alertname": ABORT_ALERT, "severity": "page", "service": "pipeline", "stack": stack},
            "annotations": {"summary": summary, "description": "runbook migrate-guard set the split share to 0"}}


def alertmanager_pager(url: str, stack: str, timeout_s: float = 5.0,
                       auth: tuple[str, str] | None = None) -> Callable[[str], str]:
    """A page through Alertmanager's v2 API (POST /api/v2/alerts), routed like every page;
    ``auth``: the (user, password) its API asks for (the local stack's is behind basic auth)."""

    def page(summary: str) -> str:
        alert = abort_alert(stack, summary)
        try:
            r = httpx.post(f"{url}/api/v2/alerts", json=[alert], timeout=timeout_s, auth=auth)
            r.raise_for_status()
        except httpx.HTTPError as exc:
            return f"page NOT sent to {url} ({type(exc).__name__}: {exc}); the abort itself is done"
        return f"paged through {url} ({ABORT_ALERT})"

    return page


def spec_change(spec: Spec, monolithic_workers: int) -> str:
    """The stack-file change that starts (N > 0) or ends (0) the migration on a cluster, exactly."""
    s = spec.stack
    return (f"set `splitstack:migration: {{monolithic_workers: {monolithic_workers}}}` in Pulumi.{s}.yaml, "
            f"check it with `splitstack infra plan --stack {s}`, then `pulumi up --stack {s}`")


def kubernetes_cohort_control(spec: Spec, platform: Any, redis_url: str | None,
                              timeout_s: float = 5.0) -> CohortControl:
    """The migration control of a stack on Kubernetes. The share lives in the cluster's Redis,
    reached at ``redis_url`` (a port-forward of its Service; its password, when the URL has
    none, read from the Secret queue.password names, with the kube client's own credentials);
    the page goes to the Alertmanager through the API server's service proxy. Refused, naming
    the change, when the cluster does not run both pools: only `pulumi up` starts them."""
    workers = spec.migration.monolithic_workers
    if not sizing.migrating(spec) and redis_url is not None and not platform.rendered(ROUTER_DEPLOYMENT):
        try:
            ended = _redis(spec, platform, redis_url, timeout_s)
        except (PlatformError, Refused):
            ended = None  # then the refusal below says what to do
        if ended is not None and ended.get(share_key(spec.queue.stream)) is not None:
            # The spec change and `pulumi up` that end the migration are done; its share is not.
            return CohortControl(ended, spec.queue.stream, spec.queue.group, _no_pool(spec), _no_page,
                                 decommission_change=spec_change(spec, 0), finished=True)
    if not sizing.migrating(spec):
        free = sizing.gpu_slots(spec) - sizing.gpu_slots_used(spec)
        raise Refused(
            f"stack {spec.stack!r} is not migrating: its Pulumi program renders one worker pool and no router "
            "(migration.monolithic_workers is 0), so there is no share to move. Only the program starts both "
            f"pools: {spec_change(spec, max(free, 1))} (the monolithic pool takes one GPU per worker; "
            f"{max(free, 0)} of the pool's GPUs are free now" + ("" if free > 0 else ", so raise "
                                                                 "gpu_node_pool.node_count with it")
            + "), then run this again")
    missing = [d for d in (ROUTER_DEPLOYMENT, MONOLITHIC_POOL_DEPLOYMENT) if not platform.rendered(d)]
    if missing:
        raise Refused(
            f"the spec sets migration.monolithic_workers: {workers} but {platform.target()} has no Deployment "
            f"{' or '.join(missing)}: run `pulumi up --stack {spec.stack}` first (`splitstack infra plan --stack "
            f"{spec.stack}` shows what it creates)")
    if redis_url is None:
        raise Refused(
            f"the split share lives in the cluster's Redis: port-forward it (`kubectl -n {spec.namespace} "
            f"port-forward svc/{naming.REDIS_NAME} {spec.queue.port}`) and pass --redis-url "
            f"redis://127.0.0.1:{spec.queue.port}" if spec.queue.kind == "in-cluster" else
            "the split share lives in the stack's external Redis: pass --redis-url with its URL (reachable "
            "from here)")
    client = _redis(spec, platform, redis_url, timeout_s)
    am_ns = naming.prometheus_namespace(spec)

    def page(summary: str) -> str:
        alert = abort_alert(spec.stack, summary)
        try:
            result = platform.service_http(am_ns, ALERTMANAGER_SERVICE, ALERTMANAGER_PORT, "POST",
                                           "/api/v2/alerts", [alert], timeout_s)
        except (PlatformError, Refused) as exc:
            return f"page NOT sent ({exc}); the abort itself is done"
        if result.status >= 300:
            return (f"page NOT sent: {am_ns}/{ALERTMANAGER_SERVICE} answered HTTP {result.status} "
                    f"({result.text[:200]}); the abort itself is done")
        return f"paged through {am_ns}/{ALERTMANAGER_SERVICE} ({ABORT_ALERT})"

    return CohortControl(client, spec.queue.stream, spec.queue.group, _no_pool(spec), page,
                         decommission_change=spec_change(spec, 0))


def _redis(spec: Spec, platform: Any, redis_url: str, timeout_s: float) -> Any:
    """The cluster's Redis at ``redis_url``; its password, when the URL has none, from the
    Secret queue.password names (read with the kube client's own credentials)."""
    import redis

    if urlsplit(redis_url).scheme not in ("redis", "rediss", "unix"):
        raise Refused(f"--redis-url {redis_url!r}: not a Redis URL; e.g. redis://127.0.0.1:{spec.queue.port} "
                      "after the port-forward")
    password = None
    ref = spec.queue.password
    if ref is not None and spec.queue.kind == "in-cluster":
        password = platform.secret_value(ref.name, ref.key)
    try:
        client = redis.Redis.from_url(with_password(redis_url, password), decode_responses=True,
                                      socket_connect_timeout=timeout_s, socket_timeout=timeout_s)
    except ValueError as exc:
        raise Refused(f"--redis-url {redis_url!r}: not a Redis URL ({exc})") from None
    try:
        client.ping()
    except redis.RedisError as exc:
        raise PlatformError(f"--redis-url {redis_url}: Redis does not answer ({type(exc).__name__}: {exc}); "
                            "is the port-forward running?") from exc
    return client


def _no_pool(spec: Spec) -> Callable[[], list[str]]:
    def decommission() -> list[str]:
        raise Refused(f"the monolithic pool is the Pulumi program's: {spec_change(spec, 0)}")
    return decommission


def _no_page(summary: str) -> str:
    return "no page: the migration has ended"
