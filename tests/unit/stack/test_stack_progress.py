"""`up` says what a slow component is doing while it loads, in lines that fit 80 columns;
`down` reports each component as it stops."""

from __future__ import annotations

from pathlib import Path

import stack.launcher as launcher
from stack.component import Component, HealthCheck
from testsupport.stack import local_stack


class _Supervisor:
    """supervisord's getAllProcessInfo answers: every program RUNNING, then gone after stop."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.stopped: set[str] = set()

    def process_info(self) -> dict[str, dict]:
        return {n: {"name": n, "statename": "STOPPED" if n in self.stopped else "RUNNING"} for n in self.names}


def test_up_reports_a_loading_server_with_its_last_log_line(tmp_path: Path, monkeypatch) -> None:
    stack = local_stack(tmp_path / "state")
    stack.paths.logs.mkdir(parents=True, exist_ok=True)
    stack.paths.log("server-vlm").write_text(
        "(APIServer pid=7) INFO 11-27 11:53:00 [loader.py:12] Loading weights took 3.2 seconds "
        "from /very/long/path/to/a/model/folder/that/would/wrap/the/line\n")
    component = Component(name="server-vlm", role="server", argv=["true"], port=8000, url="http://127.0.0.1:8000",
                          health=HealthCheck("http", "http://127.0.0.1:8000/health"))
    monkeypatch.setattr(launcher.LocalStack, "supervisor", property(lambda self: _Supervisor(["server-vlm"])))
    answers = iter([(False, "connection refused")] * 3 + [(True, "ok")])
    monkeypatch.setattr(launcher, "probe", lambda health, *a: next(answers))
    monkeypatch.setattr(launcher, "WAIT_PROGRESS_EVERY_S", 0.0)
    said: list[tuple[str, str]] = []
    stack._wait_healthy([component], lambda c, m: said.append((c, m)))  # noqa: SLF001
    loading = [m for c, m in said if m.startswith("starting")]
    assert len(loading) == 3, said
    assert "Loading weights took 3.2 seconds" in loading[0] and "APIServer" not in loading[0], loading[0]
    assert all(len(f"{c} {m}") <= 80 for c, m in said), said
    assert said[-1][1].startswith("healthy after")


def test_stop_and_wait_names_each_program_as_it_ends(tmp_path: Path, monkeypatch) -> None:
    from stack.supervisor import Supervisor

    stack = local_stack(tmp_path / "state")
    fake = _Supervisor(["worker-0", "worker-1"])

    class _Rpc:
        class supervisor:  # noqa: N801 - supervisord's XML-RPC namespace
            @staticmethod
            def stopProcess(name: str, wait: bool) -> bool:  # noqa: N802
                fake.stopped.add(name)
                return True

    sup = Supervisor(stack.paths)
    monkeypatch.setattr(sup, "rpc", lambda: _Rpc)
    monkeypatch.setattr(sup, "process_info", fake.process_info)
    ended: list[tuple[str, str]] = []
    sup.stop_and_wait(["worker-0", "worker-1"], on_stopped=lambda n, s, st: ended.append((n, st)))
    assert ended == [("worker-0", "STOPPED"), ("worker-1", "STOPPED")]
