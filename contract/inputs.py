"""Which files a job may name: the workers' input roots.

Without a limit, any file a worker can read could be submitted (a key in the stack's secrets
folder, a service-account token, another user's files) and its bytes would reach the parser, the
logs and the dead-letter stream. A job's path must resolve (symlinks followed) inside one of
``worker_pool.input_roots``; the local stack's secrets folder is refused even inside a root.
Both `splitstack submit` and the worker check it: the command refuses before enqueueing, the
worker dead-letters a job that names another path (``path_not_allowed``).

Defaults when ``worker_pool.input_roots`` is empty: on the local stack, its state folder (where
the bench writes its PDFs); in a pod, ``/data`` (the volumes the program mounts there), never the
container's own filesystem. The system temp folder is never a default: any local user can write
there, and a job naming a file there could be a link into another stack's secrets.

Only regular files are inputs, up to ``worker_pool.max_input_mib``: a named pipe or a device
would hold the reader forever, a huge file its memory. :func:`file_refusal` is the check
`splitstack submit` makes; the worker checks again on the descriptor it opened
(worker/sources.py), since the file may change between the two.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from contract.spec import Spec, Target

SECRETS_DIR = "secrets"  # inside the local stack's state folder (stack/paths.py)
POD_DATA_ROOT = "/data"


def _absolute(path: str, project_root: Path) -> Path:
    p = Path(path).expanduser()
    return Path(os.path.realpath(p if p.is_absolute() else project_root / p))


def input_roots(spec: Spec, project_root: Path) -> list[Path]:
    roots = spec.worker_pool.input_roots
    if roots:
        return [_absolute(r, project_root) for r in roots]
    if spec.target is Target.local:
        return [_absolute(spec.local.state_dir, project_root)]
    return [Path(POD_DATA_ROOT)]


def forbidden_dirs(spec: Spec, project_root: Path) -> list[Path]:
    return [_absolute(spec.local.state_dir, project_root) / SECRETS_DIR] if spec.target is Target.local else []


def path_refusal(path: str, roots: list[Path], forbidden: list[Path]) -> str | None:
    """Why the job may not name ``path`` (None: it may). Symlinks are resolved first, so a link
    inside a root that points out of it is refused."""
    real = Path(os.path.realpath(path))
    if any(real == f or f in real.parents for f in forbidden):
        return f"{path}: inside the stack's secrets folder; jobs can never name files there"
    if not any(real == r or r in real.parents for r in roots):
        shown = ", ".join(str(r) for r in roots) or "none"
        where = f" (resolves to {real})" if str(real) != path else ""
        return (f"{path}{where} is outside the workers' input roots ({shown}); copy it under one of "
                "them, or add its folder to worker_pool.input_roots")
    return None


def max_input_bytes(spec: Spec) -> int:
    return spec.worker_pool.max_input_mib * 1024 * 1024


def file_refusal(path: str, max_bytes: int) -> str | None:
    """Why ``path`` is not an input a worker may read (None: it may): not a regular file (a
    pipe, a socket, a device, a folder), or larger than ``max_bytes``. Follows symlinks, as
    :func:`path_refusal` resolves them."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return f"{path}: no such file"
    except OSError as exc:
        return f"{path}: cannot be read ({exc.strerror})"
    if not stat.S_ISREG(st.st_mode):
        return (f"{path}: not a regular file ({file_kind(st.st_mode)}); only PDF files can be "
                "submitted")
    if st.st_size > max_bytes:
        return (f"{path}: {st.st_size} bytes is over worker_pool.max_input_mib="
                f"{max_bytes // (1024 * 1024)}; split the file or raise worker_pool.max_input_mib")
    return None


def file_kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    for test, name in ((stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"
