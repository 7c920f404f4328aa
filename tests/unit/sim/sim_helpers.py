"""Helpers shared by the simulator unit tests (a plain module: conftest is not importable)."""

from __future__ import annotations

import base64
import contextlib
import io

import httpx
from PIL import Image
from prometheus_client import CollectorRegistry

from simulator.app import SimApp
from simulator.config import SimConfig
from simulator.profile import load_profile


@contextlib.asynccontextmanager
async def sim_client(profile: str = "instant", **cfg):
    """The simulator app in-process (fresh registry), its engine running, behind an httpx client."""
    app = SimApp(SimConfig(**cfg), load_profile(profile), registry=CollectorRegistry(auto_describe=False))
    app.engine.start()
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim") as client:
            yield app, client
    finally:
        await app.engine.stop()


def png_data_url(width: int = 64, height: int = 48, color: tuple = (200, 30, 30)) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), color).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
