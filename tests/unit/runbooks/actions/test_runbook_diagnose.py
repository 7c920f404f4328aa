"""diagnose on the fake cluster with Prometheus answers from a fake PrometheusConnect."""

from __future__ import annotations

import pytest
import requests

from runbooks.diagnose.signals import Signals, load_thresholds
from runbooks.diagnose.signatures import load_signatures, match_logs
from runbooks.model import PlatformError
from runbooks.registry import invoke

SERVER = "mineru-vlm"


class FakeProm:
    """custom_query answers by the metric a query reads (the first one in VALUES it contains)."""

    def __init__(self, values: dict[str, float], fail: Exception | None = None) -> None:
        self.values, self.fail, self.queries = values, fail, []

    def custom_query(self, query: str, params=None):
        self.queries.append(query)
        if self.fail:
            raise self.fail
        for metric, value in self.values.items():
            if metric in query:
                return [{"metric": {"instance": "w0"}, "value": [0, str(value)]}]
        return []


def signals(**values: float) -> Signals:
    names = {"up_server": 'up{job="inference-server"}', "waiting": "vllm:num_requests_waiting",
             "running": "vllm:num_requests_running", "kv": "vllm:kv_cache_usage_perc",
             "ttft": "time_to_first_token", "breaker": "mineru_vllm_circuit_breaker_state"}
    return Signals("http://prom.test:9090", client=FakeProm({names[k]: v for k, v in values.items()}))


def test_healthy(make_ctx):
    report = invoke(make_ctx(prometheus=signals(up_server=1, waiting=0, running=3, kv=0.2)), "diagnose", {})
    assert report.case == "healthy", report.render()


def test_server_down_oom_names_restart_with_evidence(make_ctx, kube):
    kube.crash(SERVER, "OOMKilled")
    report = invoke(make_ctx(prometheus=signals(up_server=0)), "diagnose", {})
    assert report.case == "server-down-oom"
    assert report.next_steps[0] == "runbook restart-server"
    assert any("last exit: OOMKilled" in e for e in report.evidence)


@pytest.mark.parametrize("log,case,command", [
    ("RuntimeError: CUDA error: an illegal memory access was encountered", "server-crashloop-cuda",
     "runbook drain-gpu-node"),
    ("OSError: Failed to load model from Hugging Face (401 Client Error)", "server-down-model-load",
     "runbook update-hf-token"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "server-down-oom",
     "runbook restart-server"),
])
def test_log_signatures_pick_the_case(make_ctx, kube, log, case, command):
    kube.crash(SERVER, "Error", log=f"INFO starting\n{log}\nINFO exiting")
    report = invoke(make_ctx(), "diagnose", {})
    assert report.case == case, report.render()
    assert report.next_steps[0] == command
    assert any(log[:40] in e for e in report.evidence)


def test_queue_backlog_recommends_lower_worker_concurrency(make_ctx):
    # prod: 8 workers x 16 in flight = 128 < 256 batch slots, and running is at the cap: the
    # batch size, not the workers, is the limit.
    report = invoke(make_ctx(prometheus=signals(up_server=1, waiting=80, running=256, kv=0.4)), "diagnose", {})
    assert report.case == "queue-backlog", report.render()
    assert report.next_steps[0].startswith("runbook tune --set max_num_seqs=512")
    assert any("vllm:num_requests_waiting = 80 > 50" in e for e in report.evidence)


def test_queue_backlog_with_oversubscribed_workers_lowers_concurrency(make_ctx, prod_spec):
    from runbooks.platforms.specpatch import effective_spec

    ctx = make_ctx(prometheus=signals(up_server=1, waiting=80, running=96, kv=0.4))
    ctx.spec = effective_spec(prod_spec, {"inference_servers.0.max_num_seqs": 96})
    report = invoke(ctx, "diagnose", {})
    assert report.next_steps[0].startswith("runbook tune --set concurrency_per_worker=12")
    assert "workers offer 128 in-flight requests for 96 batch slots" in report.next_steps[0]


def test_threshold_override_and_unknown_threshold(make_ctx):
    report = invoke(make_ctx(prometheus=signals(up_server=1, waiting=6, running=4, kv=0.1)), "diagnose",
                    {"thresholds": {"queue_waiting_max": "5"}})
    assert report.case == "queue-backlog"
    bad = invoke(make_ctx(), "diagnose", {"thresholds": {"queue_depth": "5"}})
    assert bad.outcome == "refused" and "unknown threshold 'queue_depth'" in bad.summary


def test_breaker_open_with_server_up(make_ctx):
    report = invoke(make_ctx(prometheus=signals(up_server=1, waiting=0, breaker=2)), "diagnose", {})
    assert report.case == "breaker-stuck-open" and report.next_steps[0] == "runbook restart-workers"


def test_high_ttft_without_backlog_points_at_large_pdfs(make_ctx):
    report = invoke(make_ctx(prometheus=signals(up_server=1, waiting=0, ttft=12.0)), "diagnose", {})
    assert report.case == "large-pdfs" and report.next_steps[0] == "runbook slow-pdfs"


def test_kv_cache_full(make_ctx):
    report = invoke(make_ctx(prometheus=signals(up_server=1, waiting=0, kv=0.97)), "diagnose", {})
    assert report.case == "kv-fragmentation"
    assert report.next_steps[0].startswith("runbook restart-server --force")


def test_lost_gpu_from_the_probe(make_ctx, make_nvml, h100):
    h100.lost = True
    ctx = make_ctx()
    ctx.nvml = make_nvml([h100])
    report = invoke(ctx, "diagnose", {})
    assert report.case == "server-crashloop-cuda", report.render()


def test_unreachable_prometheus_is_evidence_not_a_crash(make_ctx):
    prom = Signals("http://prom.test:9090", client=FakeProm({}, fail=requests.exceptions.ConnectionError("refused")))
    report = invoke(make_ctx(prometheus=prom), "diagnose", {})
    assert report.outcome == "report" and report.case == "healthy"
    assert any("Prometheus at http://prom.test:9090 is unreachable (ConnectionError)" in e for e in report.evidence)
    with pytest.raises(PlatformError, match="pass --prometheus-url"):
        prom.snapshot("5m")


def test_unreachable_cluster(make_ctx, kube):
    from urllib3.exceptions import MaxRetryError

    kube.errors["read_namespaced_deployment"] = MaxRetryError(None, "https://k8s", "timeout")
    report = invoke(make_ctx(), "diagnose", {})
    assert report.case == "platform-unreachable"
    assert any("the cluster is unreachable" in e for e in report.evidence)


def test_signatures_are_valid_and_cite_a_source():
    sigs = load_signatures()
    assert len({s.id for s in sigs}) == len(sigs)
    assert all(s.source and s.meaning for s in sigs)
    assert [m.signature.id for m in match_logs("NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus")] == ["xid"]
    assert set(load_thresholds()) >= {"queue_waiting_max", "kv_usage_max", "ttft_p95_max_s"}
