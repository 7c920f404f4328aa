"""The wheels an image installs, made on the host with the host's pip and its configuration.

Why on the host, not ``pip install`` inside the build: a build step sees neither the host's pip
configuration (private indexes, a local wheel folder) nor its trusted certificate authorities
(a TLS-inspecting proxy makes PyPI fail certificate verification inside a container), and a
build that needs no network at all is reproducible: the images build with ``--network none``.

* The project: its own wheel, built by ``pip wheel`` from a copy of the files that go into it
  (no stale ``build/`` folder can leak in), with ``SOURCE_DATE_EPOCH`` fixed so that the same
  sources give the same bytes and podman's layer cache holds across builds.
* Its dependencies: the binary wheels of the closure of ``splitstack[EXTRA]`` for the base
  image's exact Python (Debian bookworm's is 3.11.2, older than some releases accept), constrained
  to the versions installed in the running environment (what the tests ran), pinned one per line
  in a ``requirements.txt`` that the image installs with ``--no-deps``. Kept in ``.cache/images``
  under a digest of what decides them, so a warm build does not run pip at all.
"""

from __future__ import annotations

import email.parser
import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from stack.component import SetupError

SOURCE_DATE_EPOCH = "315532800"  # 1980-01-01, the earliest time a zip file can hold
# CPython platform tags of a glibc x86-64 Linux image, for wheels of a Python other than the host's.
# CPython platform tags of a glibc x86-64 Linux image (the bases are Debian bookworm, glibc 2.36,
# and the vLLM image's Ubuntu 22.04, glibc 2.35).
MANYLINUX_X86_64 = ("manylinux2014_x86_64", *(f"manylinux_2_{m}_x86_64" for m in range(17, 36)))


@dataclass(frozen=True)
class Wheelhouse:
    folder: Path
    requirements: Path  # name==version per line: the closure the image installs with --no-deps
    built: bool  # False: found in the cache

    def pins(self) -> dict[str, str]:
        lines = self.requirements.read_text().split()
        return dict(line.split("==", 1) for line in lines)


def packaged_files(root: Path) -> list[Path]:
    """The files the project's wheel is built from (relative to ``root``), sorted."""
    pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    top = sorted({p.rstrip("*").rstrip(".") for p in patterns})
    if (root / ".git").exists():
        listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z", "--", *top],
                                cwd=root, capture_output=True, check=True).stdout.decode()
        files = [Path(p) for p in listed.split("\0") if p]
    else:  # an unpacked source archive
        files = [p.relative_to(root) for d in top for p in (root / d).rglob("*")
                 if p.is_file() and "__pycache__" not in p.parts]
    files = [f for f in files if (root / f).is_file() and f.suffix not in (".pyc", ".pyo")]
    return sorted({*files, Path("pyproject.toml"), Path("README.md")})


def source_digest(root: Path) -> str:
    """sha256 over the packaged files' names and bytes: equal digests, equal project wheels."""
    h = hashlib.sha256()
    for rel in packaged_files(root):
        h.update(str(rel).encode() + b"\0" + (root / rel).read_bytes() + b"\0")
    return h.hexdigest()[:16]


