"""Wire one worker process together from the spec and the environment, then run it."""

from __future__ import annotations

import asyncio
import faulthandler
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from contract.migration import ENV_COHORT_STREAMS, cohort_stream
from contract.models import parse_assignments
from contract.spec import Target, WorkerBackend
from contract.spec_loader import load_stack, parse_spec, set_path
from contract.worker_env import ENV_SPEC_FILE
from worker.backends import Backend
from worker.breaker import BreakerState, CircuitBreaker
from worker.client import InferenceClient
from worker.config import ConfigError, WorkerSettings, settings_from_env
from worker.cpu import cpu_budget, pin_local_worker, size_render_pool
from worker.deadlines import DeadlinePolicy
from worker.health import serve
from worker.logs import log, setup_logging
from worker.metrics import WorkerMetrics
from worker.mineru_backend import MinerUBackend, configure_mineru_env
from worker.objectstore import ObjectStore, StoreConfigError, open_store
from worker.otel import tracer_from_env
from worker.pagevlm_backend import PageVlmBackend
from worker.queue import JobQueue
from worker.runner import Worker

logger = logging.getLogger("worker")


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """``--set a.b=value`` flags; values are YAML scalars (5, 2.5, true, text)."""
    return parse_assignments(pairs, "--spec-override", "worker_pool.circuit_breaker.recovery_timeout_s=5")


def build_backend(settings: WorkerSettings, inference: InferenceClient) -> Backend:
    pool = settings.pool
    if settings.in_process is not None:
        from worker.inprocess import InProcessMinerUBackend

        configure_mineru_env(pool.page_window)
        engine = InProcessMinerUBackend(settings.in_process, settings.model_path or "")
        engine.load()  # the engine's load time is part of start-to-ready
        return engine
    if settings.backend is WorkerBackend.page_vlm:
        return PageVlmBackend(inference, settings.model_name, pool.page_vlm_prompt, pool.page_window)

    configure_mineru_env(pool.page_window)  # render processes: sized in main() from the CPU budget
    backend = MinerUBackend(inference, settings.model_name, pool.concurrency_per_worker,
                            pool.request_timeout_s)
    # Import MinerU's whole analysis path now (seconds of imports), not on the first job.
    import mineru.backend.vlm.vlm_analyze  # noqa: F401
    import mineru.backend.vlm.vlm_middle_json_mkcontent  # noqa: F401
    import mineru_vl_utils  # noqa: F401
    return backend


# A stopping worker past these is stuck (see exit_watchdog). Idle, it exits within ~1 s on a quiet
# machine; its interpreter's exit (threads, the page-render pool) took over 3 s on a loaded CI host.
# With documents in flight: the drain, then at most STOP_GRACE_S, inside supervisord's stopwaitsecs.
IDLE_STOP_S = 10.0
STOP_GRACE_S = 4.0


