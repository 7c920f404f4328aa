"""The Kubernetes platform against the fake API: what it reads, and how API errors surface."""

from __future__ import annotations

import pytest
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import MaxRetryError

from runbooks.model import PlatformError, Refused
from runbooks.platforms.kubernetes import KubernetesPlatform
from runbooks.registry import invoke

SERVER = "server-mineru-vlm"


@pytest.fixture
def platform(prod_spec, kube):
    return KubernetesPlatform(prod_spec, kube, kube, context="fake")


def test_state_reports_crashloop_and_oom_exit_reason(platform, kube):
    kube.crash("mineru-vlm", "OOMKilled")
    state = platform.state(SERVER)
    assert state.state == "crashloop" and not state.healthy
    assert state.exit_reason == "OOMKilled" and state.exit_code == 137 and state.restarts == 3
    assert state.nodes == ["gpu-0"]


def test_logs_of_a_crashed_pod_are_the_previous_containers(platform, kube):
    kube.crash("mineru-vlm", "Error", log="CUDA error: unknown error")
    assert "CUDA error" in platform.logs(SERVER)
    assert ("log", (next(p for p in kube.pods if p.startswith("mineru-vlm")), True)) in kube.calls


def test_settings_read_the_rendered_args_and_the_workers_spec(platform):
    assert platform.settings(SERVER) == {"image_tag": "v0.32.0", "max_num_batched_tokens": 16384,
                                         "max_num_seqs": 256, "max_model_len": 16384,
                                         "gpu_memory_utilization": 0.92}
    assert platform.settings("workers") == {"image_tag": "0.1.0", "concurrency_per_worker": 16,
                                            "jobs_per_worker": 2, "max_retries": 3,
                                            "request_timeout_s": 600.0}


def test_settings_without_a_runtime_home_are_refused(platform):
    with pytest.raises(Refused, match="circuit_breaker.recovery_timeout_s is not a run-time setting"):
        platform.apply_settings("workers", {"circuit_breaker.recovery_timeout_s": 30})


def test_forbidden_is_a_permissions_refusal(platform, kube):
    kube.errors["read_namespaced_deployment"] = ApiException(status=403, reason="Forbidden")
    with pytest.raises(Refused, match="missing permissions: the cluster refused to read deployment "
                                      "mineru-vlm in namespace splitstack"):
        platform.state(SERVER)


def test_unreachable_cluster_is_a_platform_error(platform, kube):
    kube.errors["read_namespaced_deployment"] = MaxRetryError(None, "https://10.0.0.1:6443", "timed out")
    with pytest.raises(PlatformError, match="the cluster is unreachable .* check the kube context 'fake'"):
        platform.state(SERVER)


def test_unreachable_cluster_changes_nothing_and_is_reported(make_ctx, kube):
    kube.errors["read_namespaced_deployment"] = MaxRetryError(None, "https://10.0.0.1:6443", "timed out")
    report = invoke(make_ctx(apply=True), "restart-server", {})
    assert report.outcome == "failed" and "platform error, nothing more was changed" in report.summary
    assert kube.changes() == []


def test_missing_deployment_names_pulumi_up(platform, kube):
    del kube.deployments["mineru-vlm"]
    with pytest.raises(Refused, match="not found in namespace splitstack .*`pulumi up`"):
        platform.state(SERVER)


def test_http_proxy_error_is_a_status_not_an_exception(platform, kube):
    kube.proxy["v1/chat/completions"] = (503, "")
    result = platform.http(SERVER, "POST", "/v1/chat/completions", {"model": "x"})
    assert result.status == 503


def test_nodes_read_readiness_and_gpus(platform, kube):
    kube.nodes["gpu-1"]["ready"] = False
    nodes = {n.name: n for n in platform.nodes()}
    assert nodes["gpu-0"].ready and nodes["gpu-0"].gpu_allocatable == 1
    assert not nodes["gpu-1"].ready and "NodeStatusUnknown" in nodes["gpu-1"].conditions["Ready"]


def test_service_proxy_request_through_the_real_client(prod_spec):
    """The real ApiClient against a loopback HTTP server standing in for the API server."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from kubernetes import client

    seen: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server API
            body = self.rfile.read(int(self.headers["Content-Length"]))
            seen.append({"path": self.path, "auth": self.headers["Authorization"], "body": json.loads(body)})
            data = b'{"choices":[{"message":{"content":"hi"}}]}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        config = client.Configuration(host=f"http://127.0.0.1:{server.server_port}")
        config.api_key = {"authorization": "token-123"}
        config.api_key_prefix = {"authorization": "Bearer"}
        api = client.ApiClient(config)
        platform = KubernetesPlatform(prod_spec, client.CoreV1Api(api), client.AppsV1Api(api))
        result = platform.http(SERVER, "POST", "/v1/chat/completions", {"model": "mineru-vlm"})
    finally:
        server.shutdown()
    assert result.status == 200 and '"hi"' in result.text
    assert seen == [{"path": "/api/v1/namespaces/splitstack/services/mineru-vlm:8000/proxy/v1/chat/completions",
                     "auth": "Bearer token-123", "body": {"model": "mineru-vlm"}}]
