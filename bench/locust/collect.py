"""Per-request records from every Locust process into one folder on the machine that ingests.

Locust aggregates request statistics (and so the TTFT/TPOT/ITL custom events) on the master by
itself, but the bench's per-request records exist only where the requests were sent. So:

* a headless single process writes its records straight to ``BENCH_RECORDS_DIR``;
* a worker buffers them and ships them to the master in ``bench_records`` messages (Locust's
  worker->master messaging, the same ZeroMQ socket as its stats) every ``flush_interval_s``;
* the master writes each worker's records to ``records-<worker>.jsonl`` in its records folder.

End of run (drain): Locust's own stop kills users mid-request, and a killed request was seen by
the server but never recorded. So when the test stops, users send nothing new, requests in flight
get ``drain_timeout_s`` to finish, and only then does Locust stop them. In distributed mode the
master asks every worker to drain (``bench_drain``) and waits for each one's ``bench_drained``
answer, which carries how many records it sent; because a worker's messages arrive in order, all
its records are on disk by then. ``collection.json`` lists, per worker, records sent vs received,
abandoned requests and whether it drained; ingestion turns it into a validity check.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import time
from pathlib import Path
from typing import Any, BinaryIO

import gevent
import gevent.lock
from locust.exception import RPCError
from locust.runners import STATE_MISSING, MasterRunner, WorkerRunner

from bench.locust.manifest import MANIFEST

log = logging.getLogger("bench.locust")
READY_MARK = "bench-locust-worker-ready"


def _safe(tag: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", tag)


class Collector:
    """The record side of one Locust process (local, worker or master)."""

    def __init__(self, environment, records_dir: Path | None, drain_timeout_s: float, flush_interval_s: float):
        self.env = environment
        self.runner = environment.runner
        self.tag = f"{socket.gethostname()}-{os.getpid()}"
        self.drain_timeout_s = drain_timeout_s
        self.flush_interval_s = flush_interval_s
        self.draining = False
        self.in_flight = 0
        self.sent = 0  # records this process produced
        self.abandoned = 0  # requests still in flight when the drain gave up
        self._buf: list[bytes] = []
        self._lock = gevent.lock.Semaphore()
        self._file: BinaryIO | None = None
        self.records_dir = records_dir
        # master: what each worker reported (client id -> dict), and who was there at the start
        self.workers: dict[str, dict[str, Any]] = {}
        self.connected_at_start: list[str] = []
        if isinstance(self.runner, MasterRunner):
            self.mode = "master"
            self.runner.register_message("bench_records", self._on_records)
            self.runner.register_message("bench_drained", self._on_drained)
            environment.events.test_start.add_listener(self._master_start)
            environment.events.test_stopping.add_listener(self._master_drain)
            environment.events.quitting.add_listener(lambda **_: self.write_manifest())
        elif isinstance(self.runner, WorkerRunner):
            self.mode = "worker"
            self.process = self.runner.worker_index
            # concurrent: the drain waits for users; the worker's message loop must keep running
            self.runner.register_message("bench_drain", self._on_drain, concurrent=True)
            environment.events.test_start.add_listener(self._reset)
            gevent.spawn(self._flusher)
        else:
            self.mode = "local"
            self.process = 0
            environment.events.test_stopping.add_listener(lambda **_: self._drain_users())
            environment.events.quitting.add_listener(lambda **_: self.write_manifest())
        if self.mode != "worker":
            assert records_dir is not None
            records_dir.mkdir(parents=True, exist_ok=True)

    def _folder(self) -> Path:
        """The records folder of a headless process or the master (a worker ships its records)."""
        if self.records_dir is None:
            raise RuntimeError(f"a Locust {self.mode} process has no records folder: only the master or a "
                               "headless process writes records (set BENCH_RECORDS_DIR)")
        return self.records_dir

    # ---- every process that runs users -------------------------------------------------
    def add(self, line: bytes) -> None:
        """One record (a JSON line) produced by a user of this process."""
        self.sent += 1
        if self.mode == "worker":
            self._buf.append(line)
            return
        if self._file is None:
            self._file = open(self._folder() / f"records-{_safe(self.tag)}.jsonl", "ab")
        self._file.write(line)
        self._file.flush()

    def _reset(self, **_kw) -> None:
        self.draining = False

    def _drain_users(self, timeout_s: float | None = None) -> int:
        """Stop new sends; wait (bounded) for requests in flight. Returns how many never finished."""
        self.draining = True
        timeout_s = self.drain_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s
        while self.in_flight > 0 and time.monotonic() < deadline:
            gevent.sleep(0.05)
        self.abandoned = self.in_flight
        if self.abandoned:
            log.warning("bench: %d requests still in flight after the %.0f s drain: they are not recorded",
                        self.abandoned, timeout_s)
        return self.abandoned

    # ---- worker --------------------------------------------------------------------------
    def _ship(self) -> None:
        with self._lock:  # keeps a flush and the drained answer in order on the socket
            n = len(self._buf)  # users may append while the send yields: remove only what was sent
            if n:
                lines = b"".join(self._buf[:n])
                self.runner.send_message("bench_records", {"tag": self.tag, "index": self.process, "lines": lines})
                del self._buf[:n]

    def _flusher(self) -> None:
        while True:
            gevent.sleep(self.flush_interval_s)
            try:
                self._ship()
            except RPCError as exc:  # Locust resets the connection itself; the records stay buffered
                log.error("bench: could not ship records to the master (will retry): %s", exc)

    def _on_drain(self, environment, msg, **_kw) -> None:
        abandoned = self._drain_users((msg.data or {}).get("timeout_s"))  # the master's setting wins
        self._ship()
        with self._lock:
            # a final stats report before the answer, so the master's TTFT/TPOT tables are complete
            data: dict[str, Any] = {}
            environment.events.report_to_master.fire(client_id=self.runner.client_id, data=data)
            self.runner.send_message("stats", data)
            self.runner.send_message("bench_drained", {"tag": self.tag, "index": self.process, "records": self.sent,
                                                       "abandoned": abandoned})

    # ---- master --------------------------------------------------------------------------
    def _entry(self, client_id: str, data: dict[str, Any]) -> dict[str, Any]:
        return self.workers.setdefault(client_id, {"client_id": client_id, "tag": data["tag"], "index": data["index"],
                                                   "records_received": 0, "records_sent": None, "abandoned": None,
                                                   "drained": False})

    def _on_records(self, environment, msg, **_kw) -> None:
        entry = self._entry(msg.node_id, msg.data)
        lines: bytes = msg.data["lines"]
        with open(self._folder() / f"records-{_safe(msg.data['tag'])}.jsonl", "ab") as fh:
            fh.write(lines)
        entry["records_received"] += lines.count(b"\n")

    def _on_drained(self, environment, msg, **_kw) -> None:
        entry = self._entry(msg.node_id, msg.data)
        entry.update(records_sent=msg.data["records"], abandoned=msg.data["abandoned"], drained=True)

    def _master_start(self, **_kw) -> None:
        self.connected_at_start = sorted(c.id for c in self.runner.clients.all)

    def _undrained(self) -> list[str]:
        # re-read every time: a worker that dies meanwhile goes "missing" after Locust's heartbeat
        # liveness (about 3 s) and is not waited for any longer
        return [c.id for c in self.runner.clients.all
                if c.state != STATE_MISSING and not self.workers.get(c.id, {}).get("drained")]

    def _master_drain(self, **_kw) -> None:
        self.runner.send_message("bench_drain", {"timeout_s": self.drain_timeout_s})
        deadline = time.monotonic() + self.drain_timeout_s + 10  # + shipping and a final stats report
        while time.monotonic() < deadline and self._undrained():
            gevent.sleep(0.05)
        missing = self._undrained()
        if missing:
            log.error("bench: workers %s did not finish draining: their last records may be missing", missing)
        self.write_manifest()

    def write_manifest(self) -> None:
        if self.mode == "local":
            workers = [{"client_id": "local", "tag": self.tag, "index": 0, "records_received": self.sent,
                        "records_sent": self.sent, "abandoned": self.abandoned, "drained": self.draining}]
            doc = {"mode": "local", "expected_workers": 1, "connected_at_start": ["local"], "workers": workers}
        else:
            doc = {"mode": "distributed", "expected_workers": self.runner.environment.parsed_options.expect_workers,
                   "connected_at_start": self.connected_at_start,
                   "workers": sorted(self.workers.values(), key=lambda w: w["index"])}
        (self._folder() / MANIFEST).write_text(json.dumps(doc, indent=2) + "\n")