async def run(settings: WorkerSettings, t_start: float) -> int:
    metrics = WorkerMetrics()
    metrics.initialise(settings.backend.value)
    metrics.set_info(settings.mode, engine_loaded=False)
    pool = settings.pool

    def on_breaker_change(state: BreakerState) -> None:
        metrics.breaker_state.set(int(state))
        log(logger, logging.WARNING, "circuit breaker " + state.name)

    breaker = CircuitBreaker(
        pool.circuit_breaker.failure_threshold, pool.circuit_breaker.recovery_timeout_s,
        on_change=on_breaker_change,
    )
    deadlines = DeadlinePolicy(pool.request_deadline_floor_s, pool.request_deadline_slack,
                               pool.request_timeout_s, settings.spec.worker_server.max_model_len)
    inference = InferenceClient(
        settings.server_url, api_key=settings.api_key, breaker=breaker, metrics=metrics,
        concurrency=pool.concurrency_per_worker, request_timeout_s=pool.request_timeout_s,
        max_retries=pool.max_retries, tracer=tracer_from_env(f"splitstack-worker-{settings.index}"),
        deadlines=deadlines,
    )
    redis = aioredis.Redis.from_url(settings.redis_url, decode_responses=True,
                                    socket_timeout=10, socket_connect_timeout=5)
    q = settings.spec.queue
    # While migrating, each cohort reads its own stream, fed by the router (worker/router.py).
    stream = cohort_stream(q.stream, settings.topology) if os.environ.get(ENV_COHORT_STREAMS) == "1" else q.stream
    queue = JobQueue(redis, stream, q.group, q.dead_letter_stream, settings.consumer, records_stream=q.stream)
    try:
        store = open_store(settings.spec, settings.output_dir)
        if isinstance(store, ObjectStore):
            await asyncio.to_thread(store.probe)
    except StoreConfigError as exc:
        await inference.aclose()
        await redis.aclose()
        raise ConfigError(str(exc)) from None
    worker = Worker(settings, queue, store, inference, metrics)
    host = settings.spec.local.host if settings.spec.target is Target.local else "0.0.0.0"
    server = serve(worker, host, settings.metrics_port)
    log(logger, logging.INFO, "listening", metrics_port=server.server_address[1],
        server_url=settings.server_url or None, backend=settings.backend.value, mode=settings.mode,
        output_store=store.location("<job_id>"))

    async def load() -> None:
        worker.backend = await asyncio.to_thread(build_backend, settings, inference)
        metrics.set_info(settings.mode, engine_loaded=True)
        while not worker.ready and not worker._stopping.is_set():  # noqa: SLF001
            await asyncio.sleep(0.05)
        log(logger, logging.INFO, "ready", start_to_ready_s=round(time.monotonic() - t_start, 3))

    async def load_or_stop() -> None:
        try:
            await load()
        except Exception as exc:  # noqa: BLE001 - the engine could not load: exit, with why
            log(logger, logging.ERROR, "engine load failed", mode=settings.mode,
                error=f"{type(exc).__name__}: {exc}")
            failures.append(f"{settings.mode}: the in-process engine did not load: "
                            f"{type(exc).__name__}: {exc}")
            worker.request_stop("engine load failed", exit_code=3)

    async def exit_watchdog() -> None:
        # Past its drain, a stopping worker must not hold `down` until supervisord's SIGKILL:
        # the interpreter then dumps every thread's stack into the log (why it hung) and exits.
        await worker._stopping.wait()  # noqa: SLF001
        # in flight when the stop came (a recycle stops from inside a document's task, which
        # leaves in_flight before this wakes)
        busy = worker.in_flight_at_stop > 0
        budget_s = max(IDLE_STOP_S, settings.drain_timeout_s + STOP_GRACE_S) if busy else IDLE_STOP_S
        faulthandler.dump_traceback_later(budget_s, exit=True)

    failures: list[str] = []
    watchdog = asyncio.create_task(exit_watchdog())
    loader = asyncio.create_task(load_or_stop() if settings.in_process is not None else load())
    try:
        code = await worker.run()
        if failures:
            raise ConfigError(failures[0])
        return code
    finally:
        loader.cancel()
        watchdog.cancel()  # the armed timer stays armed until the process exits
        t_run_end = time.monotonic()
        server.shutdown()
        await inference.aclose()
        await redis.aclose()
        stop_at = worker.stop_requested_at
        log(logger, logging.INFO, "stopped", run_end_s=None if stop_at is None else round(t_run_end - stop_at, 3),
            closed_s=None if stop_at is None else round(time.monotonic() - stop_at, 3))


def load_spec(stack: str, overrides: dict[str, Any]):
    """The launcher's resolved spec when it passed one, else Pulumi.<stack>.yaml; then --set."""
    spec_file = os.environ.get(ENV_SPEC_FILE)
    if not spec_file:
        return load_stack(stack, overrides=overrides)
    try:
        raw = json.loads(Path(spec_file).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{ENV_SPEC_FILE}={spec_file}: cannot read the resolved spec ({exc}); "
                          f"unset {ENV_SPEC_FILE} to read Pulumi.{stack}.yaml instead") from None
    if raw.get("stack") != stack:
        raise ConfigError(f"--stack {stack!r} but {spec_file} holds stack {raw.get('stack')!r}; "
                          f"pass --stack {raw.get('stack')} or unset {ENV_SPEC_FILE}")
    for dotted, value in overrides.items():
        set_path(raw, dotted, value)
    return parse_spec(raw, spec_file)


def main(stack: str, index: int, overrides: list[str], log_level: str = "INFO") -> int:
    t_start = time.monotonic()
    setup_logging(f"worker-{index}", log_level)
    spec = load_spec(stack, parse_overrides(overrides))
    settings = settings_from_env(spec, index)
    if settings.in_process is not None:
        from worker.inprocess import EngineUnavailable, preflight
        from worker.torchless import let_torch_in

        let_torch_in()
        try:
            preflight(settings.in_process)  # before any port opens: exit at once, saying why
        except EngineUnavailable as exc:
            raise ConfigError(str(exc)) from None
    pinned = pin_local_worker(index, spec.worker_pool.cpu_limit_millicores) if spec.target is Target.local else None
    budget = cpu_budget()
    render = size_render_pool(budget)
    log(logger, logging.INFO, "cpu budget", cpus=round(budget.cpus, 2), limited_by=budget.source,
        pinned_to=sorted(pinned) if pinned else None, render_processes=render)
    return asyncio.run(run(settings, t_start))
