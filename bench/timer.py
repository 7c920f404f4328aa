"""Waking up at a send time with sub-millisecond precision.

An event loop's own timers are millisecond timers: uvloop (libuv) keeps its clock in whole
milliseconds, and the selector loops round epoll's timeout up to the next millisecond, so an
open loop's send due at t left 0-2 ms late (the schedule lag's p50 was ~1 ms at 2 req/s). On
Linux a timerfd is armed for the exact nanosecond of CLOCK_MONOTONIC (``time.monotonic_ns()``'s
clock) and the loop watches it like a socket: the loop wakes when the kernel's high-resolution
timer fires, tens of microseconds after the deadline, and keeps serving reads until then. Where
there is no timerfd (not Linux, or the C library will not make one), the loop's timer is used.
Python 3.11 has no ``os.timerfd_create`` (3.13 has), so the two libc calls go through ctypes.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import os
import time

NS = 1_000_000_000
_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = 0o2000000
_TFD_TIMER_ABSTIME = 1
USE_TIMERFD = True  # False: the loop's own timer (benchmarks compare the two)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


@functools.cache
def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.timerfd_create.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.timerfd_settime.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Itimerspec),
                                         ctypes.c_void_p]
        return libc
    except (OSError, AttributeError):  # no C library symbols (not Linux)
        return None


class Waker:
    """``await waker.until(t_ns)``: resume at ``time.monotonic_ns() >= t_ns``, precisely. One
    waiter at a time (a client process's scheduler); ``close()`` releases the timerfd."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.fd = -1
        self._fut: asyncio.Future | None = None
        self._spec = _Itimerspec()
        libc = _libc() if USE_TIMERFD else None
        if libc is None:
            return
        fd = libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if fd < 0:
            return
        self._settime = libc.timerfd_settime
        self._ref = ctypes.byref(self._spec)
        try:
            loop.add_reader(fd, self._fired)
        except (NotImplementedError, OSError):  # a loop that cannot watch file descriptors
            os.close(fd)
            return
        self.fd = fd

    @property
    def precise(self) -> bool:
        return self.fd >= 0

    async def until(self, t_ns: int) -> None:
        if self.fd < 0:
            delay = t_ns - time.monotonic_ns()
            if delay > 0:
                await asyncio.sleep(delay / NS)
            while time.monotonic_ns() < t_ns:  # a millisecond timer can fire up to ~1 ms early
                await asyncio.sleep(0)
            return
        value = self._spec.it_value
        value.tv_sec, value.tv_nsec = divmod(t_ns, NS)
        if self._settime(self.fd, _TFD_TIMER_ABSTIME, self._ref, None) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_settime: {os.strerror(err)}")
        self._fut = fut = self.loop.create_future()
        try:
            await fut
        finally:
            self._fut = None

    def _fired(self) -> None:
        try:
            os.read(self.fd, 8)  # the expiration count; reading it re-arms readiness
        except BlockingIOError:
            return  # re-armed for a later time before the loop saw this expiry
        fut = self._fut
        if fut is not None and not fut.done():
            fut.set_result(None)

    def close(self) -> None:
        if self.fd >= 0:
            self.loop.remove_reader(self.fd)
            os.close(self.fd)
            self.fd = -1
