"""Checks before the local stack starts anything: ports free, secrets present."""

from __future__ import annotations

import os
import secrets as pysecrets
import socket

import psutil

from contract.spec import Spec
from contract.spec_rules import local_ports, port_field
from stack.components import SetupError
from stack.paths import StackPaths


def port_holder(port: int) -> str:
    try:
        for conn in psutil.net_connections(kind="inet"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN:
                if conn.pid:
                    name = psutil.Process(conn.pid).name()
                    return f"{name} (pid {conn.pid})"
    except (psutil.AccessDenied, psutil.NoSuchProcess):
        pass
    return "another process"


def check_ports_free(spec: Spec) -> None:
    for component, port in local_ports(spec).items():
        if component.startswith("server:") and spec.server(component[7:]).replicas == 0:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            # As the servers themselves do: connections in TIME_WAIT from a stack that just
            # stopped must not count as "in use"; only a listener does.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((spec.local.host, port))
            except OSError:
                raise SetupError(
                    f"port {port} for {component} is already in use by {port_holder(port)}: "
                    f"stop that process (`splitstack down` if it is an old stack) or change "
                    f"{port_field(spec, component)} in Pulumi.{spec.stack}.yaml"
                ) from None


def resolve_api_key(spec: Spec, paths: StackPaths) -> str | None:
    """The worker server's API key: from its env var, else one generated for this stack.

    The generated key is kept in the state dir (mode 0600) so the bench, the workers and the
    runbooks of the same stack find it; the spec only ever holds the reference.
    """
    ref = spec.worker_server.api_key
    if ref is None:
        return None
    value = os.environ.get(ref.env)
    if value:
        return value
    key_file = paths.secrets / ref.key
    if key_file.is_file():
        return key_file.read_text().strip()
    value = pysecrets.token_urlsafe(24)
    key_file.write_text(value)
    key_file.chmod(0o600)
    return value
