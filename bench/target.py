"""Where the load goes: an inference server (and the stack around it) by URL or by stack name.

``--stack local`` reads the deployment spec and the running local stack's state file, so the
bench never repeats a port or a model name; ``--url`` points at any OpenAI-compatible server.
``--stack dev --queue-url ...`` (or ``--queue-url-env``) targets a deployed stack's worker queue
for the pipeline scenario: stream, group and model names come from the stack's spec, the Redis
URL from the user (a port-forward or the external queue's URL), never from a file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload
from urllib.parse import urlsplit, urlunsplit

from contract.spec_loader import SpecError, load_stack, parse_spec, project_root
from stack.identity import StackIdentityError, verify_running
from stack.launcher import LocalStack
from stack.secrets import queue_url, running_api_key


class TargetError(ValueError):
    pass


@overload
def mask_url(url: str) -> str: ...
@overload
def mask_url(url: None) -> None: ...
def mask_url(url: str | None) -> str | None:
    """The URL with any password replaced by ``***``: what logs, summaries and errors show."""
    if not url:
        return url
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


@dataclass(frozen=True)
class Target:
    base_url: str | None  # None: a deployed stack's pipeline run whose server the bench cannot reach
    model: str
    api_key: str | None = field(default=None, repr=False)
    max_model_len: int | None = None
    prometheus_url: str | None = None
    queue_url: str | None = field(default=None, repr=False)  # may hold a password: show mask_url()
    stack: str | None = None  # a LOCAL stack: probes may start processes the way it does
    components: dict[str, dict] = field(default_factory=dict)
    state_dir: Path | None = None
    output_dir: Path | None = None  # the workers' output store, when this host can read it
    spec: Any = None  # contract.spec.Spec (local: with the overrides it was started with)
    deployment: str | None = None  # a deployed stack reached through its queue (--queue-url)
    documents_at: str | None = None  # where the workers read the bench's PDFs (path or URL prefix)
    api_key_env: str | None = None  # the variable the key came from (or would): what an auth error names
    topology_override: str | None = None  # --topology: what the workers behind the queue run as

    @property
    def topology(self) -> str | None:
        """split or monolithic: --topology, else the spec's deployment_mode; None for a bare URL."""
        if self.topology_override:
            return self.topology_override
        return self.spec.deployment_mode.value if self.spec is not None else None

    def stack_spec(self):
        if self.spec is not None:
            return self.spec

        return load_stack(self.stack or "local")

    @property
    def queue_label(self) -> str | None:
        return mask_url(self.queue_url)

    @property
    def headers(self) -> dict[str, str]:
        h = {"Content-Type": "application/json"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h


@dataclass(frozen=True)
class QueueOptions:
    """CLI options that point a pipeline run at a queue the local stack launcher did not start."""

    queue_url: str | None = field(default=None, repr=False)
    queue_url_env: str | None = None
    stream: str | None = None
    group: str | None = None
    dead_letter_stream: str | None = None
    output_dir: Path | None = None
    prometheus_url: str | None = None
    documents_at: str | None = None

    @property
    def explicit_queue(self) -> bool:
        return bool(self.queue_url or self.queue_url_env)

    def spec_overrides(self) -> dict[str, str]:
        names = {"queue.stream": self.stream, "queue.group": self.group,
                 "queue.dead_letter_stream": self.dead_letter_stream}
        return {k: v for k, v in names.items() if v}


def resolve(stack: str | None, url: str | None, model: str | None, api_key_env: str | None,
            max_model_len: int | None = None, queue: QueueOptions | None = None,
            pipeline: bool = False, topology: str | None = None) -> Target:
    """The target the command-line options name: a server by URL, a local stack, or a deployed
    stack's queue (a pipeline run on a deployed stack, or on an explicit queue, takes its names from
    the stack's spec; ``url`` then only serves readiness probes and /metrics). ``topology`` (split
    or monolithic) labels what runs behind it when the spec cannot say (e.g. the monolithic twin
    behind a queue); summaries record it and ``bench compare`` says when two runs' differ."""
    if topology is not None:
        return _replace(resolve(stack, url, model, api_key_env, max_model_len, queue, pipeline),
                        topology_override=topology)
    queue = queue or QueueOptions()
    deployed = pipeline and (queue.explicit_queue or (stack not in (None, "local")))
    check_target_flags(stack, url, model, api_key_env, max_model_len, deployed)
    if url and not deployed:
        if not model:
            raise TargetError("--url needs --model (the served model name)")
        return from_url(url, model, api_key_env, max_model_len)
    return from_stack(stack or "local", queue=queue, url=url, model=model, api_key_env=api_key_env,
                      pipeline=pipeline)


def check_target_flags(stack: str | None, url: str | None, model: str | None, api_key_env: str | None,
                       max_model_len: int | None, deployed: bool = False) -> None:
    """Refuse target flags that contradict each other or would be ignored, naming both flags.

    ``--stack`` and ``--url`` name two different servers, except for a pipeline run on a deployed
    stack, where the URL only serves readiness probes and /metrics. ``--model``, ``--api-key-env``
    and ``--max-model-len`` describe a ``--url`` server: a stack's come from its spec."""
    if url is not None:
        check_url(url)
    if stack is not None and url is not None and not deployed:
        raise TargetError(f"--stack {stack} and --url {url} name two targets: give --stack for a stack's own "
                          "server or --url for any other server, not both")
    if url is None:
        for flag, value in (("--model", model), ("--api-key-env", api_key_env), ("--max-model-len", max_model_len)):
            if value is not None and not (deployed and flag == "--model"):
                raise TargetError(f"{flag} describes a server given with --url, and no --url was given: add "
                                  f"--url http://HOST:PORT, or leave {flag} out (a stack's comes from its spec)")


def check_url(url: str) -> str:
    """An http(s) URL with a host, or a TargetError naming ``--url`` and the form it takes."""
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # e.g. "Invalid IPv6 URL" for http://[::1
        raise TargetError(f"--url {url!r}: not a URL ({exc}); give it like http://HOST:PORT") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise TargetError(f"--url {url!r}: not an http(s) URL of a server; give it like http://HOST:PORT "
                          "(the server's base, without /v1)")
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        raise TargetError(f"--url {url!r}: the port is not a number; give it like http://HOST:8000") from None
    return url


def from_url(url: str, model: str, api_key_env: str | None = None,
             max_model_len: int | None = None) -> Target:
    key = os.environ.get(api_key_env) if api_key_env else None
    if api_key_env and not key:
        raise TargetError(f"--api-key-env {api_key_env}: that environment variable is not set")
    return Target(base_url=url.rstrip("/"), model=model, api_key=key, max_model_len=max_model_len,
                  api_key_env=api_key_env)


def from_stack(stack: str, root: Path | None = None, queue: QueueOptions | None = None,
               url: str | None = None, model: str | None = None, api_key_env: str | None = None,
               pipeline: bool = True) -> Target:

    root = root or project_root()
    queue = queue or QueueOptions()
    try:
        spec = load_stack(stack, root, overrides=queue.spec_overrides() or None)
    except SpecError as exc:
        raise TargetError(str(exc)) from None
    if spec.target.value != "local" and not pipeline:
        raise TargetError(
            f"stack {stack!r} is a {spec.target.value} stack: pass its server with --url (the "
            "bench reaches deployed stacks through their service URL or a port-forward)")
    if spec.target.value != "local" or queue.explicit_queue:
        return from_deployed(spec, queue, url=url, model=model, api_key_env=api_key_env)
    if queue.spec_overrides() or queue.output_dir or queue.documents_at:
        raise TargetError("--stream/--group/--dead-letter-stream/--outputs-at/--documents-at describe a "
                          f"queue the bench is pointed at: add --queue-url (stack {stack!r} is local and "
                          "its running queue comes from its state file)")
    local = LocalStack(spec, root)
    state = local.read_state()
    if state and "spec" in state:
        # The stack as it was started (`--engine sim` and other overrides), not the bare file.

        local = LocalStack(parse_spec(state["spec"], str(local.paths.state_file)), root)
    target = from_local(local)
    if queue.prometheus_url:
        target = _replace(target, prometheus_url=queue.prometheus_url.rstrip("/"))
    return target


def _replace(target: Target, **changes: Any) -> Target:
    from dataclasses import replace

    return replace(target, **changes)


def queue_url_for(spec, queue: QueueOptions, environ: Mapping[str, str] | None = None) -> str:
    """The deployed stack's Redis URL: --queue-url, else the variable --queue-url-env names,
    else the spec's queue.url_env. Errors say how to get one."""
    env = os.environ if environ is None else environ
    if queue.queue_url and queue.queue_url_env:
        raise TargetError("give one of --queue-url and --queue-url-env, not both")
    if queue.queue_url:
        url = queue.queue_url
        source = "--queue-url"
    else:
        var = queue.queue_url_env or spec.queue.url_env
        url = env.get(var, "")
        source = f"${var}"
        if not url:
            how = (f"`kubectl -n {spec.namespace} port-forward svc/redis {spec.queue.port}` and "
                   f"export {var}=redis://127.0.0.1:{spec.queue.port}/0"
                   if spec.queue.kind == "in-cluster" else
                   f"export {var} with the external queue's URL (the one in Secret splitstack-redis)")
            given = f"--queue-url-env {var}" if queue.queue_url_env else f"the spec's queue.url_env {var}"
            raise TargetError(f"stack {spec.stack!r}: {given} is not set, so the bench has no queue to "
                              f"submit to; {how} (or pass --queue-url redis://...)")
    scheme = urlsplit(url).scheme
    if scheme not in ("redis", "rediss", "unix"):
        raise TargetError(f"{source} {mask_url(url)!r} is not a Redis URL (redis://[:PASSWORD@]HOST:PORT/DB, "
                          "rediss:// for TLS)")
    return url


def from_deployed(spec, queue: QueueOptions, url: str | None = None, model: str | None = None,
                  api_key_env: str | None = None, environ: dict[str, str] | None = None) -> Target:
    """A stack the launcher did not start here: its queue by URL, names from its spec. The server
    URL is optional (the workers call the server, not the bench); given, it serves readiness
    probes and the /metrics diff."""
    env = os.environ if environ is None else environ
    server = spec.worker_server
    key = None
    key_env = api_key_env or (server.api_key.env if server.api_key else None)
    if url and key_env:
        key = env.get(key_env) or None
        if api_key_env and not key:
            raise TargetError(f"--api-key-env {api_key_env}: that environment variable is not set")
    at = queue.documents_at
    if at and not (at.startswith("/") or at.startswith(("http://", "https://"))):
        raise TargetError(f"--documents-at {at!r}: give an absolute path every worker mounts or an http(s) URL "
                          "prefix on the workers' SPLITSTACK_WORKER_URL_ALLOWLIST")
    out = queue.output_dir
    if out is not None and not Path(out).is_dir():
        raise TargetError(f"--outputs-at {out}: no such directory on this host; mount the workers' output "
                          "store there, or leave --outputs-at out to measure from the job records in Redis")
    return Target(base_url=url.rstrip("/") if url else None, model=model or server.model.name, api_key=key,
                  max_model_len=server.max_model_len,
                  prometheus_url=queue.prometheus_url.rstrip("/") if queue.prometheus_url else None,
                  queue_url=queue_url_for(spec, queue, env), stack=None,
                  output_dir=Path(out).resolve() if out else None, spec=spec, deployment=spec.stack,
                  documents_at=queue.documents_at.rstrip("/") if queue.documents_at else None,
                  api_key_env=key_env)


def from_local(local) -> Target:  # local: stack.launcher.LocalStack
    """A running local stack: URLs from its state file, the API key the stack generated. The stack
    must run as its state file says (stack/identity.py): a state file left by `splitstack down` or
    a crash, or a port held by another stack, is refused before anything is sent."""

    spec = local.spec
    server = spec.worker_server
    try:
        state = verify_running(local)
    except StackIdentityError as exc:
        raise TargetError(str(exc)) from None
    comps = state.get("components", {})
    srv = comps.get(f"server-{server.name}")
    if srv is None and state.get("deployment_mode") == "monolithic":
        # Monolithic (after `runbook rollback --to monolithic`): no shared server; the workers
        # call their own engines, and a pipeline run goes through the queue alone.
        return Target(base_url=None, model=server.model.name, api_key=None,
                      max_model_len=server.max_model_len,
                      prometheus_url=comps.get("prometheus", {}).get("url"),
                      queue_url=queue_url(spec, local.paths) if "queue" in comps else None,
                      stack=spec.stack, components=comps, state_dir=local.paths.root,
                      output_dir=local.paths.data / spec.output_store.path, spec=spec)
    if srv is None:
        raise TargetError(f"stack {spec.stack!r} state has no component server-{server.name}; "
                          f"components: {sorted(comps)}")
    return Target(base_url=srv["url"].rstrip("/"), model=server.model.name,
                  api_key=running_api_key(spec, local.paths), max_model_len=server.max_model_len,
                  prometheus_url=comps.get("prometheus", {}).get("url"),
                  queue_url=queue_url(spec, local.paths) if "queue" in comps else None,
                  stack=spec.stack, components=comps,
                  state_dir=local.paths.root, output_dir=local.paths.data / spec.output_store.path,
                  spec=spec, api_key_env=server.api_key.env if server.api_key else None)
