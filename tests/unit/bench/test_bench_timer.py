"""bench/timer.py: the open loop's waker resumes at its deadline, never before, on the timerfd
(Linux) or on the loop's timer (the fallback)."""

import asyncio
import os
import time

import pytest
import uvloop  # the bench extra's loop: the engine runs on it

from bench import timer
from bench.timer import Waker


@pytest.mark.parametrize("new_loop", [asyncio.new_event_loop, uvloop.new_event_loop])
def test_waker_resumes_at_or_after_each_deadline(new_loop):
    loop = new_loop()

    async def main():
        waker = Waker(asyncio.get_running_loop())
        assert waker.precise  # Linux: a timerfd
        woke = []
        t = time.monotonic_ns()
        deadlines = [t + k * 300_000 for k in range(1, 30)]  # every 0.3 ms
        for d in deadlines:
            await waker.until(d)
            woke.append(time.monotonic_ns())
        await waker.until(time.monotonic_ns() - 1_000_000)  # a deadline already past returns
        fd = waker.fd
        waker.close()
        assert waker.fd == -1
        with pytest.raises(OSError):
            os.fstat(fd)  # the timerfd is released
        return deadlines, woke

    try:
        deadlines, woke = loop.run_until_complete(main())
    finally:
        loop.close()
    assert all(w >= d for d, w in zip(deadlines, woke))


def test_waker_serves_other_callbacks_while_it_waits():
    async def main():
        waker = Waker(asyncio.get_running_loop())
        ticks = []

        async def ticker():
            for _ in range(5):
                ticks.append(time.monotonic_ns())
                await asyncio.sleep(0)

        task = asyncio.ensure_future(ticker())
        await waker.until(time.monotonic_ns() + 20_000_000)
        waker.close()
        await task
        return ticks

    assert len(asyncio.run(main())) == 5


def test_without_a_timerfd_the_loop_timer_is_used(monkeypatch):
    monkeypatch.setattr(timer, "_libc", lambda: None)

    async def main():
        waker = Waker(asyncio.get_running_loop())
        assert not waker.precise
        d = time.monotonic_ns() + 5_000_000
        await waker.until(d)
        assert time.monotonic_ns() >= d  # never before the deadline, though the loop's timer can fire early
        waker.close()
        return d

    d = asyncio.run(main())
    assert time.monotonic_ns() >= d
