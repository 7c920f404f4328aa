"""What an action runs with: the spec (the only allowed target), the platform, the audit log,
the safety settings and injected clock/sleep/Prometheus/NVML (tests build fresh ones)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from contract.spec import InferenceServer, Spec
from runbooks.audit import AuditLog, default_actor
from runbooks.model import Refused
from runbooks.platforms.base import Platform, server_component
from runbooks.settings import SafetySettings


@dataclass
class ActionContext:
    spec: Spec
    platform: Platform
    audit: AuditLog
    apply: bool = False
    actor: str = field(default_factory=default_actor)
    safety: SafetySettings = field(default_factory=SafetySettings)
    prometheus: Any = None  # runbooks.diagnose.signals.Signals, or None when not reachable
    migration: Any = None  # runbooks.cohorts.CohortControl, or None when the queue is not reachable
    nvml: Any = None  # a pynvml-like module for the GPU probe; None = the real one if present
    use_real_nvml: bool = True
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep

    def server(self, name: str | None) -> InferenceServer:
        """The named server of the spec (default: the workers' server); refuses any other."""
        if name is None:
            return self.spec.worker_server
        try:
            return self.spec.server(name)
        except KeyError:
            raise Refused(
                f"server {name!r} is not in the spec of stack {self.spec.stack!r} (servers: "
                f"{', '.join(self.spec.server_names)}): runbooks act only on the spec's targets"
            ) from None

    def server_component(self, name: str | None) -> str:
        return server_component(self.server(name).name)

    def check_restart_budget(self, component: str) -> None:
        s = self.safety
        since = self.clock() - s.restart_window_s
        recent = self.audit.restarts_since(self.platform.target(), component, since)
        if len(recent) >= s.restart_limit_count:
            raise Refused(
                f"{component} was restarted {len(recent)} times in the last "
                f"{s.restart_window_s / 60:g} min (limit {s.restart_limit_count}, see "
                f"{self.audit.path}): restarting again would hide the cause; run `runbook "
                "diagnose` and fix what it names (or wait for the window to pass)"
            )
