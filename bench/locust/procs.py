"""Start and always stop the Locust processes of one run (master, workers, or one headless process).

Each process gets its own session (so a terminal's Ctrl-C reaches only `bench`, which then stops
them in order: the master first, gracefully, so it can drain its workers) and its own log file.
Whatever happens (normal end, a worker dying, a timeout, Ctrl-C, SIGTERM), ``close()`` leaves no
process behind, within ``grace_s`` + about 10 s whatever the number of processes: SIGTERM, a grace
period, then SIGKILL to every process group and to any descendant that left it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from stack.procs import KILL_WAIT_S, free_port, group_runs

AFTER_FIRST_S = 3.0  # once the master is gone, its workers got its quit: this long to exit on their own

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
        """Stop every process of the fleet within ``grace_s`` + a few seconds, however many there are.

        The first process (the master, or the headless process) gets SIGTERM alone first: it drains
        its workers and tells them to quit. Whatever still runs when it is gone (or at the deadline)
        gets SIGTERM at once, then SIGKILL together, with every descendant that left its group. The
        stops used to run one after another, each with its own grace, so a loaded machine could take
        a minute to stop three processes. A second Ctrl-C (or SIGTERM) while this runs skips the
        grace and kills at once, instead of abandoning the stop with processes still running."""
        hurry = threading.Event()
        with _deferred_signals(hurry):
            tree = self._tree()  # before anything dies: an orphan's parent no longer lists it
            groups = [p.proc.pid for p in self.procs]
            if groups:
                _term(groups[:1])
                _wait_groups(groups[:1], self.grace_s, hurry)
                _term(groups[1:])
                _wait_groups(groups, min(self.grace_s, AFTER_FIRST_S), hurry)
            for pgid in groups:
                _kill_group(pgid)
            for ps in tree:  # descendants that left their group (setsid) got no signal so far
                if _alive(ps):
                    with contextlib.suppress(psutil.NoSuchProcess):
                        ps.kill()
            _wait_groups(groups, KILL_WAIT_S, None)
            end = time.monotonic() + KILL_WAIT_S
            while any(_alive(ps) for ps in tree) and time.monotonic() < end:
                time.sleep(0.05)
            for p in self.procs:  # reap the leaders (all dead by now: SIGKILL cannot be delayed)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.proc.wait(KILL_WAIT_S)

    def _tree(self) -> list[psutil.Process]:
        """Every live process of the fleet, descendants included (one that exits meanwhile is skipped)."""
        out: list[psutil.Process] = []
        for pid in self.pids():
            with contextlib.suppress(psutil.NoSuchProcess):
                out.append(psutil.Process(pid))
        return out

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
    """Turn SIGTERM (and SIGHUP: the terminal closed) to `bench` into KeyboardInterrupt, so the same
    cleanup as Ctrl-C runs; the Locust processes run in sessions of their own and get neither.

    Ctrl-C itself is made to raise KeyboardInterrupt too: a process started in the background by a
    shell without job control (a CI job's `make test &`, `nohup`) inherits SIGINT *ignored*, and
    Python then installs no handler, so SIGINT would be dropped and the fleet run on for its whole
    duration (what `test_ctrl_c_stops_master_and_workers` hit in a full `make test` started that
    way, and never alone from a terminal)."""
    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGHUP, handler)


@contextlib.contextmanager
def _deferred_signals(hurry: threading.Event) -> Iterator[None]:
    """While the fleet stops, Ctrl-C, SIGTERM and SIGHUP set ``hurry`` instead of raising."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread sets handlers
        yield
        return
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    before = {sig: signal.getsignal(sig) for sig in sigs}
    for sig in sigs:
        signal.signal(sig, lambda signum, frame: hurry.set())
    try:
        yield
    finally:
        for sig, h in before.items():
            signal.signal(sig, h)


def _term(groups: list[int]) -> None:
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGTERM)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if group_runs(pgid):
            os.killpg(pgid, signal.SIGKILL)


def _wait_groups(groups: list[int], wait_s: float, hurry: threading.Event | None) -> None:
    """Until no process of ``groups`` runs, ``wait_s`` passed or ``hurry`` is set."""
    end = time.monotonic() + wait_s
    while any(group_runs(g) for g in groups) and time.monotonic() < end:
        if hurry is not None and hurry.is_set():
            return
        time.sleep(0.05)


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
