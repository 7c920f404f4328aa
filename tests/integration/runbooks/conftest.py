"""Chaos-drill helpers: an action context on a real local stack, and a chat load generator."""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from runbooks.audit import AuditLog
from runbooks.context import ActionContext
from runbooks.diagnose.signals import Signals
from runbooks.platforms.local import LocalPlatform
from runbooks.settings import SafetySettings
from stack.launcher import LocalStack
from stack.preflight import resolve_api_key

# The test-PDF generator (as tests/integration/worker does).
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fixtures" / "pdfs"))


def drill_context(stack: LocalStack, apply: bool = False) -> ActionContext:
    platform = LocalPlatform(stack, rolling_timeout_s=90)  # a worker loads MinerU: slow on a busy CI box
    prom = f"http://{stack.spec.local.host}:{stack.spec.observability.prometheus_port}"
    return ActionContext(spec=stack.spec, platform=platform,
                         audit=AuditLog(stack.paths.audit_log, time.time), apply=apply,
                         actor="drill@test", prometheus=Signals(prom, timeout_s=5),
                         safety=SafetySettings(ready_timeout_s=90, breaker_close_timeout_s=30),
                         use_real_nvml=False)


def wait_for(what: str, check, timeout_s: float = 20.0, interval_s: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what} (last: {last!r})")


class ChatLoad:
    """`clients` threads sending chat completions in a loop; counts answers by status."""

    def __init__(self, stack: LocalStack, clients: int, max_tokens: int = 16) -> None:
        server = stack.spec.worker_server
        self.url = f"http://{stack.spec.local.host}:{server.port}/v1/chat/completions"
        key = resolve_api_key(stack.spec, stack.paths)
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.body = {"model": server.model.name, "max_tokens": max_tokens,
                     "messages": [{"role": "user", "content": "Summarise the page."}]}
        self.clients = clients
        self.stop = threading.Event()
        self.counts: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(clients)]

    def _run(self) -> None:
        with httpx.Client(timeout=30) as client:
            while not self.stop.is_set():
                try:
                    status = str(client.post(self.url, json=self.body, headers=self.headers).status_code)
                except httpx.HTTPError as exc:
                    status = type(exc).__name__
                    time.sleep(0.1)  # a down server: do not spin
                with self.lock:
                    self.counts[status] += 1

    def snapshot(self) -> Counter[str]:
        with self.lock:
            return Counter(self.counts)

    def __enter__(self) -> ChatLoad:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=35)


def alerts(stack: LocalStack) -> dict[str, str]:
    """Alert name -> state (pending/firing) from the stack's Prometheus."""
    url = f"http://{stack.spec.local.host}:{stack.spec.observability.prometheus_port}/api/v1/alerts"
    data = httpx.get(url, timeout=5).json()["data"]["alerts"]
    return {a["labels"]["alertname"]: a["state"] for a in data}


@pytest.fixture
def drill() -> Any:
    """The helpers above, as one object (test modules cannot import a conftest)."""

    class Drill:
        context = staticmethod(drill_context)
        wait_for = staticmethod(wait_for)
        alerts = staticmethod(alerts)
        load = ChatLoad

    return Drill
