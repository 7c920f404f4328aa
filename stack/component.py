"""What the local stack runs, as data: a :class:`Component` per process (argv, env, health
check, URL) and the context builders get. `stack.supervisor` runs components; `stack.components`
and `stack.workers` build them from the spec."""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from contract.spec import InferenceServer, Spec
from stack.paths import StackPaths


class SetupError(Exception):
    """Something the local stack needs is missing on this machine; the message says how to fix it."""


@dataclass(frozen=True)
class HealthCheck:
    kind: Literal["http", "redis"]
    url: str
    password_file: str | None = None  # redis: the AUTH password's file; http: basic auth (never the value)
    # https: the CA that signed the server's certificate (the local cluster's API server); "none"
    # for a loopback component that serves a self-signed certificate of its own (the cluster's
    # controller manager and scheduler), where only its liveness is asked.
    ca_file: str | None = None

    def to_state(self) -> dict[str, str]:
        return {"kind": self.kind, "url": self.url,
                **({"password_file": self.password_file} if self.password_file else {}),
                **({"ca_file": self.ca_file} if self.ca_file else {})}

    @classmethod
    def from_state(cls, data: dict) -> HealthCheck:
        return cls(data["kind"], data["url"], data.get("password_file"), data.get("ca_file"))


@dataclass(frozen=True)
class Component:
    name: str  # supervisord program name: letters, digits, '-' only
    role: Literal["queue", "prometheus", "alertmanager", "server", "engine", "worker", "cluster"]
    argv: list[str]
    health: HealthCheck
    url: str
    port: int
    env: dict[str, str] = field(default_factory=dict)
    # A crashed inference server stays down (as a pod would sit in CrashLoopBackOff) so that
    # failures are visible and the runbook actions can be drilled; everything else is restarted
    # whenever it exits, a clean exit included (a pod's restartPolicy: Always).
    autorestart: bool = True
    priority: int = 500
    cwd: Path | None = None
    # supervisord signals the program's whole process group (children too) when it stops it;
    # False: the program alone (`podman run`, which passes the signal to the container's PID 1).
    stop_as_group: bool = True
    # Started only once every other component is healthy (Prometheus: a stack coming up is not
    # an outage, and its first scrapes would otherwise count the starting targets as down).
    start_after_others: bool = False
    # env var -> file: read into the environment at start by stack.secretexec (never on the
    # command line, never in supervisord's config).
    secrets: dict[str, Path] = field(default_factory=dict)
    # SIGTERM to the program alone, as Kubernetes signals a container's PID 1, for a program
    # that shuts its own children down in order (the worker drains its document with its
    # page-render pool); the SIGKILL after stop_wait_s still goes to the whole group.
    term_leader_only: bool = False
    stop_wait_s: int = 20


@dataclass(frozen=True)
class BuildContext:
    spec: Spec
    paths: StackPaths
    project_root: Path
    api_key: str | None
    python: str = sys.executable
    # Rule files Prometheus loads; None: alerts/ and alerts/generated/ of the project. Tests point
    # it at rules rendered from an SLO spec with shorter `for` durations.
    rule_globs: list[str] | None = None


def require_binary(name: str, package: str, *aliases: str) -> str:
    """Path of ``name`` (or of an alias: Debian installs Alertmanager as prometheus-alertmanager)."""
    for candidate in (name, *aliases):
        path = shutil.which(candidate)
        if path is not None:
            return path
    raise SetupError(
        f"'{name}' is not installed: the local stack needs the Debian package '{package}'. "
        f"Install it with `apt-get install -y {package}` (or run `make setup`)."
    )


def server_url(spec: Spec, server: InferenceServer) -> str:
    return f"http://{spec.local.host}:{server.port}"
