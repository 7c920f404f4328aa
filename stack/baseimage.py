"""A Python 3.11 base image from the Debian archive, for machines that reach no container registry.

``debootstrap --variant=minbase bookworm`` with Debian's ``python3`` (3.11), ``python3-venv`` and
``ca-certificates``, trimmed (apt lists and caches, manuals, translations, docs but the copyright
files) and imported into podman. The tag carries a digest of the recipe, so the import happens
once per recipe and machine: podman's image store is the cache. Cold it costs about 50 s on two
busy cores (debootstrap unpacks and configures ~120 packages; a cache of the .deb files saves
only the download, a few seconds, and is not kept).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from stack.component import SetupError
from stack.podman import image_exists, podman


@dataclass(frozen=True)
class DebootstrapRecipe:
    suite: str = "bookworm"
    variant: str = "minbase"
    # The Python of the worker and simulator images: the same 3.11 as python:3.11-slim-bookworm.
    packages: tuple[str, ...] = ("python3", "python3-venv", "ca-certificates")
    mirror: str = "http://deb.debian.org/debian"
    repository: str = "localhost/splitstack/debian-python"

    @property
    def digest(self) -> str:
        text = "\n".join([self.suite, self.variant, *self.packages, self.mirror, _TRIM])
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    @property
    def ref(self) -> str:
        return f"{self.repository}:{self.suite}-{self.digest}"


# What is removed from the root file system before the import (shell, run inside the tree).
_TRIM = (
    "rm -rf var/cache/apt/archives/*.deb var/cache/apt/*.bin var/lib/apt/lists/* var/log/* "
    "usr/share/man/* usr/share/info/* usr/share/locale/* && "
    "find usr/share/doc -mindepth 1 ! -type d ! -name copyright -delete"
)
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class BaseImage:
    ref: str
    built: bool  # False: found in podman's store
    seconds: float


def ensure_debootstrap_base(recipe: DebootstrapRecipe | None = None, work_dir: Path | None = None) -> BaseImage:
    """The base image of ``recipe``: from podman's store, or bootstrapped and imported now."""
    recipe = recipe or DebootstrapRecipe()
    t0 = time.monotonic()
    if image_exists(recipe.ref):
        return BaseImage(recipe.ref, False, time.monotonic() - t0)
    debootstrap = shutil.which("debootstrap")
    if debootstrap is None:
        raise SetupError("'debootstrap' is not installed: a base image without a registry needs the Debian "
                         "package 'debootstrap' (`make apt` or `apt-get install -y debootstrap`); or pass "
                         "--base public where Docker Hub is reachable")
    if os.geteuid() != 0:
        raise SetupError("debootstrap needs root to build the base image: run `make images` as root (or with "
                         "sudo), or pass --base public where Docker Hub is reachable")
    with tempfile.TemporaryDirectory(prefix="splitstack-rootfs-", dir=work_dir) as tmp:
        rootfs = Path(tmp) / "rootfs"
        argv = [debootstrap, f"--variant={recipe.variant}", f"--include={','.join(recipe.packages)}",
                recipe.suite, str(rootfs), recipe.mirror]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=1200)
        if result.returncode != 0:
            log = (result.stdout + result.stderr).strip().splitlines()
            raise SetupError(f"`{' '.join(argv)}` failed (exit {result.returncode}); is {recipe.mirror} "
                             f"reachable?\n" + "\n".join(log[-10:]))
        subprocess.run(["sh", "-c", _TRIM], cwd=rootfs, check=True)
        tarball = Path(tmp) / "rootfs.tar"
        subprocess.run(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(tarball), "."], check=True)
        podman(["import", "--change", f"ENV PATH={_PATH}", "--change", 'CMD ["/bin/bash"]',
                "--message", f"debootstrap --variant={recipe.variant} {recipe.suite} + {' '.join(recipe.packages)}",
                str(tarball), recipe.ref], timeout_s=600)
    return BaseImage(recipe.ref, True, time.monotonic() - t0)
