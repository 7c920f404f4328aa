import asyncio

import pytest

from .infra_helpers import after_build, mocks  # noqa: F401  (fixtures)


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
