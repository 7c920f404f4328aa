"""The local Alertmanager's API asks for the stack's password: a local user without it cannot
silence every alert (the Watchdog included) with one `POST /api/v2/silences`; Prometheus, the
health check and the stack's clients send it (the real Alertmanager binary)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from stack.components import HealthCheck
from stack.health import probe
from stack.paths import StackPaths
from stack.prometheus_config import write_prometheus_config
from stack.secrets import alertmanager_auth, alertmanager_password_file, alertmanager_web_config
from testsupport.procs import free_port, wait_until
from testsupport.stack import local_stack

pytestmark = pytest.mark.integration


def test_alertmanager_api_refuses_a_client_without_the_stacks_password(tmp_path: Path) -> None:
    binary = shutil.which("alertmanager") or shutil.which("prometheus-alertmanager")
    assert binary, "install the Debian package prometheus-alertmanager"
    paths = StackPaths.at(str(tmp_path / "state"), tmp_path)
    paths.make()
    web = alertmanager_web_config(paths)
    assert web.stat().st_mode & 0o077 == 0 and "splitstack: '$2b$" in web.read_text()
    assert alertmanager_auth(paths)[1] not in web.read_text()  # only its hash
    config = tmp_path / "am.yml"
    config.write_text("route:\n  receiver: none\nreceivers:\n- name: none\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([binary, f"--config.file={config}", f"--storage.path={tmp_path / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=",
                             f"--web.config.file={web}"], stderr=subprocess.DEVNULL)
    try:
        check = HealthCheck("http", f"{url}/-/ready", password_file=str(alertmanager_password_file(paths)))
        wait_until(lambda: probe(check)[0], 20, "alertmanager ready (with the password)")
        silence = {"matchers": [{"name": "alertname", "value": ".+", "isRegex": True}],
                   "startsAt": "2026-01-01T00:00:00Z", "endsAt": "2099-01-01T00:00:00Z",
                   "createdBy": "anyone", "comment": "silence everything"}
        assert httpx.post(f"{url}/api/v2/silences", json=silence, timeout=5).status_code == 401
        assert httpx.get(f"{url}/api/v2/alerts", timeout=5).status_code == 401
        assert httpx.get(f"{url}/api/v2/silences", timeout=5, auth=alertmanager_auth(paths)).json() == []
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    # Prometheus sends its alerts with the password, from the file
    stack = local_stack(tmp_path / "state")
    text = write_prometheus_config(stack.spec, stack.paths, []).read_text()
    assert "basic_auth:" in text and str(alertmanager_password_file(stack.paths)) in text
    assert alertmanager_auth(stack.paths)[1] not in text
