"""The podman command line, as the image builder and the container runtime of the local stack use it.

Only the Debian packages and the command line (podman 4.3, runc): no socket API, no Python
binding, so the calls here are the ones a person would type. Every failure names the command,
its exit status and the tail of what it printed.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from stack.component import SetupError

# Labels every container of a local stack carries: `down` and the next `up` find them by the
# stack id even after the launcher and supervisord were killed.
LABEL_STACK = "io.splitstack.stack-id"
LABEL_COMPONENT = "io.splitstack.component"
# Label of every image `splitstack images build` makes: what it was built from (a digest of the
# packaged sources), so the local stack can tell an image built from other sources.
LABEL_SOURCE = "io.splitstack.source-digest"


class PodmanError(RuntimeError):
    """A podman command failed; the message holds the command and what it printed."""


def podman_binary() -> str:
    path = shutil.which("podman")
    if path is None:
        raise SetupError(
            "'podman' is not installed: containers need the Debian packages 'podman' and 'runc'. "
            "Install them with `make containers` (or `apt-get install -y podman runc`)."
        )
    return path


def podman(args: Sequence[str], *, timeout_s: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``podman ARGS``; on a non-zero exit (with ``check``) raise :class:`PodmanError`."""
    argv = [podman_binary(), *args]
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise PodmanError(f"`{' '.join(argv)}` did not finish in {timeout_s:.0f} s") from None
    if check and result.returncode != 0:
        raise PodmanError(f"`{' '.join(argv)}` failed (exit {result.returncode}): "
                          f"{_tail(result.stderr or result.stdout)}")
    return result


def image_exists(ref: str) -> bool:
    return podman(["image", "exists", ref], check=False).returncode == 0


def image_label(ref: str, label: str) -> str | None:
    out = podman(["image", "inspect", "--format", f'{{{{index .Labels "{label}"}}}}', ref]).stdout.strip()
    return out if out and out != "<no value>" else None


def image_user(ref: str) -> tuple[int, int]:
    """The numeric ``uid:gid`` the image runs as (its USER), for files it must write on the host."""
    user = podman(["image", "inspect", "--format", "{{.Config.User}}", ref]).stdout.strip()
    uid, _, gid = user.partition(":")
    if not uid.isdigit() or (gid and not gid.isdigit()):
        raise SetupError(f"image {ref} runs as user {user or 'root'!r}: the local stack runs images "
                         "whose USER is a numeric non-root uid:gid (rebuild it with `make images`)")
    return int(uid), int(gid or uid)


def image_size_bytes(ref: str) -> int:
    return int(podman(["image", "inspect", "--format", "{{.Size}}", ref]).stdout.strip())


def build(context: Path, containerfile: Path, tag: str, build_args: dict[str, str],
          labels: dict[str, str], log: Path, timeout_s: float = 1800) -> None:
    """``podman build`` (Docker format: OCI images drop HEALTHCHECK); the output goes to ``log``."""
    argv = [podman_binary(), "build", "--format", "docker", "--pull=missing", "--file", str(containerfile),
            "--tag", tag, "--network", "none"]
    for key, value in sorted(build_args.items()):
        argv += ["--build-arg", f"{key}={value}"]
    for key, value in sorted(labels.items()):
        argv += ["--label", f"{key}={value}"]
    argv.append(str(context))
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        try:
            code = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, timeout=timeout_s).returncode
        except subprocess.TimeoutExpired:
            raise PodmanError(f"building {tag} took longer than {timeout_s:.0f} s; log: {log}") from None
    if code != 0:
        raise PodmanError(f"building {tag} failed (exit {code}); log: {log}\n"
                          f"--- last lines ---\n{_tail(log.read_text(errors='replace'), 15)}")


def labelled_containers(label: str, value: str) -> list[str]:
    """IDs of every container, running or not, whose ``label`` is ``value``."""
    out = podman(["ps", "--all", "--quiet", "--no-trunc", "--filter", f"label={label}={value}"],
                 check=False).stdout
    return out.split()


def remove_containers(ids: Sequence[str], stop_timeout_s: int) -> None:
    """Stop (SIGTERM to PID 1, SIGKILL after ``stop_timeout_s``) and remove the containers."""
    if ids:
        podman(["rm", "--force", "--time", str(stop_timeout_s), *ids], timeout_s=stop_timeout_s + 60)


def _tail(text: str, lines: int = 5) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])
