import asyncio
import datetime

import pytest

from contract import cluster_fit

from .infra_helpers import after_build, mocks  # noqa: F401  (fixtures)


@pytest.fixture(autouse=True)
def _fixed_today(monkeypatch):
    """Support windows are compared with a fixed day, so no test changes verdict as time passes."""
    monkeypatch.setattr(cluster_fit, "today", lambda: datetime.date(2026, 11, 27))


@pytest.fixture(autouse=True)
def _current_event_loop():
    """Pulumi's runtime calls asyncio.get_event_loop(). An earlier test's asyncio.run() (or a
    uvloop policy installed by the bench) leaves the main thread without a usable loop, so
    each infra test starts from the default policy with a current loop."""
    asyncio.set_event_loop_policy(None)
    try:
        loop = asyncio.get_event_loop_policy().get_event_loop()
        if loop.is_closed():
            raise RuntimeError("closed")
    except RuntimeError:
        asyncio.set_event_loop(asyncio.new_event_loop())
    yield
