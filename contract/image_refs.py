"""Every image a stack's Kubernetes objects run, and the reference a cluster pulls each by.

Without ``images.registry`` an object names the spec's repository and tag. With it, the image
is pushed there (`splitstack images push`, stack/registry.py) and the object names it by digest,
``<registry>/<name>@sha256:...``: what runs is exactly what was pushed, whatever later happens to
the tag. The digests come from ``images/lock/<stack>.json`` (written by the push, merged into the
spec when it loads: :func:`merge_lock`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract.enums import DeploymentMode, Engine
from contract.sizing import REDIS_IMAGE, WAIT_IMAGE, migrating
from contract.spec import InferenceServer, Spec

LOCK_DIR = Path("images") / "lock"


@dataclass(frozen=True)
class StackImage:
    source: str  # repository:tag as the spec (or contract/sizing.py) names it
    who: str  # what runs it


def server_source(server: InferenceServer) -> str:
    if server.engine is Engine.vllm:
        return f"{server.image}:{server.image_tag}"
    return f"{server.sim_image}:{server.sim_image_tag}"


def worker_source(spec: Spec) -> str:
    w = spec.worker_pool
    if spec.deployment_mode is DeploymentMode.monolithic:
        return f"{w.in_process.image}:{w.in_process.image_tag}"
    return f"{w.image}:{w.image_tag}"


def stack_images(spec: Spec) -> list[StackImage]:
    """Every image the rendered objects run, once each."""
    found: dict[str, list[str]] = {}
    split = spec.deployment_mode is DeploymentMode.split
    for server in spec.inference_servers if split else []:
        found.setdefault(server_source(server), []).append(server.name)
    found.setdefault(worker_source(spec), []).append("worker_pool")
    if migrating(spec):  # the monolithic pool beside the split one (the router runs the worker image)
        w = spec.worker_pool
        found.setdefault(f"{w.in_process.image}:{w.in_process.image_tag}", []).append("migration (monolithic pool)")
    if split:
        found.setdefault(WAIT_IMAGE, []).append("worker_pool (wait-for-server)")
    if spec.queue.kind == "in-cluster":
        found.setdefault(REDIS_IMAGE, []).append("queue")
    return [StackImage(src, ", ".join(who)) for src, who in found.items()]


def split_ref(ref: str) -> tuple[str, str]:
    """repository, tag (a port's colon is not a tag's)."""
    repo, sep, tag = ref.rpartition(":")
    if not sep or "/" in tag:
        return ref, "latest"
    return repo, tag


def registry_ref(spec: Spec, source: str) -> str:
    """Where ``source`` lives in images.registry: <registry>/<last path part>:<tag>."""
    registry = spec.images.registry
    assert registry is not None
    repo, tag = split_ref(source)
    return f"{registry}/{repo.rsplit('/', 1)[-1]}:{tag}"


def missing_digests(spec: Spec) -> list[str]:
    if spec.images.registry is None:
        return []
    return [registry_ref(spec, i.source) for i in stack_images(spec)
            if registry_ref(spec, i.source) not in spec.images.digests]


def pull_ref(spec: Spec, source: str) -> str:
    """The reference an object names: the source by tag, or the pushed image by digest."""
    if spec.images.registry is None:
        return source
    target = registry_ref(spec, source)
    digest = spec.images.digests.get(target)
    if digest is None:
        raise ValueError(f"images.digests: no digest for {target}; push the stack's images with "
                         f"`splitstack images push --stack {spec.stack}` before `pulumi up`")
    return f"{split_ref(target)[0]}@{digest}"


def pull_secrets(spec: Spec) -> list[dict[str, str]]:
    return [{"name": spec.images.pull_secret}] if spec.images.pull_secret else []


def lock_path(root: Path, stack: str) -> Path:
    return root / LOCK_DIR / f"{stack}.json"


def read_lock(root: Path, stack: str) -> dict[str, str]:
    path = lock_path(root, stack)
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    return {str(k): str(v) for k, v in (data.get("digests") or {}).items()}


def write_lock(root: Path, stack: str, registry: str, digests: dict[str, str]) -> Path:
    path = lock_path(root, stack)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"registry": registry, "digests": dict(sorted(digests.items()))},
                               indent=2) + "\n")
    return path


def merge_lock(raw: dict[str, Any], root: Path, stack: str) -> dict[str, Any]:
    """The spec mapping with the lock file's digests under images.digests (the spec's own win)."""
    locked = read_lock(root, stack)
    images = raw.get("images")
    if not locked or not isinstance(images, dict) or not images.get("registry"):
        return raw
    out = dict(raw)
    out["images"] = {**images, "digests": {**locked, **(images.get("digests") or {})}}
    return out
