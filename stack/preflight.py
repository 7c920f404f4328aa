"""Checks before the local stack starts anything: ports free, secrets present."""

from __future__ import annotations

import socket

import psutil

from contract.spec import Spec
from contract.spec_rules import local_ports, port_field
from stack.components import SetupError
from stack.secrets import resolve_api_key

__all__ = ["check_ports_free", "port_holder", "resolve_api_key"]


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
