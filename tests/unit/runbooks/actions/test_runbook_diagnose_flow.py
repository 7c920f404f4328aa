"""diagnose against its evidence: a stall, a hung or failing server, a breaker recovering vs stuck,
the queue counted once, OOM only with evidence, and no next step the target would refuse."""

from __future__ import annotations

import pytest

from contract.spec_loader import load_stack
from runbooks.diagnose.advice import memory_knob, refusal
from runbooks.diagnose.signals import Signals, queries
from runbooks.names import Action
from runbooks.platforms.oom import kernel_oom_pids, oom_evidence
from runbooks.registry import invoke
from runbooks.suggestion import Suggestion

SERVER = "mineru-vlm"


class QueryProm:
    """custom_query answers by the name of the snapshot query (signals.queries) it was given."""

    def __init__(self, values: dict[str, float]) -> None:
        by_query = {q: values[name] for name, q in queries("5m", "2m").items() if name in values}
        self.by_query = by_query

    def custom_query(self, query: str, params=None):
        if query in self.by_query:
            return [{"metric": {}, "value": [0, str(self.by_query[query])]}]
        return []


def prom(**values: float) -> Signals:
    return Signals("http://prom.test:9090", client=QueryProm({"server_up": 1, "waiting": 0, **values}))


def test_the_queue_is_counted_once_not_summed_over_workers():
    q = queries("5m")
    assert q["queue_lag"].startswith("max(") and q["queue_pending"].startswith("max(")


def test_a_hung_server_is_named_with_its_timeouts(make_ctx):
    report = invoke(make_ctx(prometheus=prom(queue_lag=12, queue_pending=4, finished_recent=0,
                                             timeouts_recent=30, answered_recent=0, breaker_max=2,
                                             deadline_s=5.2, requests_recent=40)), "diagnose", {})
    assert report.case == "server-hung", report.render()
    assert any("30 request(s) timed out in the last 2m and none got an answer (deadline 5.2 s)" in e
               for e in report.evidence)
    assert any("16 document(s) waiting" in e for e in report.evidence)
    assert report.next_steps[0].startswith("runbook restart-server --force")


def test_requests_past_their_deadline_are_a_hang_too(make_ctx):
    report = invoke(make_ctx(prometheus=prom(oldest_request_s=300, deadline_s=6)), "diagnose", {})
    assert report.case == "server-hung"
    assert any("a request has waited 300 s, past its deadline of 6 s" in e for e in report.evidence)


def test_a_failing_server_is_named(make_ctx):
    report = invoke(make_ctx(prometheus=prom(errors_recent=12, answered_recent=0, breaker_max=2,
                                             requests_recent=12)), "diagnose", {})
    assert report.case == "server-errors", report.render()


def test_an_open_breaker_within_its_recovery_window_is_not_stuck(make_ctx):
    # Open, but not for the whole window (the server just came back): recovering, no restart.
    report = invoke(make_ctx(prometheus=prom(breaker_max=2, breaker_open_all_along=0, server_up_all_along=1,
                                             requests_recent=3, answered_recent=2)), "diagnose", {})
    assert report.case == "breaker-recovering", report.render()
    assert "runbook restart-workers" not in report.next_steps


def test_a_breaker_open_all_along_with_no_request_sent_is_stuck(make_ctx):
    report = invoke(make_ctx(prometheus=prom(breaker_max=2, breaker_open_all_along=2, server_up_all_along=1,
                                             requests_recent=0)), "diagnose", {})
    assert report.case == "breaker-stuck-open" and report.next_steps[0] == "runbook restart-workers"


def test_documents_waiting_and_none_finishing_is_a_stall(make_ctx):
    report = invoke(make_ctx(prometheus=prom(queue_lag=5, queue_pending=2, finished_recent=0, answered_recent=3,
                                             breaker_max=0)), "diagnose", {})
    assert report.case == "pipeline-stalled", report.render()
    assert any("7 document(s) waiting (lag 5, pending 2) and none finished in the last 2m" in e
               for e in report.evidence)


def test_a_sigkill_without_oom_evidence_is_not_an_oom(make_ctx, kube):
    kube.crash(SERVER, "Error")  # exit 137 from a kill -9: the kubelet does not say OOMKilled
    report = invoke(make_ctx(prometheus=prom(server_up=0)), "diagnose", {})
    assert report.case == "server-down", report.render()
    assert not any("gpu_memory_utilization" in n for n in report.next_steps)


def test_kernel_log_oom_lines_name_the_pid():
    text = ("[ 10.0] Out of memory: Killed process 4242 (python) total-vm:1kB\n"
            "[ 11.0] oom-kill:constraint=CONSTRAINT_MEMCG,task=vllm,pid=77,uid=0\n[ 12.0] other")
    assert sorted(kernel_oom_pids(text)) == [77, 4242]
    assert oom_evidence(4242, text).found and not oom_evidence(4243, text).found
    assert "not readable" in oom_evidence(4242, None).detail


def test_next_steps_are_only_what_the_target_accepts():
    local = load_stack("local", overrides={"inference_servers.0.engine": "sim"})
    prod = load_stack("prod")
    gpu_fraction = Suggestion(action=Action.TUNE, params={"set": {"gpu_memory_utilization": "0.85"}},
                              comment="if it recurs")
    assert "one machine" in refusal(local, "local", Suggestion(action=Action.DRAIN_GPU_NODE))
    assert "its own port" in refusal(local, "local", Suggestion(action=Action.SCALE,
                                                                params={"component": "workers", "replicas": 4}))
    assert refusal(local, "local", gpu_fraction)
    assert refusal(local, "local", Suggestion(action=Action.RESTART_SERVER)) is None
    assert refusal(prod, "kubernetes", gpu_fraction) is None
    assert refusal(prod, "kubernetes", Suggestion(action=Action.TUNE, params={"set": {"kv_cache_space_gib": "1"}}))
    assert refusal(prod, "kubernetes", "splitstack up --stack prod") is None  # a step in words: nothing to check
    assert memory_knob(local, local.worker_server, "local") is None  # the simulator holds no model
    vllm_local = load_stack("local")
    knob = memory_knob(vllm_local, vllm_local.worker_server, "local")
    assert knob is not None and knob.command().startswith("runbook tune --set kv_cache_space_gib=")


@pytest.mark.parametrize("engine", ["sim", "vllm"])
def test_restart_is_accepted_everywhere(engine):
    spec = load_stack("local", overrides={"inference_servers.0.engine": engine})
    assert refusal(spec, "local", Suggestion(action=Action.RESTART, params={"component": "queue"})) is None


def test_diagnose_never_leaves_a_contradiction_unexplained(make_ctx):
    """A spec read with 0 workers beside Prometheus seeing 2 (the stack was started with other
    values): the report says the spec read is not the running one instead of 'no workers'."""
    from dataclasses import replace

    ctx = make_ctx(prometheus=prom(workers_up=2))
    pool = ctx.spec.worker_pool.model_copy(update={"replicas": 0})
    report = invoke(replace(ctx, spec=ctx.spec.model_copy(update={"worker_pool": pool})), "diagnose", {})
    assert any("Prometheus sees 2 worker(s) up although the spec read says worker_pool.replicas = 0" in e
               for e in report.evidence), report.render()
