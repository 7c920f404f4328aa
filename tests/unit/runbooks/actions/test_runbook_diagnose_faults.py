"""diagnose names the fault, not its symptom: workers waiting on a hung or failing server or on
the queue are not "workers down"; a stack that is not running says `splitstack up`; a stale
`up == 0` after the server started again is not "server down"; a rollback to monolithic has no
server to check (a platform fake with the local stack's component names)."""

from __future__ import annotations

import time
from pathlib import Path

from contract.spec_loader import load_stack
from runbooks.audit import AuditLog
from runbooks.context import ActionContext
from runbooks.model import PlatformError
from runbooks.platforms.base import ComponentState, HttpResult
from runbooks.registry import invoke
from runbooks.settings import SafetySettings

SIM2 = {"worker_pool.replicas": 2, "inference_servers.0.engine": "sim"}
BREAKER = ("HTTP 503: circuit breaker open: requests to the server fail (last: a 1-token completion got "
           "no answer in time (the server is hung))")


class LocalFake:
    kind = "local"

    def __init__(self, spec, states: dict[str, ComponentState], completion: HttpResult | None = None,
                 down: bool = False) -> None:
        self.spec, self.states, self.down = spec, states, down
        self.completion = completion or HttpResult(200, '{"choices": []}')

    def target(self) -> str:
        return "local stack 'local' (fake)"

    def state(self, component: str) -> ComponentState:
        if self.down:
            raise PlatformError("no local stack is running from .state/local: start it with `splitstack up`")
        if component == "workers":
            parts = [s for n, s in self.states.items() if n.startswith("worker-")]
            return ComponentState("workers", "running", all(p.healthy for p in parts),
                                  f"{sum(p.healthy for p in parts)}/{len(parts)} healthy")
        return self.states[component]

    def units(self, component: str) -> list[str]:
        return sorted(n for n in self.states if n.startswith("worker-"))

    def logs(self, component: str, tail_lines: int = 200) -> str:
        return ""

    def http(self, component, method, path, json_body=None, timeout_s=30.0) -> HttpResult:
        return self.completion

    def nodes(self):
        return []


def _ok(name: str, detail: str = "HTTP 200") -> ComponentState:
    return ComponentState(name, "running", True, detail)


def _states(**over: ComponentState) -> dict[str, ComponentState]:
    base = {"server-vlm": _ok("server-vlm"), "queue": _ok("queue", "PONG"),
            "worker-0": _ok("worker-0"), "worker-1": _ok("worker-1")}
    return {**base, **over}


def _diagnose(tmp_path: Path, platform, spec=None):
    spec = spec or platform.spec
    ctx = ActionContext(spec=spec, platform=platform, audit=AuditLog(tmp_path / "audit.jsonl", time.time),
                        actor="oncall@test", safety=SafetySettings(), use_real_nvml=False)
    return invoke(ctx, "diagnose", {"gpu": False})


def test_a_hung_server_is_hung_not_workers_down(tmp_path: Path) -> None:
    spec = load_stack("local", overrides=SIM2)
    unready = ComponentState("worker-0", "running", False, BREAKER)
    report = _diagnose(tmp_path, LocalFake(spec, _states(**{"worker-0": unready}),
                                           HttpResult(0, "ReadTimeout: timed out")))
    assert report.case == "server-hung", report.render()
    assert report.next_steps[0].startswith("runbook restart-server --force")
    assert not any("restart-workers" in n for n in report.next_steps)
    assert any("waiting on the inference server, not a worker fault" in e for e in report.evidence)
    assert any("3 got no answer in 8 s" in e for e in report.evidence)


def test_a_503_storm_is_server_errors_with_its_answer_as_evidence(tmp_path: Path) -> None:
    spec = load_stack("local", overrides=SIM2)
    report = _diagnose(tmp_path, LocalFake(spec, _states(), HttpResult(503, "injected fault")))
    assert report.case == "server-errors", report.render()
    assert any("answered HTTP 503: injected fault" in e for e in report.evidence)


def test_a_killed_worker_starting_again_needs_no_restart_and_a_dead_one_does(tmp_path: Path) -> None:
    spec = load_stack("local", overrides=SIM2)
    starting = ComponentState("worker-1", "starting", False, "ConnectError: refused",
                              exit_reason="signal 9 (SIGKILL)", restarts=1)
    report = _diagnose(tmp_path, LocalFake(spec, _states(**{"worker-1": starting})))
    assert report.case == "workers-starting" and report.next_steps == [], report.render()
    fatal = ComponentState("worker-1", "crashloop", False, "ConnectError: refused", failed=True)
    report = _diagnose(tmp_path, LocalFake(spec, _states(**{"worker-1": fatal})))
    assert report.case == "workers-down" and report.next_steps == ["runbook restart --component worker-1"]


def test_the_queue_down_is_named_and_its_waiting_workers_are_not_blamed(tmp_path: Path) -> None:
    spec = load_stack("local", overrides=SIM2)
    redis_wait = ComponentState("worker-0", "running", False, "HTTP 503: redis: ConnectionError")
    stopped = ComponentState("queue", "stopped", False, "redis: Connection refused")
    report = _diagnose(tmp_path, LocalFake(spec, _states(queue=stopped, **{"worker-0": redis_wait})))
    assert report.case == "queue-down", report.render()
    assert report.next_steps == ["runbook restart --component queue"]


def test_no_stack_running_says_start_it(tmp_path: Path) -> None:
    spec = load_stack("local", overrides=SIM2)
    report = _diagnose(tmp_path, LocalFake(spec, {}, down=True))
    assert report.case == "stack-down" and report.next_steps == ["splitstack up --stack local"]


def test_monolithic_has_no_server_to_check(tmp_path: Path) -> None:
    split = load_stack("local", overrides=SIM2)
    mono = load_stack("local", overrides={**SIM2, "deployment_mode": "monolithic",
                                          "worker_pool.in_process.backend": "private-server"})
    states = _states()
    del states["server-vlm"]  # `state("server-vlm")` would raise KeyError: it is not running
    report = _diagnose(tmp_path, LocalFake(mono, states), spec=split)  # the context's spec is split
    assert report.case == "healthy", report.render()
    assert any("deployment_mode monolithic" in e for e in report.evidence)


def test_completions_slow_behind_a_backlog_are_not_a_hang(tmp_path: Path) -> None:
    from runbooks.diagnose.signals import Signals

    class Prom:
        def custom_query(self, query: str, params=None):
            value = 80 if "num_requests_waiting" in query else 1 if 'up{job="inference-server"}' in query else None
            return [] if value is None else [{"metric": {}, "value": [0, str(value)]}]

    spec = load_stack("local", overrides=SIM2)
    platform = LocalFake(spec, _states(), HttpResult(0, "ReadTimeout: timed out"))
    ctx = ActionContext(spec=spec, platform=platform, audit=AuditLog(tmp_path / "audit.jsonl", time.time),
                        actor="oncall@test", safety=SafetySettings(), use_real_nvml=False,
                        prometheus=Signals("http://prom.test", client=Prom()))
    report = invoke(ctx, "diagnose", {"gpu": False})
    assert report.case == "queue-backlog", report.render()
    assert any("waited behind 80 waiting requests" in e for e in report.evidence)
