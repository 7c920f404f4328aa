"""Returning freed memory to the OS between documents."""

from __future__ import annotations

import ctypes


def malloc_trim() -> None:
    """Hand freed heap back to the OS after a document. Page images are large, short-lived
    allocations made from several threads; glibc keeps the freed arenas, which reads as RSS
    growth that is not a leak. A no-op where glibc is absent."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def _load_libc():
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim  # noqa: B018 - raises AttributeError off glibc
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _load_libc()
