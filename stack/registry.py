"""Push every image a stack runs to its registry with podman, record the digests, and check the
registry has them (contract/image_refs.py says which images and how objects name them).

`push`: for each image, `podman tag` it as ``<images.registry>/<name>:<tag>`` and `podman push
--digestfile`; the digests go to ``images/lock/<stack>.json``, which the spec loads, so the
rendered objects name each image by digest. `check`: asks the registry (the OCI distribution
API, ``HEAD /v2/<name>/manifests/<reference>``) for every image by tag and by recorded digest,
so a stack whose registry lacks a tag, or holds another image under it, is refused before
`pulumi up` instead of ending in ImagePullBackOff.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from contract.image_refs import StackImage, registry_ref, split_ref, stack_images, write_lock
from contract.spec import Spec
from stack.podman import PodmanError, image_exists, podman

# Manifest media types a registry may answer with (Docker v2 and OCI, single and multi-arch).
MANIFEST_TYPES = ", ".join([
    "application/vnd.oci.image.manifest.v1+json", "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json"])
PUSH_TIMEOUT_S = 1800  # a CUDA image is ~10 GB


@dataclass(frozen=True)
class Pushed:
    image: StackImage
    target: str  # registry reference by tag
    digest: str


def push_images(spec: Spec, root: Path, *, tls_verify: bool = True,
                progress: Callable[[str], None] = lambda line: None) -> tuple[list[Pushed], Path]:
    """Push every image of ``spec`` to images.registry; write and return the lock file."""
    registry = spec.images.registry
    if registry is None:
        raise ValueError(f"images.registry is unset in stack {spec.stack!r}: name the registry the "
                         "cluster pulls from (e.g. registry.example.com/splitstack)")
    images = stack_images(spec)
    absent = [i.source for i in images if not image_exists(i.source)]
    if absent:
        raise ValueError(f"not in podman's image store: {', '.join(absent)}; build them with `make images` "
                         "(or `splitstack images build`), or `podman pull` the public ones (redis, busybox)")
    pushed: list[Pushed] = []
    with tempfile.TemporaryDirectory() as tmp:
        for image in images:
            target = registry_ref(spec, image.source)
            podman(["tag", image.source, target])
            digest_file = Path(tmp) / "digest"
            progress(f"pushing {image.source} -> {target}")
            podman(["push", f"--tls-verify={'true' if tls_verify else 'false'}", "--digestfile",
                    str(digest_file), target], timeout_s=PUSH_TIMEOUT_S)
            pushed.append(Pushed(image, target, digest_file.read_text().strip()))
    lock = write_lock(root, spec.stack, registry, {p.target: p.digest for p in pushed})
    return pushed, lock


def _manifest_url(target: str, reference: str, tls_verify: bool) -> str:
    host, _, path = target.partition("/")
    repo = split_ref(path)[0]
    return f"{'https' if tls_verify else 'http'}://{host}/v2/{repo}/manifests/{reference}"


def check_images(spec: Spec, *, tls_verify: bool = True, client: httpx.Client | None = None) -> list[str]:
    """Problems with the registry's copy of each image (empty: every tag is there and holds the
    recorded digest). Anonymous requests: a registry that wants credentials answers 401, which
    is reported as such."""
    if spec.images.registry is None:
        return []
    http = client or httpx.Client(timeout=30, verify=tls_verify)
    problems = []
    for image in stack_images(spec):
        target = registry_ref(spec, image.source)
        tag = split_ref(target)[1]
        url = _manifest_url(target, tag, tls_verify)
        try:
            response = http.head(url, headers={"Accept": MANIFEST_TYPES})
        except httpx.HTTPError as exc:
            problems.append(f"{target}: registry unreachable ({exc})")
            continue
        if response.status_code == 404:
            problems.append(f"{target}: the registry has no such tag (used by {image.who}); push it "
                            f"with `splitstack images push --stack {spec.stack}`")
        elif response.status_code == 401:
            problems.append(f"{target}: the registry wants credentials to read it; check with "
                            f"`podman pull {target}` after `podman login`")
        elif response.status_code >= 400:
            problems.append(f"{target}: the registry answered {response.status_code}")
        else:
            recorded = spec.images.digests.get(target)
            served = response.headers.get("Docker-Content-Digest")
            if recorded is None:
                problems.append(f"{target}: no digest recorded; run `splitstack images push --stack {spec.stack}`")
            elif served and served != recorded:
                problems.append(f"{target}: the tag now holds {served}, not the pushed {recorded}; push "
                                "again to deploy the new image, or restore the tag")
    return problems


__all__ = ["PodmanError", "Pushed", "check_images", "push_images"]
