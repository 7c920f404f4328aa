"""Where the Go-built tools are: tools/build-go-tools.sh builds the versions pinned in
tools/go-tools.env into a cache keyed by a digest of both files; this module computes the same
digest, so Python finds exactly the binaries of the checkout's pins (never a stale build)."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from stack.component import SetupError

BINARIES = ("pulumi", "pulumi-resource-kubernetes", "etcd", "kube-apiserver",
            "kube-controller-manager", "kube-scheduler", "kubectl", "kwok")
VERSIONS_FILE = Path("tools/go-tools.env")
BUILD_SCRIPT = Path("tools/build-go-tools.sh")
CACHE_ENV = "SPLITSTACK_TOOLS_CACHE"


def read_versions(project_root: Path) -> dict[str, str]:
    """NAME=VALUE lines of tools/go-tools.env (comments and blank lines skipped)."""
    out: dict[str, str] = {}
    for line in (project_root / VERSIONS_FILE).read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, value = line.partition("=")
            out[name] = value
    return out


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "splitstack" / "tools")


def digest(project_root: Path) -> str:
    h = hashlib.sha256()
    for rel in (VERSIONS_FILE, BUILD_SCRIPT):
        h.update((project_root / rel).read_bytes())
    return h.hexdigest()[:12]


@dataclass(frozen=True)
class GoTools:
    """The built tools of one checkout's pins."""

    root: Path  # <cache>/<digest>
    versions: dict[str, str]

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def crds(self) -> Path:
        return self.root / "crds"

    @property
    def kwok_stages(self) -> Path:
        return self.root / "kwok" / "stages.yaml"

    def path(self, name: str) -> str:
        return str(self.bin / name)


def go_tools(project_root: Path) -> GoTools:
    """The tools, or SetupError naming the command that builds them."""
    root = cache_root() / digest(project_root)
    tools = GoTools(root, read_versions(project_root))
    missing = [b for b in BINARIES if not (tools.bin / b).is_file()]
    if missing or not (tools.bin / ".complete").is_file():
        raise SetupError(
            f"the Go-built tools of tools/go-tools.env are not in {tools.bin} (missing: "
            f"{', '.join(missing) or 'the build did not finish'}); build them with `make tools` "
            "(once per machine: Go 1.26 and the Go module proxy, about 30-60 min on 2 cores)")
    return tools