def project_wheel(root: Path, out_dir: Path, python: str = sys.executable) -> Path:
    """Build the project's wheel into ``out_dir`` (emptied first) and return its path."""
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="splitstack-src-") as tmp:
        for rel in packaged_files(root):
            (Path(tmp) / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / rel, Path(tmp) / rel)
        _pip(python, ["wheel", "--no-deps", "--quiet", "--wheel-dir", str(out_dir), tmp],
             env={"SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH}, what="building the project's wheel")
    wheels = list(out_dir.glob("*.whl"))
    if len(wheels) != 1:
        raise SetupError(f"building the project's wheel left {len(wheels)} wheels in {out_dir}")
    return wheels[0]


def installed_constraints(python_version: str) -> tuple[str, dict[str, str]]:
    """``name==version`` of every distribution installed where the build runs (what the tests ran
    with), leaving out those whose Requires-Python excludes the image's ``python_version``: pip
    picks the newest version that runs there for them. Returns the constraints and what was left out."""
    target = Version(python_version)
    lines: list[str] = []
    dropped: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name, version = dist.metadata["Name"], dist.version
        if not name or _normalize(name) == "splitstack":
            continue
        needs = dist.metadata["Requires-Python"]
        if needs and target not in SpecifierSet(needs):
            dropped[_normalize(name)] = f"{version} (Python {needs})"
            continue
        lines.append(f"{_normalize(name)}=={version}")
    return "\n".join(sorted(set(lines))) + "\n", dropped


def dependency_wheels(
    requirements: Sequence[str], cache: Path, *, python_version: str, constraints: str,
    substitutes: Mapping[str, str] | None = None, exclude: Sequence[str] = (), key_material: str = "",
    python: str = sys.executable,
) -> Wheelhouse:
    """Binary wheels of the closure of ``requirements`` for CPython ``python_version`` on glibc
    x86-64, under ``constraints``; cached by a digest of everything that decides them.

    ``substitutes`` swaps a distribution for another that provides the same modules (written to
    requirements.txt instead of it); ``exclude`` leaves distributions out (the project itself);
    ``key_material`` is whatever else decides the closure (the project's pyproject.toml, when the
    project's wheel is among the requirements).
    """
    substitutes = dict(substitutes or {})
    key = hashlib.sha256("\n".join([*requirements, constraints, repr(sorted(substitutes.items())),
                                    *exclude, python_version, key_material]).encode()).hexdigest()[:12]
    folder = cache / key
    pins = folder / "requirements.txt"
    if pins.is_file():
        return Wheelhouse(folder, pins, False)
    partial = cache / f"{key}.partial"
    if partial.exists():
        shutil.rmtree(partial)
    partial.mkdir(parents=True)
    reqs = [*requirements, *substitutes.values()]
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as cfile:
        cfile.write(constraints)
        cfile.flush()

        def download(what: Sequence[str]) -> None:
            _pip(python, ["download", "--quiet", "--dest", str(partial), "-c", cfile.name, "--only-binary=:all:",
                          "--python-version", python_version, "--implementation", "cp",
                          *[a for tag in MANYLINUX_X86_64 for a in ("--platform", tag)], *what],
                 what=f"collecting the wheels of {', '.join(what)} for Python {python_version}")

        download(reqs)
        # pip's --python-version decides Requires-Python and `python_version` markers, but it
        # evaluates `python_full_version` markers for the Python that runs it (redis needs
        # async-timeout below 3.11.3): walk the closure with the image's own markers and fetch
        # what pip left out, until nothing is missing.
        for _ in range(5):
            closure, missing = _closure(partial, reqs, python_version, skip=set(map(_normalize, substitutes)))
            if not missing:
                break
            download(missing)
        else:
            raise SetupError(f"the wheels for Python {python_version} still miss {missing} after five rounds")
    drop = {_normalize(e) for e in exclude}
    lines = sorted(f"{name}=={version}" for name, version in closure.items() if name not in drop)
    for wheel in partial.glob("*.whl"):  # what only the host's markers wanted
        if _normalize(wheel.name.split("-")[0]) not in closure or _normalize(wheel.name.split("-")[0]) in drop:
            wheel.unlink()
    (partial / "requirements.txt").write_text("\n".join(lines) + "\n")
    for stale in cache.iterdir():  # one wheelhouse per image is enough
        if stale != partial and stale.is_dir():
            shutil.rmtree(stale)
    partial.rename(folder)
    return Wheelhouse(folder, pins, True)


def _closure(folder: Path, roots: Sequence[str], python_version: str,
             skip: set[str]) -> tuple[dict[str, str], list[str]]:
    """The distributions ``roots`` need on CPython ``python_version`` (glibc x86-64), from the
    wheels in ``folder``: ({name: version}, requirements no wheel there satisfies)."""
    wheels: dict[str, tuple[str, Path]] = {}
    for wheel in folder.glob("*.whl"):
        name, version = wheel.name.split("-")[:2]
        wheels[_normalize(name)] = (version, wheel)
    env: dict[str, str] = {k: str(v) for k, v in default_environment().items()}
    env |= {"python_full_version": python_version,
            "python_version": ".".join(python_version.split(".")[:2]), "implementation_version": python_version,
            "implementation_name": "cpython", "platform_python_implementation": "CPython"}
    closure: dict[str, str] = {}
    missing: list[str] = []
    todo: list[tuple[str, frozenset[str]]] = []
    for root in roots:
        if ".whl" in root:  # a local wheel, maybe with extras: path/name-1.0-py3-none-any.whl[extra]
            local, _, wanted_extras = root.partition("[")
            todo.append((_normalize(Path(local).name.split("-")[0]),
                         frozenset(wanted_extras.rstrip("]").split(",")) - {""}))
        else:
            req = Requirement(root)
            todo.append((_normalize(req.name), frozenset(req.extras)))
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, extras = todo.pop()
        if (name, extras) in seen or name in skip:
            continue
        seen.add((name, extras))
        if name not in wheels:
            missing.append(name + (f"[{','.join(sorted(extras))}]" if extras else ""))
            continue
        version, wheel_path = wheels[name]
        closure[name] = version
        for line in _requires(wheel_path):
            req = Requirement(line)
            marker = req.marker
            if marker is None or any(marker.evaluate({**env, "extra": e}) for e in (extras or {""})):
                dep = _normalize(req.name)
                if dep in wheels and not req.specifier.contains(wheels[dep][0], prereleases=True):
                    missing.append(str(req).split(";")[0])
                todo.append((dep, frozenset(req.extras)))
    return closure, sorted(set(missing))


def _requires(wheel: Path) -> list[str]:
    """The Requires-Dist lines of a wheel's METADATA."""
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
        text = zf.read(meta).decode()
    return [v for k, v in email.parser.HeaderParser().parsestr(text).items() if k == "Requires-Dist"]


def _normalize(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _pip(python: str, args: list[str], *, what: str, env: Mapping[str, str] | None = None) -> str:
    result = subprocess.run([python, "-m", "pip", *args], capture_output=True, text=True,
                            env={**os.environ, **(env or {})}, timeout=1800)
    if result.returncode != 0:
        tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-10:])
        raise SetupError(f"{what} failed (`pip {' '.join(args[:2])} ...`, exit {result.returncode}); "
                         f"pip's configuration must reach an index that has them:\n{tail}")
    return result.stdout
