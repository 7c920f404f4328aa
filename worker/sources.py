"""Fetch a job's PDF: a local path inside the workers' input roots (a worker must not hand any
file it can read to whoever can enqueue), or an http(s) URL whose prefix is on the allow-list
(a worker must not become a proxy to anything its network can reach: SSRF)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from contract.inputs import path_refusal
from worker.errors import PermanentError, TransientError

MAX_DOWNLOAD_BYTES = 512 * 1024 * 1024


async def fetch(source: str, allowlist: tuple[str, ...], http: httpx.AsyncClient | None = None,
                roots: tuple[Path, ...] | None = None, forbidden: tuple[Path, ...] = ()) -> bytes:
    """The job's bytes. A path must resolve inside ``roots`` (contract/inputs.py; None: no
    check, for callers that checked already) and outside ``forbidden``."""
    if source.startswith("/"):
        if roots is not None:
            refused = path_refusal(source, list(roots), list(forbidden))
            if refused:
                raise PermanentError("path_not_allowed", refused)
        path = Path(source)
        try:
            return await asyncio.to_thread(path.read_bytes)
        except FileNotFoundError:
            raise PermanentError("not_found", f"{source}: no such file on the worker; the path "
                                 "must be on storage every worker mounts") from None
        except IsADirectoryError:
            raise PermanentError("not_found", f"{source}: is a directory, not a PDF file") from None
        except PermissionError:
            raise PermanentError("unreadable", f"{source}: permission denied for the worker") from None
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
                if size > MAX_DOWNLOAD_BYTES:
                    raise PermanentError("too_large", f"{source}: larger than {MAX_DOWNLOAD_BYTES} bytes")
                chunks.append(chunk)
            return b"".join(chunks)
    except httpx.TransportError as exc:
        raise TransientError(f"{source}: download failed: {exc!r}") from exc
    finally:
        if owned:
            await client.aclose()
