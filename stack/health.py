"""Health probes for local-stack components."""

from __future__ import annotations

import ssl
from pathlib import Path

import httpx
import psutil
import redis

from stack.components import HealthCheck


def probe(check: HealthCheck, timeout_s: float = 2.0) -> tuple[bool, str]:
    """(healthy, detail). Never raises: a probe that cannot connect is simply unhealthy."""
    if check.kind == "redis":
        try:
            password = _read(check.password_file)
            client = redis.Redis.from_url(check.url, socket_timeout=timeout_s, password=password,
                                          socket_connect_timeout=timeout_s)
            try:
                return bool(client.ping()), "PONG"
            finally:
                client.close()
        except redis.RedisError as exc:
            return False, f"redis: {exc}"
    try:
        verify: ssl.SSLContext | bool = True
        if check.ca_file:
            verify = False if check.ca_file == "none" else ssl.create_default_context(cafile=check.ca_file)
        # An HTTP check with a password file: basic auth (the local Alertmanager's API).
        password = _read(check.password_file) if check.password_file else None
        auth = ("splitstack", password) if password else None
        response = httpx.get(check.url, timeout=timeout_s, verify=verify, auth=auth)
    except httpx.HTTPError as exc:
        return False, f"{type(exc).__name__}: {exc}"
    if response.status_code == 200:
        return True, "HTTP 200"
    return False, f"HTTP {response.status_code}" + _why(response)


def _why(response: httpx.Response) -> str:
    """The reason a not-ready answer gives (a worker's /readyz says why in ``detail``), short."""
    try:
        body = response.json()
    except ValueError:
        return ""
    detail = body.get("detail") if isinstance(body, dict) else None
    return f": {str(detail)[:300]}" if detail else ""


def _read(path: str | None) -> str | None:
    if path is None:
        return None
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def listens_on(pid: int, port: int) -> bool:
    """True when the process tree of ``pid`` owns the listening socket on ``port``: a 200
    from /health proves nothing if another process grabbed the port first."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return False
    for proc in procs:
        try:
            conns = proc.net_connections(kind="tcp")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if any(c.status == psutil.CONN_LISTEN and c.laddr.port == port for c in conns):
            return True
    return False
