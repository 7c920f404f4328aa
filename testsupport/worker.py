"""Real processes on loopback for the worker's integration tests and benchmarks: Redis, the
simulator, N workers. Every process is started on a free port and stopped (killed if needed) by
:meth:`Harness.close`, also on failure."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis

from contract.spec_loader import load_stack, project_root
from stack.workers import write_resolved_spec

ROOT = project_root(Path(__file__))
API_KEY = "test-key-not-secret"
MODEL = "tiny"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(predicate, timeout_s: float, what: str, interval_s: float = 0.1):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise TimeoutError(f"{what}: not true after {timeout_s:.0f} s")


def _http_ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen
    log: Path
    port: int

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 25.0) -> int | None:
        if self.alive():
            self.popen.send_signal(sig)
            try:
                self.popen.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        return self.popen.returncode


@dataclass
class Harness:
    root: Path
    overrides: dict[str, Any] = field(default_factory=dict)
    env_extra: dict[str, str] = field(default_factory=dict)
    procs: list[Proc] = field(default_factory=list)
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
                **self.overrides}

    # -- processes ----------------------------------------------------------------------------
    def _start(self, name: str, argv: list[str], port: int, env: dict[str, str] | None = None) -> Proc:
        log = self.logs / f"{name}.log"
        f = open(log, "ab")
        popen = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT,
                                 env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
                                 start_new_session=True)
        proc = Proc(name, popen, log, port)
        self.procs.append(proc)
        return proc

    def start_redis(self) -> Proc:
        data = self.root / "redis"
        data.mkdir(exist_ok=True)
        proc = self._start("redis", [shutil.which("redis-server") or "redis-server", "--bind", "127.0.0.1",
                                     "--port", str(self.redis_port), "--dir", str(data), "--save", "",
                                     "--appendonly", "yes", "--appendfsync", "everysec"], self.redis_port)
        wait_until(lambda: self._redis_ping(), 10, "redis up")
        return proc

    def _redis_ping(self) -> bool:
        try:
            return bool(self.redis().ping())
        except redis.RedisError:
            return False

    def start_sim(self, *extra: str) -> Proc:
        proc = self._start(f"sim-{len(self.procs)}", [
            sys.executable, "-m", "splitstack.cli.sim", "serve", "--host", "127.0.0.1", "--port", str(self.server_port),
            "--api-key", API_KEY, "--profile", self.sim_profile, "--seed", "0", "--model-name", MODEL, *extra,
        ], self.server_port)
        wait_until(lambda: _http_ok(f"http://127.0.0.1:{self.server_port}/health"), 30, "simulator up")
        return proc

    def worker_env(self, port: int) -> dict[str, str]:
        spec = self.spec
        return {
            "SPLITSTACK_SPEC_FILE": str(write_resolved_spec(spec, self.root / "worker-spec.json")),
            "SPLITSTACK_SERVER_URL": f"http://127.0.0.1:{self.server_port}",
            spec.queue.url_env: self.redis_url,
            "SPLITSTACK_OUTPUT_DIR": str(self.outputs),
            "SPLITSTACK_WORKER_METRICS_PORT": str(port),
            spec.worker_server.api_key.env if spec.worker_server.api_key else "UNUSED": API_KEY,
            "OMP_NUM_THREADS": "1",
            "MALLOC_ARENA_MAX": "2",
            **self.env_extra,
        }

    def start_worker(self, index: int | None = None, wait_ready: bool = True) -> Proc:
        index = len([p for p in self.procs if p.name.startswith("worker")]) if index is None else index
        port = free_port()
        proc = self._start(f"worker-{index}", [sys.executable, "-m", "splitstack.cli.worker_process", "--stack", "local",
                                               "--index", str(index)], port, self.worker_env(port))
        if wait_ready:
            self.wait_ready(proc)
        return proc

    def wait_ready(self, proc: Proc, timeout_s: float = 60) -> None:
        def ready() -> bool:
            if not proc.alive():
                raise RuntimeError(f"{proc.name} exited ({proc.popen.returncode}):\n{proc.log.read_text()[-3000:]}")
            return _http_ok(f"http://127.0.0.1:{proc.port}/readyz")
        wait_until(ready, timeout_s, f"{proc.name} ready")

    def close(self) -> None:
        for proc in reversed(self.procs):
            proc.stop(signal.SIGTERM, timeout_s=20)

    # -- clients ------------------------------------------------------------------------------
    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"

    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(self.redis_url, decode_responses=True, socket_connect_timeout=2)

    def metrics(self, proc: Proc) -> str:
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


def metric_value(text: str, name: str, labels: dict[str, str] | None = None) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels`` (prometheus text format)."""
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in (labels or {}).items()):
                total += sample.value
    return total
