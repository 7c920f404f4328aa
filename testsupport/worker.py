"""Real processes on loopback for the worker's integration tests and benchmarks: Redis, the
simulator, N workers. Every process is started on a free port in its own process group
(testsupport/procs.py) and stopped by :meth:`Harness.close` (SIGTERM, SIGKILL if needed), also on
failure."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis

from contract.spec_loader import load_stack, project_root
from stack.workers import write_resolved_spec
from testsupport.procs import Service, free_port, free_port_run, start, wait_until

ROOT = project_root(Path(__file__))
API_KEY = "test-key-not-secret"
MODEL = "tiny"
REDIS_READY_S = 10.0
WORKER_READY_S = 60.0  # imports, Redis, /v1/models, MinerU loaded: slow on a busy CI box


@dataclass
class Harness:
    root: Path
    overrides: dict[str, Any] = field(default_factory=dict)
    env_extra: dict[str, str] = field(default_factory=dict)
    procs: list[Service] = field(default_factory=list)
    redis_port: int = field(default_factory=free_port)
    server_port: int = field(default_factory=free_port)
    sim_profile: str = "instant"

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.outputs = self.root / "outputs"
        self.logs = self.root / "logs"
        self.logs.mkdir(exist_ok=True)
        self.spec = load_stack("local", ROOT, overrides=self.spec_overrides())

    def spec_overrides(self) -> dict[str, Any]:
        return {"inference_servers.0.engine": "sim", "inference_servers.0.port": self.server_port,
                "queue.port": self.redis_port, "local.state_dir": str(self.root / "state"),
                # the tests write their PDFs under the test's folder (the temp folder is no
                # default input root: contract/inputs.py)
                "worker_pool.input_roots": [str(self.root.parent)],
                **self.overrides}

    # -- processes: each in its own group, stopped by close() -------------------------------------
    def _start(self, name: str, argv: list[str], port: int, env: dict[str, str] | None = None,
               term_leader_only: bool = False) -> Service:
        proc = start(name, argv, self.logs / f"{name}.log", port=port,
                     env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}, term_leader_only=term_leader_only)
        self.procs.append(proc)
        return proc

    def start_redis(self) -> Service:
        data = self.root / "redis"
        data.mkdir(exist_ok=True)
        proc = self._start("redis", [shutil.which("redis-server") or "redis-server", "--bind", "127.0.0.1",
                                     "--port", str(self.redis_port), "--dir", str(data), "--save", "",
                                     "--appendonly", "yes", "--appendfsync", "everysec"], self.redis_port)
        proc.wait_ready(self._redis_ping, REDIS_READY_S)
        return proc

    def _redis_ping(self) -> bool:
        try:
            return bool(self.redis().ping())
        except redis.RedisError:
            return False

    def start_sim(self, *extra: str) -> Service:
        proc = self._start(f"sim-{len(self.procs)}", [
            sys.executable, "-m", "splitstack.cli.sim", "serve", "--host", "127.0.0.1",
            "--port", str(self.server_port), "--profile", self.sim_profile,
            "--seed", "0", "--model-name", MODEL, *extra,
        ], self.server_port, env={"VLLM_API_KEY": API_KEY})  # as the stack does: never in argv
        proc.wait_ready("/health")
        return proc

    def start_private_engines(self, count: int, *extra: str) -> tuple[Service, list[str]]:
        """The monolithic twin: ``sim serve --private-engines count`` on consecutive free ports; its
        engines' URLs (worker i calls the i-th). Returns once the ports are open: the engines answer
        /health 503 until their load time has passed."""
        first = free_port_run(count)
        proc = self._start(f"sim-private-{len(self.procs)}", [
            sys.executable, "-m", "splitstack.cli.sim", "serve", "--host", "127.0.0.1", "--port", str(first),
            "--profile", self.sim_profile, "--seed", "0", "--model-name", MODEL, "--private-engines", str(count),
            *extra,
        ], first, env={"VLLM_API_KEY": API_KEY})
        urls = [f"http://127.0.0.1:{first + i}" for i in range(count)]
        proc.wait_ready(lambda: all(_answers(f"{u}/health") for u in urls), what="the private engines' ports open")
        return proc, urls

    def worker_env(self, port: int, server_url: str | None = None) -> dict[str, str]:
        spec = self.spec
        return {
            "SPLITSTACK_SPEC_FILE": str(write_resolved_spec(spec, self.root / "worker-spec.json")),
            "SPLITSTACK_SERVER_URL": server_url or f"http://127.0.0.1:{self.server_port}",
            spec.queue.url_env: self.redis_url,
            "SPLITSTACK_OUTPUT_DIR": str(self.outputs),
            "SPLITSTACK_WORKER_METRICS_PORT": str(port),
            spec.worker_server.api_key.env if spec.worker_server.api_key else "UNUSED": API_KEY,
            "OMP_NUM_THREADS": "1",
            "MALLOC_ARENA_MAX": "2",
            **self.env_extra,
        }

    def start_worker(self, index: int | None = None, wait_ready: bool = True,
                     server_url: str | None = None) -> Service:
        """Worker ``index`` on the shared server, or on ``server_url`` (e.g. its private engine)."""
        index = len([p for p in self.procs if p.name.startswith("worker")]) if index is None else index
        port = free_port()
        # SIGTERM to the worker alone, as Kubernetes sends it: it drains the document in flight
        # with its PDF render pool, which a SIGTERM of its own would break
        proc = self._start(f"worker-{index}", [sys.executable, "-m", "splitstack.cli.worker_process",
                                               "--stack", "local", "--index", str(index)],
                           port, self.worker_env(port, server_url), term_leader_only=True)
        if wait_ready:
            self.wait_ready(proc)
        return proc

    def wait_ready(self, proc: Service, timeout_s: float = WORKER_READY_S) -> None:
        proc.wait_ready("/readyz", timeout_s)

    def close(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()

    # -- clients ------------------------------------------------------------------------------
    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"

    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(self.redis_url, decode_responses=True, socket_connect_timeout=2)

    def metrics(self, proc: Service) -> str:
        return httpx.get(f"http://127.0.0.1:{proc.port}/metrics", timeout=5).text

    def submit(self, paths: list[Path], **kw: Any) -> list[str]:
        from worker.jobs_view import submit

        return submit(self.redis(), self.spec, paths, **kw)

    def states(self, ids: list[str]) -> dict[str, dict[str, str]]:
        from worker.jobs_view import list_jobs

        return {row["job_id"]: row for row in list_jobs(self.redis(), self.spec, ids=ids)}

    def wait_terminal(self, ids: list[str], timeout_s: float) -> dict[str, dict[str, str]]:
        def done():
            rows = self.states(ids)
            return rows if all(r.get("state") in ("done", "dead_lettered") for r in rows.values()) else None
        return wait_until(done, timeout_s, f"{len(ids)} jobs finished", interval_s=0.25)

    def dead_letters(self) -> list[dict[str, str]]:
        return [fields for _id, fields in self.redis().xrange(self.spec.queue.dead_letter_stream)]


def _answers(url: str) -> bool:
    """Anything answers at ``url`` (a loading engine's 503 included)."""
    try:
        httpx.get(url, timeout=1)
    except httpx.HTTPError:
        return False
    return True


def metric_value(text: str, name: str, labels: dict[str, str] | None = None) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels`` (prometheus text format)."""
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in (labels or {}).items()):
                total += sample.value
    return total
