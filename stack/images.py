"""Build splitstack's container images (images/<name>/Containerfile) with podman, tagged as the spec names them.

* ``worker``: the MinerU worker (project wheel with the ``worker`` extra), ``worker_pool.image``.
* ``simulator``: the vLLM twin (``sim`` extra), ``inference_servers[].sim_image``.
* ``inference-server``: vllm/vllm-openai at the spec's ``image_tag`` plus mineru-vl-utils,
  ``inference_servers[].image``.

The base of the first two is a build argument: the Containerfiles' default public Python image,
a Debian base made with debootstrap where no registry is reachable (stack/baseimage.py), or any
image reference. Builds run with ``--network none``: every wheel comes in the build context
(stack/wheelhouse.py says why). What is slow is cached: the debootstrap base in podman's store,
the dependency wheels in ``.cache/images``, and podman's layer cache (the dependency layer comes
before the project's, and the project's wheel is byte-reproducible).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from contract.spec import STOCK_VLLM_IMAGE, Spec
from stack.baseimage import ensure_debootstrap_base
from stack.component import SetupError
from stack.podman import LABEL_SOURCE, build, image_exists, image_size_bytes, podman
from stack.wheelhouse import dependency_wheels, installed_constraints, project_wheel, source_digest

PUBLIC_PYTHON_BASE = "docker.io/library/python:3.11-slim-bookworm"  # the Containerfiles' default
OFFICIAL_VLLM_IMAGE = "docker.io/vllm/vllm-openai"


class ImageName(str, Enum):
    worker = "worker"
    simulator = "simulator"
    inference_server = "inference-server"
    worker_gpu = "worker-gpu"  # built on inference-server, so after it


class BaseKind(str, Enum):
    public = "public"  # python:3.11-slim-bookworm from Docker Hub
    debootstrap = "debootstrap"  # Debian bookworm from the Debian archive, no registry


@dataclass(frozen=True)
class Recipe:
    name: str  # the folder of its Containerfile under images/
    ref: str  # repository:tag, from the spec
    extra: str | None  # the project's extra it installs; None: not the project at all
    requirements: tuple[str, ...] = ()  # distributions it installs besides the project
    # Distributions swapped for others that provide the same modules (see images/worker/Containerfile).
    substitutes: dict[str, str] = field(default_factory=dict)
    exclude: tuple[str, ...] = ()  # distributions of the closure it does not install

    def containerfile(self, root: Path) -> Path:
        return root / "images" / self.name / "Containerfile"


@dataclass(frozen=True)
class Built:
    name: str
    ref: str
    base: str
    seconds: float
    size_bytes: int
    wheels_built: bool  # False: the dependency wheels came from the cache


@dataclass(frozen=True)
class Skipped:
    name: str
    ref: str
    reason: str


@dataclass
class BuildReport:
    base_ref: str | None = None
    base_seconds: float = 0.0
    base_built: bool = False
    images: list[Built | Skipped] = field(default_factory=list)


def recipes(spec: Spec) -> dict[ImageName, Recipe]:
    server = spec.worker_server
    return {
        ImageName.worker: Recipe("worker", f"{spec.worker_pool.image}:{spec.worker_pool.image_tag}",
                                 "worker", substitutes={"opencv-python": "opencv-python-headless"}),
        ImageName.simulator: Recipe("simulator", f"{server.sim_image}:{server.sim_image_tag}", "sim"),
        ImageName.inference_server: Recipe("inference-server", f"{server.image}:{server.image_tag}",
                                           None, requirements=("mineru-vl-utils",)),
        # The monolithic worker: the worker extra on the inference-server image (its vLLM and torch).
        ImageName.worker_gpu: Recipe("worker-gpu", f"{spec.worker_pool.in_process.image}:"
                                     f"{spec.worker_pool.in_process.image_tag}", "worker"),
    }


def official_vllm_base(spec: Spec) -> str:
    return f"{OFFICIAL_VLLM_IMAGE}:{spec.worker_server.image_tag}"


def build_images(
    spec: Spec, root: Path, *, base: str = BaseKind.public.value, only: Sequence[ImageName] = (),
    vllm_base: str | None = None, progress: Callable[[str], None] = lambda line: None,
) -> BuildReport:
    """Build ``only`` (default: all four); returns what was built and what was skipped, and why.

    ``base``: 'public', 'debootstrap' or an image reference, for the worker and the simulator.
    ``vllm_base``: the base of the inference-server image (default: the official image at the
    spec's tag). With base 'debootstrap' and no ``vllm_base``, the inference-server image is
    skipped: its base comes from a registry, and 'debootstrap' says none is reachable.
    """
    cache = root / ".cache" / "images"
    cache.mkdir(parents=True, exist_ok=True)
    # One build at a time per cache: two would share the build contexts and the tags.
    with (cache / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _build_images(spec, root, cache, base, list(only) or list(ImageName), vllm_base, progress)


def _build_images(spec: Spec, root: Path, cache: Path, base: str, wanted: list[ImageName], vllm_base: str | None,
                  progress: Callable[[str], None]) -> BuildReport:
    plan = recipes(spec)
    report = BuildReport()
    # worker-gpu needs the project wheel only if its base (inference-server) exists or is built now.
    gpu_base_coming = (ImageName.inference_server in wanted
                       or image_exists(plan[ImageName.inference_server].ref))
    python_images = [n for n in wanted if plan[n].extra is not None
                     and (n is not ImageName.worker_gpu or gpu_base_coming)]
    python_base = _python_base(base, report, progress) if python_images else None
    project: Path | None = None
    if python_images:
        t0 = time.monotonic()
        project = project_wheel(root, cache / "project")
        progress(f"project wheel {project.name} in {time.monotonic() - t0:.1f} s")
    digest = source_digest(root)
    for name in wanted:
        recipe = plan[name]
        if recipe.extra is None:
            if recipe.ref.removeprefix("docker.io/").split(":")[0] == STOCK_VLLM_IMAGE:
                report.images.append(Skipped(recipe.name, recipe.ref, (
                    "the spec runs the official vLLM image itself (inference_servers[].image), which is "
                    "not built here; set image to splitstack's inference-server image to build it")))
                continue
            if vllm_base is None and base == BaseKind.debootstrap.value:
                report.images.append(Skipped(recipe.name, recipe.ref, (
                    f"its base {official_vllm_base(spec)} comes from a registry and --base debootstrap "
                    "says none is reachable; build it where Docker Hub is reachable, or pass --vllm-base "
                    "IMAGE (a mirror of vllm/vllm-openai)")))
                continue
            image_base = vllm_base or official_vllm_base(spec)
        elif name is ImageName.worker_gpu:
            image_base = plan[ImageName.inference_server].ref
            if not image_exists(image_base):
                report.images.append(Skipped(recipe.name, recipe.ref, (
                    f"its base is the inference-server image {image_base}, which is not in podman's "
                    "store: that image is built on vllm/vllm-openai (a ~10 GB CUDA image from a "
                    "registry), so build inference-server first, where that image can be pulled")))
                continue
        else:
            image_base = python_base or PUBLIC_PYTHON_BASE
        report.images.append(build_one(recipe, root, image_base, project, digest, progress))
    return report


def build_one(recipe: Recipe, root: Path, base: str, project: Path | None, digest: str,
              progress: Callable[[str], None] = lambda line: None) -> Built:
    """Assemble the build context (wheels for the base's Python) and build one image on ``base``."""
    cache = root / ".cache" / "images"
    t0 = time.monotonic()
    python = base_python(base)
    constraints, dropped = installed_constraints(python)
    requirements = list(recipe.requirements)
    if recipe.extra is not None:
        if project is None:
            raise SetupError(f"{recipe.name}: the project's wheel is needed and was not built")
        requirements.insert(0, f"{project}[{recipe.extra}]")
    wheels = dependency_wheels(requirements, cache / "wheels" / recipe.name, python_version=python,
                               constraints=constraints, substitutes=recipe.substitutes,
                               exclude=["splitstack", *recipe.exclude],
                               key_material=(root / "pyproject.toml").read_text())
    pins = wheels.pins()
    progress(f"{recipe.name}: {len(pins)} dependency wheels for Python {python} "
             f"{'collected' if wheels.built else 'from the cache'}")
    for name in sorted(set(dropped) & set(pins)):
        progress(f"{recipe.name}: {name} {pins[name]} instead of the installed {dropped[name]}, "
                 f"which Python {python} cannot run")
    context = cache / "context" / recipe.name
    if context.exists():
        shutil.rmtree(context)
    _link_tree(wheels.folder, context / "wheels" / "deps")
    if project is not None:
        _link_tree(project.parent, context / "wheels" / "project")
    labels = {"org.opencontainers.image.title": f"splitstack-{recipe.name}",
              "org.opencontainers.image.base.name": base}
    if recipe.extra is not None:
        labels[LABEL_SOURCE] = digest
    progress(f"{recipe.name}: podman build {recipe.ref} on {base}")
    args = {"BASE": base, "DEPS_DIGEST": wheels.folder.name, "SOURCE_DIGEST": digest}
    build(context, recipe.containerfile(root), recipe.ref, args, labels,
          log=cache / "logs" / f"{recipe.name}.log")
    return Built(recipe.name, recipe.ref, base, time.monotonic() - t0, image_size_bytes(recipe.ref),
                 wheels.built)


def base_python(image: str) -> str:
    """The version of ``python3`` in ``image`` (pulled when missing), e.g. '3.11.2': its wheels
    must install there, Requires-Python included."""
    if not image_exists(image):
        podman(["pull", image], timeout_s=1800)
    out = podman(["run", "--rm", "--network", "none", "--entrypoint", "python3", image, "-c",
                  "import platform; print(platform.python_version())"], timeout_s=120).stdout
    return out.strip().splitlines()[-1]


def _python_base(base: str, report: BuildReport, progress: Callable[[str], None]) -> str | None:
    if base == BaseKind.public.value:
        return None
    if base != BaseKind.debootstrap.value:
        return base
    made = ensure_debootstrap_base()
    report.base_ref, report.base_seconds, report.base_built = made.ref, made.seconds, made.built
    progress(f"base {made.ref}: {'debootstrapped and imported' if made.built else 'in podman store'} "
             f"in {made.seconds:.1f} s")
    return made.ref


def _link_tree(src: Path, dst: Path) -> None:
    """Hard links where the file system allows them (the wheels are large), copies otherwise."""
    dst.mkdir(parents=True)
    for item in src.iterdir():
        if item.is_file():
            try:
                os.link(item, dst / item.name)
            except OSError:
                shutil.copy2(item, dst / item.name)
