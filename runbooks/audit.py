"""Append-only JSONL audit log of runbook actions: who, when, action, params, plan, result.

One JSON object per line, written with O_APPEND and fsync'd, so concurrent runs never
interleave half lines and a record survives a crash right after the action. Records are never
rewritten; the restart rate limit reads them back (`restarts_since`).
"""

from __future__ import annotations

import getpass
import json
import os
import socket
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def default_actor() -> str:
    return f"{getpass.getuser()}@{socket.gethostname()}"


class AuditLog:
    def __init__(self, path: Path, clock: Callable[[], float]) -> None:
        self.path = path
        self.clock = clock

    def append(self, record: dict[str, Any]) -> dict[str, Any]:
        now = self.clock()
        full = {"ts": now, "time": datetime.fromtimestamp(now, UTC).isoformat(), **record}
        line = json.dumps(full, default=str, sort_keys=True) + "\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                line = "\n" + line  # end a torn last line so this record stays parseable
            os.write(fd, line.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        return full

    def records(self) -> Iterator[dict[str, Any]]:
        try:
            with self.path.open(encoding="utf-8") as fh:
                for line in fh:
                    line = line.strip()
                    if line:
                        try:
                            yield json.loads(line)
                        except ValueError:
                            continue  # a torn line from a full disk must not block the runbooks
        except FileNotFoundError:
            return

    def restarts_since(self, target: str, component: str, since_ts: float) -> list[dict[str, Any]]:
        """Applied records that restarted `component` on `target` after `since_ts`."""
        return [r for r in self.records()
                if r.get("ts", 0) >= since_ts and r.get("apply") and r.get("target") == target
                and component in r.get("restarted", [])]
