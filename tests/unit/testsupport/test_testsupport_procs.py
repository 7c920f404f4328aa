"""testsupport/procs.py with real processes: readiness, its errors, and cleanup on failure."""

from __future__ import annotations

import sys
from pathlib import Path

import psutil
import pytest

from testsupport.procs import NotReady, free_port, running, start, wait_until

SLEEPER = [sys.executable, "-c", "print('up', flush=True); import time; time.sleep(60)"]
# A tiny HTTP server whose /health answers 200.
HEALTHY = [sys.executable, "-c", "import http.server, sys\n"
           "class H(http.server.BaseHTTPRequestHandler):\n"
           "    def do_GET(self):\n"
           "        self.send_response(200 if self.path == '/health' else 404); self.end_headers()\n"
           "http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()\n"]


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_ready_on_health_then_stopped(tmp_path: Path):
    port = free_port()
    with running("web", [*HEALTHY, str(port)], tmp_path / "web.log", port=port, ready="/health") as web:
        assert web.alive() and web.url == f"http://127.0.0.1:{port}"
        pid = web.pid
    assert _gone(pid) and web.returncode is not None


def test_a_process_that_exits_early_names_its_code_and_log(tmp_path: Path):
    argv = [sys.executable, "-c", "import sys; print('bad flag --x', flush=True); sys.exit(3)"]
    with pytest.raises(NotReady) as err, running("broken", argv, tmp_path / "b.log", port=free_port(), ready="/health"):
        pass
    assert err.value.returncode == 3
    assert "broken exited with code 3 before it was ready" in str(err.value)
    assert "bad flag --x" in str(err.value) and str(tmp_path / "b.log") in str(err.value)


def never() -> bool:
    return False


def test_not_ready_in_time_is_stopped_and_says_so(tmp_path: Path):
    before = {p.pid for p in psutil.Process().children()}
    with pytest.raises(NotReady, match=r"slow not ready after 0.5 s \(waiting for never\); still running(.|\n)*up"):
        with running("slow", SLEEPER, tmp_path / "s.log", ready=never, ready_timeout_s=0.5):
            pass
    assert all(_gone(p.pid) for p in psutil.Process().children() if p.pid not in before)


def test_cleanup_also_when_the_block_fails(tmp_path: Path):
    with pytest.raises(RuntimeError, match="test failed"), running("s", SLEEPER, tmp_path / "s.log") as s:
        pid = s.pid
        raise RuntimeError("test failed")
    assert _gone(pid)


def test_kill_is_sigkill_and_a_temporary_log_is_removed():
    with running("s", SLEEPER) as s:
        log = s.log_path
        wait_until(lambda: "up" in s.log(), 10, "output in the log")
        assert s.kill() == -9
    assert not log.exists()


def test_start_without_context_manager_and_wait_until_message(tmp_path: Path):
    s = start("s", SLEEPER, tmp_path / "s.log")
    try:
        with pytest.raises(TimeoutError, match=r"timed out after 0.2 s waiting for nothing \(last: 0\)"):
            wait_until(lambda: 0, 0.2, "nothing")
    finally:
        assert s.stop(5) == -15


def test_a_temporary_log_is_kept_when_the_process_was_not_ready():
    argv = [sys.executable, "-c", "import sys; sys.exit(5)"]
    with pytest.raises(NotReady) as err, running("gone", argv, ready=never):
        pass
    assert err.value.log_path.exists() and str(err.value.log_path) in str(err.value)
    err.value.log_path.unlink()
