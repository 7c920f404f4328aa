"""Connect an action to its target: the stack's spec, the platform it runs on (the local stack or
a Kubernetes cluster), Prometheus and the audit log."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from contract.spec import Spec, Target
from contract.spec_loader import SpecError, load_stack, parse_spec, project_root, set_path
from runbooks.audit import AuditLog
from runbooks.cohorts import CohortControl, alertmanager_pager
from runbooks.context import ActionContext
from runbooks.diagnose.signals import Signals
from runbooks.model import Refused
from runbooks.platforms.kubernetes import KubernetesPlatform
from runbooks.platforms.local import LocalPlatform
from stack.launcher import LocalStack
from stack.presets import with_presets
from stack.secrets import alertmanager_auth, redis_password
from worker.errors import TransientError
from worker.objectstore import StoreConfigError, open_store
from worker.store import MARKDOWN, OutputStore


def default_audit_path(spec: Spec) -> Path:
    """Where a deployed stack's audit records go when --audit-log is not given."""
    state = Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state"))
    return state / "splitstack" / f"audit-{spec.stack}.jsonl"


def running_spec(local: LocalStack, overrides: dict[str, Any]) -> Spec | None:
    """The spec a running local stack was started with (`splitstack up --engine sim --workers
    2` differs from the file), with ``overrides`` applied; None when it is not running. Actions
    and diagnoses then describe, and are accepted by, the stack that actually runs."""
    state = local.read_state()
    if state is None or "spec" not in state or not local.supervisor.running():
        return None
    raw = json.loads(json.dumps(state["spec"]))
    for dotted, value in overrides.items():
        set_path(raw, dotted, value)
    try:
        return parse_spec(raw, f"{local.paths.state_file} (the running stack's spec)")
    except SpecError as exc:
        raise Refused(str(exc)) from exc


def build_context(stack: str, apply: bool = False, spec_overrides: dict[str, Any] | None = None,
                  prometheus_url: str | None = None, kube_context: str | None = None,
                  audit_log: Path | None = None) -> ActionContext:
    """The context an action runs with. Refused when the spec cannot be loaded or the platform
    cannot be reached (nothing has been changed then)."""
    root = project_root()
    try:
        # As `splitstack up --engine sim` does: an engine override brings its preset (context
        # length, vision) so the spec matches the running stack.
        spec = load_stack(stack, root, overrides=with_presets(spec_overrides or {}))
    except SpecError as exc:
        raise Refused(str(exc)) from exc
    platform: Any
    if spec.target is Target.local:
        local = LocalStack(spec, root)
        spec = running_spec(local, with_presets(spec_overrides or {})) or spec
        local = LocalStack(spec, root)
        platform = LocalPlatform(local)
        default_audit = local.paths.audit_log
        prometheus_url = prometheus_url or f"http://{spec.local.host}:{spec.observability.prometheus_port}"
        migration = local_cohort_control(local)
    else:
        platform = KubernetesPlatform.from_kubeconfig(spec, kube_context)
        default_audit = default_audit_path(spec)
        migration = None
    return ActionContext(spec=spec, platform=platform, audit=AuditLog(audit_log or default_audit, time.time),
                         apply=apply, prometheus=Signals(prometheus_url) if prometheus_url else None,
                         migration=migration)


# The local stack's monolithic cohort while migrating: its workers and their private engines.
MONOLITHIC_POOL_PREFIXES = ("mono-worker-", "engine-w")


def local_cohort_control(local: LocalStack) -> CohortControl | None:
    """The migration control of a running local stack (None when it is not running)."""
    spec = local.spec
    if local.read_state() is None:
        return None
    import redis

    client = redis.Redis(host=spec.local.host, port=spec.queue.port, password=redis_password(local.paths),
                         decode_responses=True, socket_connect_timeout=3)

    def decommission() -> list[str]:
        names = [n for n in local.supervisor.process_info() if n.startswith(MONOLITHIC_POOL_PREFIXES)]
        if not names:
            raise Refused(f"{local.paths.root} runs no monolithic pool ({', '.join(MONOLITHIC_POOL_PREFIXES)}*): "
                          "nothing to decommission")
        local.supervisor.stop_and_wait(names)
        return names

    am = f"http://{spec.local.host}:{spec.observability.alertmanager.port}"
    return CohortControl(client, spec.queue.stream, spec.queue.group, decommission,
                         alertmanager_pager(am, spec.stack, auth=alertmanager_auth(local.paths)),
                         read_markdown=markdown_reader(spec, local.paths.data / spec.output_store.path))


def markdown_reader(spec: Spec, output_dir: Path) -> Callable[[str], str | None] | None:
    """A committed output's Markdown by job id, None when there is none (the shadow sample's
    pairs); None when the stack's output store cannot be opened from here."""
    try:
        store: OutputStore = open_store(spec, output_dir)
    except StoreConfigError:
        return None

    def read(job_id: str) -> str | None:
        try:
            if not store.exists(job_id):
                return None
            return store.read_file(job_id, MARKDOWN).decode()
        except (OSError, TransientError, KeyError, ValueError):
            return None  # not committed (yet), or the store does not answer: the pair waits

    return read


def stack_prometheus_url(stack: str, spec_overrides: dict[str, Any] | None = None) -> str:
    """The Prometheus of a stack: a local stack's own (the port it runs with); a stack on
    Kubernetes has none reachable from here, so the message says how to reach it."""
    root = project_root()
    try:
        spec = load_stack(stack, root, overrides=with_presets(spec_overrides or {}))
    except SpecError as exc:
        raise Refused(str(exc)) from exc
    if spec.target is not Target.local:
        raise Refused(f"stack {stack!r} runs on Kubernetes: its Prometheus is not reachable from here by "
                      "itself; port-forward it (e.g. `kubectl -n monitoring port-forward "
                      "svc/prometheus-operated 9090`) and pass --prometheus-url http://127.0.0.1:9090")
    spec = running_spec(LocalStack(spec, root), with_presets(spec_overrides or {})) or spec
    return f"http://{spec.local.host}:{spec.observability.prometheus_port}"
