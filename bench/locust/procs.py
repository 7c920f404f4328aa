"""Start and always stop the Locust processes of one run (master, workers, or one headless process).

Each process gets its own session (so a terminal's Ctrl-C reaches only `bench`, which then stops
them in order: the master first, gracefully, so it can drain its workers) and its own log file.
Whatever happens (normal end, a worker dying, a timeout, Ctrl-C, SIGTERM), ``close()`` leaves no
process behind: SIGTERM, a grace period, then SIGKILL to each process group and to any
descendant that left it.
"""

from __future__ import annotations

import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from stack.procs import free_port, stop_group

__all__ = ["Fleet", "LocustProc", "LocustRunError", "free_port", "raise_on_sigterm", "wait_for"]


class LocustRunError(RuntimeError):
    """A Locust run that could not complete; the message says which process and why."""


@dataclass
class LocustProc:
    name: str
    proc: subprocess.Popen
    log_path: Path

    def log(self, tail: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-tail:]
        except FileNotFoundError:
            return ""

    @property
    def returncode(self) -> int | None:
        return self.proc.poll()


@dataclass
class Fleet:
    """The Locust processes of one run; use as a context manager."""

    log_dir: Path
    grace_s: float
    procs: list[LocustProc] = field(default_factory=list)

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> LocustProc:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        with open(log_path, "wb") as fh:
            proc = subprocess.Popen(argv, env=env, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        p = LocustProc(name, proc, log_path)
        self.procs.append(p)
        return p

    def pids(self) -> set[int]:
        """Every live process of the fleet, descendants included."""
        out: set[int] = set()
        for p in self.procs:
            try:
                ps = psutil.Process(p.proc.pid)
                out |= {ps.pid, *(c.pid for c in ps.children(recursive=True))}
            except psutil.NoSuchProcess:
                pass
        return out

    def close(self) -> None:
        # the whole tree first: once a process dies, its children are orphans no parent lists any more
        tree = [psutil.Process(pid) for pid in self.pids() if psutil.pid_exists(pid)]
        for p in self.procs:  # master (started first) first: it tells its workers to drain and quit
            stop_group(p.proc, self.grace_s)  # SIGTERM (Locust shuts down cleanly on it), SIGKILL after grace_s
        for ps in tree:  # descendants that left their group (setsid) got no signal so far
            if _alive(ps):
                try:
                    ps.kill()
                except psutil.NoSuchProcess:
                    pass
        end = time.monotonic() + 5
        while any(_alive(ps) for ps in tree) and time.monotonic() < end:
            time.sleep(0.05)
        for p in self.procs:
            try:
                p.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _alive(ps: psutil.Process) -> bool:
    """Running and not a zombie (an orphan's zombie waits for pid 1 to reap it: it is dead)."""
    try:
        return ps.is_running() and ps.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def raise_on_sigterm() -> None:
    """Turn SIGTERM to `bench` into KeyboardInterrupt, so the same cleanup as Ctrl-C runs."""
    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, handler)


def wait_for(main: LocustProc, deadline_s: float, must_live: list[LocustProc] | None = None,
             done_marker: Path | None = None, poll_s: float = 0.2) -> int:
    """Wait until ``main`` exits. Fail early when a process in ``must_live`` exits before
    ``done_marker`` exists (the master writes it once its workers drained; they quit after it)."""
    end = time.monotonic() + deadline_s
    while True:
        rc = main.proc.poll()
        if rc is not None:
            return rc
        for p in must_live or []:
            prc = p.proc.poll()
            if prc is not None and main.proc.poll() is None and not (done_marker and done_marker.exists()):
                raise LocustRunError(f"locust {p.name} exited with code {prc} while the run was going on "
                                     f"(log: {p.log_path}):\n{p.log()}")
        if time.monotonic() > end:
            raise LocustRunError(f"locust {main.name} did not finish within {deadline_s:.0f} s (run time + waits "
                                 f"for workers and drain + margin); stopped every Locust process "
                                 f"(log: {main.log_path}):\n{main.log()}")
        time.sleep(poll_s)
