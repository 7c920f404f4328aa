"""Active probes used by gates: start a worker like the stack does; drive a breaker cycle."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import httpx

from bench.target import Target
from contract.metrics import BreakerState  # the gauge's values, defined once with the metric
from stack.procs import free_port, stop_group


def time_worker_startup(target: Target, timeout_s: float) -> float | None:
    """Seconds from spawning one extra worker (the stack's own command) to /readyz 200."""
    from contract.spec_loader import project_root
    from contract.worker_env import ENV_METRICS_PORT
    from stack.components import BuildContext
    from stack.launcher import LocalStack
    from stack.secrets import read_secrets
    from stack.workers import worker_component

    root = project_root()
    spec = target.stack_spec()
    paths = LocalStack(spec, root).paths
    ctx = BuildContext(spec, paths, root, target.api_key)
    comp = worker_component(ctx, spec.worker_pool.replicas + 50)  # an index no replica uses
    port = free_port()
    env = {**os.environ, **comp.env, **read_secrets(comp.secrets), ENV_METRICS_PORT: str(port),
           "PYTHONUNBUFFERED": "1"}
    key_ref = spec.worker_server.api_key
    if key_ref is not None and target.api_key:  # the target's key, wherever the stack keeps it
        env[key_ref.env] = target.api_key
    if target.queue_url:
        env[spec.queue.url_env] = target.queue_url
    log = (target.state_dir or Path("/tmp")) / "bench-worker-startup-probe.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with open(log, "ab") as fh:
        proc = subprocess.Popen(comp.argv, env=env, cwd=comp.cwd or root, stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        while time.monotonic() - t0 < timeout_s:
            if proc.poll() is not None:
                raise RuntimeError(f"the probe worker exited with {proc.returncode}; see {log}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=0.5).status_code == 200:
                    return time.monotonic() - t0
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        return None
    finally:  # SIGTERM to the worker alone (it stops its render pool itself), then the group
        stop_group(proc, 20.0, term_leader_only=True)


def _breaker_states(target: Target, http: httpx.Client, metric: str) -> dict[str, float]:
    from bench.server_metrics import scrape

    out = {}
    for name, c in target.components.items():
        if c.get("role") == "worker":
            snap = scrape(c["url"], http)
            if snap and metric in snap:
                out[name] = snap[metric]
    return out


def breaker_cycle(target: Target, http: httpx.Client, metric: str, open_within_s: float,
                  recover_within_s: float) -> dict[str, float | None]:
    """Fail every inference request (simulator faults), submit documents until a breaker opens,
    clear the fault, keep submitting until every breaker is closed again."""
    from bench.pdfgen import make_pdf

    if not _breaker_states(target, http, metric):
        raise RuntimeError(f"no worker of the stack exports {metric}")
    faults = f"{target.base_url}/sim/faults"
    r = http.put(faults, json={"error_rate": 1.0, "error_status": 503}, headers=target.headers)
    if r.status_code >= 300:
        raise RuntimeError(f"cannot inject faults at {faults} ({r.status_code}): the breaker probe needs "
                           "the simulator as inference engine (splitstack up --engine sim)")
    import redis

    from worker.jobs_view import submit

    spec = target.stack_spec()
    rds = redis.Redis.from_url(target.queue_url or "", decode_responses=True)
    pdf = make_pdf((target.state_dir or Path("/tmp")) / "bench-pdfs" / "breaker-probe.pdf", 1, seed=7)
    opened = closed = None
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < open_within_s:
            submit(rds, spec, [pdf])
            time.sleep(1.0)
            if any(v == BreakerState.open for v in _breaker_states(target, http, metric).values()):
                opened = time.monotonic() - t0
                break
    finally:
        http.put(faults, json={"error_rate": 0.0}, headers=target.headers)
    if opened is None:
        return {"opened_s": None, "closed_s": None}
    t1 = time.monotonic()
    while time.monotonic() - t1 < recover_within_s:
        if all(v == BreakerState.closed for v in _breaker_states(target, http, metric).values()):
            closed = time.monotonic() - t1
            break
        submit(rds, spec, [pdf])  # a half-open breaker closes on a successful trial request
        time.sleep(1.0)
    return {"opened_s": opened, "closed_s": closed}
