"""The one interface runbook actions use to see and change a deployment.

Two implementations: :mod:`runbooks.platforms.kubernetes` (official client) and
:mod:`runbooks.platforms.local` (the local stack's supervisord processes). Components are named
the local stack's way (``server-<name>``, ``workers``, ``worker-<i>``); each platform maps them
to its own objects (a Deployment ``<name>``, the ``worker`` Deployment).

Settings are the spec's own field names (``max_num_batched_tokens``, ``concurrency_per_worker``,
``image_tag``...): an action says *what* to change in spec terms, the platform knows *where*
that lives (a container arg, an env var, a supervisord program line).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from contract.spec import DeploymentMode, Spec

WORKERS = "workers"  # the worker pool as a whole (a Deployment; all worker-<i> processes)
QUEUE = "queue"  # Redis, where the platform runs it as a component (the local stack)


def server_component(name: str) -> str:
    return f"server-{name}"


@dataclass
class ComponentState:
    """What the platform says about one component (a process, or a Deployment's pods)."""

    name: str
    state: str  # running, crashloop, exited, stopped, starting, pending, missing
    healthy: bool
    detail: str = ""  # health probe result, readiness
    exit_reason: str | None = None  # OOMKilled, Error, "exit status 70", "signal 9 (SIGKILL)"
    exit_code: int | None = None
    restarts: int = 0
    pids_or_pods: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    version: str = ""  # image tag (k8s) or program settings digest (local)
    # Definitively failed, waiting longer will not help: supervisord FATAL (start retries
    # used up) or a Deployment past its progress deadline (ProgressDeadlineExceeded).
    failed: bool = False

    def line(self) -> str:
        why = f", last exit: {self.exit_reason}" if self.exit_reason else ""
        restarts = f", restarts {self.restarts}" if self.restarts else ""
        return (f"{self.name}: {self.state}, {'healthy' if self.healthy else 'NOT healthy'}"
                f" ({self.detail}){why}{restarts}")


@dataclass
class NodeState:
    name: str
    ready: bool
    schedulable: bool
    gpu_allocatable: int
    conditions: dict[str, str] = field(default_factory=dict)


@dataclass
class HttpResult:
    status: int
    text: str


class Platform(Protocol):
    """Operations of the runbooks; every method raises PlatformError when it cannot answer."""

    kind: str  # "local" or "kubernetes"
    spec: Spec

    def target(self) -> str:
        """A short name of what this platform acts on, for plans and the audit log."""

    def verify_target(self) -> list[str]:
        """Problems that make the live target differ from the spec's (empty: it matches)."""

    def state(self, component: str) -> ComponentState: ...

    def logs(self, component: str, tail_lines: int = 200) -> str: ...

    def units(self, component: str) -> list[str]:
        """What a rolling change goes through one at a time (local: worker-0, worker-1...;
        k8s: the Deployment, which rolls its pods itself)."""

    def restart(self, component: str) -> None:
        """Restart in place (k8s: rollout restart; local: stop + start the process(es))."""

    def http(self, component: str, method: str, path: str, json_body: Any = None,
             timeout_s: float = 30.0) -> HttpResult:
        """An HTTP request to a component's service (k8s: through the API server proxy)."""

    def settings(self, component: str) -> dict[str, Any]:
        """Current values of the spec fields this component runs with."""

    def apply_settings(self, component: str, changes: dict[str, Any]) -> None:
        """Change spec fields of a running component; it restarts with them."""

    def scale(self, component: str, replicas: int) -> None: ...

    def set_deployment_mode(self, mode: DeploymentMode) -> list[str]:
        """Switch between split and monolithic (the rollback): the engines, the workers
        rolled one at a time with drain, the engines no longer used stopped; what was done."""

    def nodes(self) -> list[NodeState]: ...

    def cordon(self, node: str, on: bool = True) -> None: ...

    def evict_component_pods(self, component: str, node: str, force: bool = False) -> list[str]:
        """Evict the component's pods on a node so they reschedule (force: delete with grace 0,
        for a node that no longer answers); returns their names."""

    def secret_value(self, name: str, key: str) -> str | None: ...

    def set_secret_value(self, name: str, key: str, value: str) -> None: ...
