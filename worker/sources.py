"""Fetch a job's PDF: a local path inside the workers' input roots (a worker must not hand any
file it can read to whoever can enqueue), or an http(s) URL whose prefix is on the allow-list
(a worker must not become a proxy to anything its network can reach: SSRF).

No input can hold a worker: a local file is opened without blocking (``O_NONBLOCK``: a named
pipe swapped in after `submit` checked the path opens at once instead of waiting for a
writer) and without following a final symlink (``O_NOFOLLOW`` on the resolved path: a link
swapped in after the roots were checked is refused); the opened descriptor must be a regular
file inside the roots (``fstat`` and ``/proc/self/fd``: what is read is what was checked) and at
most ``max_bytes`` long, refused before a byte is read; the whole read has a deadline
(:class:`InputStalled`, which worker/processing.py counts towards ``poison``).
"""

from __future__ import annotations

import asyncio
import errno
import os
import stat
from pathlib import Path

import httpx

from contract.inputs import file_kind, path_refusal
from worker.errors import PermanentError, TransientError

MAX_DOWNLOAD_BYTES = 512 * 1024 * 1024  # default of ``max_bytes`` (the spec's worker_pool.max_input_mib)
READ_TIMEOUT_S = 30.0  # default of ``read_timeout_s`` (worker_pool.input_read_timeout_s)
_CHUNK = 1024 * 1024
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY


class InputStalled(Exception):
    """Reading the input did not finish within its deadline (a hung mount). The job goes back
    to the queue and the stall counts as a delivery (worker/processing.py)."""


async def fetch(source: str, allowlist: tuple[str, ...], http: httpx.AsyncClient | None = None,
                roots: tuple[Path, ...] | None = None, forbidden: tuple[Path, ...] = (),
                max_bytes: int = MAX_DOWNLOAD_BYTES, read_timeout_s: float = READ_TIMEOUT_S) -> bytes:
    """The job's bytes. A path must resolve inside ``roots`` (contract/inputs.py; None: no
    check, for callers that checked already) and outside ``forbidden``."""
    if source.startswith("/"):
        return await read_local(source, roots, forbidden, max_bytes, read_timeout_s)
    if not any(source.startswith(prefix) for prefix in allowlist):
        raise PermanentError(
            "url_not_allowed", f"{source}: URL is not on the worker's allow-list "
            f"({list(allowlist) or 'empty'}); add its prefix to SPLITSTACK_WORKER_URL_ALLOWLIST")
    owned = http is None
    client = http or httpx.AsyncClient(timeout=60.0, follow_redirects=False)
    try:
        async with client.stream("GET", source) as response:
            if response.status_code >= 500:
                raise TransientError(f"{source}: download answered {response.status_code}")
            if response.status_code != 200:
                raise PermanentError("download_failed", f"{source}: download answered {response.status_code}")
            chunks, size = [], 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > max_bytes:
                    raise PermanentError("too_large", f"{source}: larger than {max_bytes} bytes "
                                         "(worker_pool.max_input_mib); split the file or raise it")
                chunks.append(chunk)
            return b"".join(chunks)
    except httpx.TransportError as exc:
        raise TransientError(f"{source}: download failed: {exc!r}") from exc
    finally:
        if owned:
            await client.aclose()


async def read_local(source: str, roots: tuple[Path, ...] | None, forbidden: tuple[Path, ...],
                     max_bytes: int, read_timeout_s: float) -> bytes:
    """A local input's bytes, read in a thread under a deadline: a read that stalls leaves its
    thread blocked on the file (no thread can be interrupted) but frees the job and the worker."""
    if roots is not None:
        refused = path_refusal(source, list(roots), list(forbidden))
        if refused:
            raise PermanentError("path_not_allowed", refused)
    try:
        return await asyncio.wait_for(
            asyncio.to_thread(_read_regular, source, roots, forbidden, max_bytes), read_timeout_s)
    except TimeoutError:
        raise InputStalled(f"{source}: reading the file took longer than "
                           f"worker_pool.input_read_timeout_s={read_timeout_s:g} s (a hung mount?)") from None


def _read_regular(source: str, roots: tuple[Path, ...] | None, forbidden: tuple[Path, ...],
                  max_bytes: int) -> bytes:
    real = os.path.realpath(source)
    try:
        fd = os.open(real, _OPEN_FLAGS)
    except OSError as exc:
        raise _open_error(source, exc) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise PermanentError("not_regular", f"{source}: not a regular file ({file_kind(st.st_mode)}); "
                                 "only PDF files can be parsed (was it replaced after it was submitted?)")
        if roots is not None:
            opened = _opened_path(fd)
            refused = path_refusal(opened, list(roots), list(forbidden)) if opened else None
            if refused:
                raise PermanentError("path_not_allowed", f"{source}: the file opened was {refused} "
                                     "(a folder on its path was swapped for a link after the check)")
        if st.st_size > max_bytes:
            raise PermanentError("too_large", _too_large(source, st.st_size, max_bytes))
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = os.read(fd, _CHUNK)
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > max_bytes:  # the file grew after fstat
                raise PermanentError("too_large", _too_large(source, size, max_bytes))
            chunks.append(chunk)
    except OSError as exc:
        raise _open_error(source, exc) from None
    finally:
        os.close(fd)


def _opened_path(fd: int) -> str | None:
    """The path of what ``fd`` is open on (Linux ``/proc``); None where there is no ``/proc``."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


def _too_large(source: str, size: int, max_bytes: int) -> str:
    return (f"{source}: {size} bytes is over worker_pool.max_input_mib={max_bytes // (1024 * 1024)}; "
            "split the file or raise worker_pool.max_input_mib")


def _open_error(source: str, exc: OSError) -> PermanentError:
    if exc.errno == errno.ENOENT:
        return PermanentError("not_found", f"{source}: no such file on the worker; the path "
                              "must be on storage every worker mounts")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return PermanentError("unreadable", f"{source}: permission denied for the worker")
    if exc.errno == errno.ELOOP:
        return PermanentError("path_not_allowed", f"{source}: became a symbolic link after its path was "
                              "checked; submit the file itself")
    if exc.errno == errno.ENXIO:  # a socket: open(2) refuses it
        return PermanentError("not_regular", f"{source}: not a regular file (a socket); only PDF "
                              "files can be parsed")
    return PermanentError("unreadable", f"{source}: cannot be read ({exc.strerror})")
