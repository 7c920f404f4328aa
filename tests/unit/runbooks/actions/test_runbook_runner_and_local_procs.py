"""The plan runner's compensation paths, and how supervisord's log is read for exit reasons."""

from __future__ import annotations

from pathlib import Path

from runbooks.actions.runner import Step, StepFailed, run_plan
from runbooks.platforms.local_procs import exit_reason, restart_count


def _fail(msg: str):
    def f() -> str:
        raise StepFailed(msg)
    return f


def test_failure_undoes_completed_steps_in_reverse_including_the_failing_one(make_ctx):
    log: list[str] = []
    steps = [Step("set", "a", "", lambda: log.append("do a"), undo=lambda: log.append("undo a")),
             Step("set", "b", "", lambda: log.append("do b"), undo=lambda: log.append("undo b")),
             Step("check", "b", "", _fail("b is not healthy"))]
    report = run_plan(make_ctx(apply=True), "x", steps, summary="s")
    assert report.outcome == "rolled_back"
    assert log == ["do a", "do b", "undo b", "undo a"]
    assert report.done[-2:] == ["undo set b", "undo set a"]


def test_a_failing_undo_is_reported_as_needing_a_human(make_ctx):
    steps = [Step("set", "a", "", lambda: None, undo=_fail("cluster went away")),
             Step("check", "a", "", _fail("not healthy"))]
    report = run_plan(make_ctx(apply=True), "x", steps, summary="s")
    assert report.outcome == "failed"
    assert "compensation failed too: the deployment needs a human" in report.summary
    assert "FAILED undo set a: cluster went away" in report.done


def test_a_step_marked_not_to_compensate_keeps_earlier_changes(make_ctx):
    undone: list[str] = []
    steps = [Step("cordon", "n1", "", lambda: None, undo=lambda: undone.append("uncordon")),
             Step("check", "srv", "", _fail("still pending"), compensate=False)]
    report = run_plan(make_ctx(apply=True), "x", steps, summary="s")
    assert report.outcome == "failed" and undone == []
    assert "the changes before it are kept on purpose" in report.summary


def test_dry_run_executes_nothing(make_ctx):
    ran: list[str] = []
    report = run_plan(make_ctx(), "x", [Step("set", "a", "v", lambda: ran.append("a"))], summary="set a")
    assert report.outcome == "planned" and ran == [] and report.summary == "would set a"


SUPERVISORD_LOG = """\
2026-11-26 03:00:01,000 INFO spawned: 'server-vlm' with pid 100
2026-11-26 03:00:02,000 INFO success: server-vlm entered RUNNING state, process has stayed up for > than 1 seconds (startsecs)
2026-11-26 03:00:09,000 WARN exited: server-vlm (terminated by SIGKILL; not expected)
2026-11-26 03:00:10,000 INFO spawned: 'server-vlm' with pid 200
2026-11-26 03:00:12,000 WARN exited: server-vlm (exit status 70; not expected)
2026-11-26 03:00:12,100 INFO spawned: 'worker-0' with pid 300
2026-11-26 03:00:12,500 WARN exited: worker-0 (terminated by SIGKILL; not expected)
"""  # noqa: E501  (supervisord's own lines, verbatim)


def test_exit_reason_is_the_programs_last_exit_line(tmp_path: Path):
    log = tmp_path / "supervisord.log"
    log.write_text(SUPERVISORD_LOG)
    assert exit_reason({"name": "server-vlm", "exitstatus": 70}, log) == ("exit status 70; not expected", 70)
    # A SIGKILL is an OOM kill only when the kernel log names the pid.
    oom = "[ 8399.1] Out of memory: Killed process 300 (python) total-vm:9000kB, anon-rss:8000kB"
    reason, _ = exit_reason({"name": "worker-0", "exitstatus": -1}, log, lambda: oom)
    assert reason == f"OOMKilled: terminated by SIGKILL; not expected (kernel log: {oom})"
    reason, _ = exit_reason({"name": "worker-0", "exitstatus": -1}, log,
                            lambda: "[ 1.0] Out of memory: Killed process 301 (python)")
    assert reason == ("terminated by SIGKILL; not expected (the kernel log reports no OOM kill of pid 300: "
                      "killed by a signal from a person or a program (kill -9, a stop timeout))")
    reason, _ = exit_reason({"name": "worker-0", "exitstatus": -1}, log, lambda: None)
    assert reason.startswith("terminated by SIGKILL; not expected (kernel log not readable here (dmesg): "
                             "OOM of pid 300 not confirmed")
    assert exit_reason({"name": "queue", "exitstatus": 0, "spawnerr": "can't find command"}, log) == (
        "spawn error: can't find command", 0)
    assert restart_count(log, "server-vlm") == 1 and restart_count(log, "queue") == 0


def test_a_stack_started_with_another_engine_is_not_the_specs():
    from contract.spec_loader import load_stack
    from runbooks.platforms.local_procs import program_commands, server_mismatches
    from runbooks.platforms.specpatch import effective_spec

    conf = ("[program:queue]\ncommand=/usr/bin/redis-server --port 1\n\n[program:server-vlm]\n"
            "command=/venv/bin/python -m splitstack.cli.sim serve --port 18000 --profile instant "
            "--max-num-seqs 32 --max-model-len 2048\n")
    commands = program_commands(conf)
    spec = load_stack("local")
    assert server_mismatches(spec, commands) == [
        "server-vlm runs engine 'sim', the spec says 'vllm' (started with --engine sim? pass "
        "--spec-override inference_servers.0.engine=sim)"]
    sim = effective_spec(spec, {"inference_servers.0.engine": "sim"})
    assert server_mismatches(sim, commands) == []
    tuned = effective_spec(sim, {"inference_servers.0.max_num_seqs": 8})
    assert server_mismatches(tuned, commands) == ["server-vlm runs --max-num-seqs 32, the spec says 8"]
