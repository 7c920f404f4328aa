"""restart-server, update-hf-token, drain-gpu-node, gpu-node-failure on the fake cluster."""

from __future__ import annotations

import json

from runbooks.registry import invoke

SERVER = "mineru-vlm"


def test_restart_dry_run_prints_plan_and_changes_nothing(make_ctx, kube):
    kube.crash(SERVER, "OOMKilled")
    report = invoke(make_ctx(), "restart-server", {})
    assert report.outcome == "planned"
    assert [s.verb for s in report.plan] == ["restart", "check"]
    assert "OOMKilled" in report.evidence[0]
    assert "add --apply" in report.render()
    assert kube.changes() == []


def test_restart_apply_restarts_then_second_run_is_noop(make_ctx, kube):
    kube.crash(SERVER, "OOMKilled")
    report = invoke(make_ctx(apply=True), "restart-server", {})
    assert report.outcome == "applied", report.render()
    assert report.case == "server-down-oom"
    patch = kube.changes()[0]
    assert patch[0] == "patch_deployment" and patch[1][0] == SERVER
    assert "kubectl.kubernetes.io/restartedAt" in json.dumps(patch[1][1])
    assert any("gpu_memory_utilization=0.85" in n for n in report.next_steps)
    again = invoke(make_ctx(apply=True), "restart-server", {})
    assert again.outcome == "noop" and "healthy" in again.summary
    assert len(kube.changes()) == 1


def test_restart_rate_limit_refuses_the_fourth(make_ctx, kube):
    for _ in range(3):
        kube.crash(SERVER, "Error")
        assert invoke(make_ctx(apply=True), "restart-server", {}).outcome == "applied"
    kube.crash(SERVER, "Error")
    report = invoke(make_ctx(apply=True), "restart-server", {})
    assert report.outcome == "refused"
    assert "restarted 3 times in the last 30 min (limit 3" in report.summary
    assert "runbook diagnose" in report.summary


def test_restart_refuses_a_cuda_crash_and_names_the_drain(make_ctx, kube):
    kube.crash(SERVER, "Error", log="RuntimeError: CUDA error: an illegal memory access was encountered")
    report = invoke(make_ctx(apply=True), "restart-server", {})
    assert report.outcome == "refused"
    assert "cuda-error" in report.summary and "runbook drain-gpu-node" in report.summary
    assert kube.changes() == []


def test_restart_refuses_a_server_not_in_the_spec(make_ctx, kube):
    report = invoke(make_ctx(apply=True), "restart-server", {"server": "other"})
    assert report.outcome == "refused"
    assert "server 'other' is not in the spec of stack 'prod' (servers: mineru-vlm, qwen-vl)" in report.summary


def test_restart_refuses_when_the_live_deployment_is_not_the_specs(make_ctx, kube):
    kube.deployments[SERVER]["labels"] = {"app.kubernetes.io/name": "something-else"}
    report = invoke(make_ctx(apply=True), "restart-server", {})
    assert report.outcome == "refused"
    assert "does not match the spec" in report.summary and f"deployment splitstack/{SERVER}" in report.summary


def test_drain_gpu_node_cordons_and_moves_the_server(make_ctx, kube):
    kube.crash(SERVER, "Error", log="torch.cuda: CUDA error: unknown error")
    node = kube.pods[next(p for p, v in kube.pods.items() if v["deployment"] == SERVER)]["node"]
    report = invoke(make_ctx(apply=True), "drain-gpu-node", {})
    assert report.outcome == "applied", report.render()
    assert ("patch_node", (node, {"spec": {"unschedulable": True}})) in kube.changes()
    assert any(c[0] == "evict" for c in kube.changes())
    moved = [v["node"] for v in kube.pods.values() if v["deployment"] == SERVER]
    assert moved and node not in moved
    assert invoke(make_ctx(apply=True), "drain-gpu-node", {"node": node}).outcome == "noop"


def test_drain_refuses_without_a_spare_gpu_node(make_ctx, kube):
    kube.crash(SERVER, "Error", log="CUDA error: unknown error")
    for name in kube.nodes:
        if name != "gpu-0":
            kube.nodes[name]["unschedulable"] = True
    report = invoke(make_ctx(apply=True), "drain-gpu-node", {"node": "gpu-0"})
    assert report.outcome == "refused"
    assert "no other ready, schedulable GPU node" in report.summary and "Pending" in report.summary


def test_gpu_node_failure_force_deletes_pods_on_the_lost_node(make_ctx, kube):
    node = kube.pods[next(p for p, v in kube.pods.items() if v["deployment"] == SERVER)]["node"]
    kube.nodes[node]["ready"] = False
    report = invoke(make_ctx(apply=True), "gpu-node-failure", {})
    assert report.outcome == "applied", report.render()
    assert any(c[0] == "delete_pod" and c[1][1] == 0 for c in kube.changes())
    assert kube.nodes[node]["unschedulable"] is True
    assert invoke(make_ctx(apply=True), "gpu-node-failure", {}).outcome == "noop"


def test_update_hf_token_needs_the_token_in_the_environment(make_ctx, kube, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    kube.crash(SERVER, "Error", log="OSError: Failed to load model from Hugging Face: 401 Client Error")
    report = invoke(make_ctx(apply=True), "update-hf-token", {})
    assert report.outcome == "refused"
    assert "export HF_TOKEN=<token>" in report.summary


def test_update_hf_token_stores_it_and_restarts(make_ctx, kube, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_new")
    kube.crash(SERVER, "Error", log="huggingface_hub.errors.GatedRepoError: 401 Client Error")
    report = invoke(make_ctx(apply=True), "update-hf-token", {})
    assert report.outcome == "applied", report.render()
    assert "hf_new" not in report.render()  # never printed
    assert kube.secrets["splitstack-hf-token"]["token"] == "aGZfbmV3"
    assert invoke(make_ctx(apply=True), "update-hf-token", {}).outcome == "noop"


def test_audit_log_records_who_when_what_and_result(make_ctx, kube, tmp_path):
    kube.crash(SERVER, "OOMKilled")
    invoke(make_ctx(), "restart-server", {"reason": "page 123"})
    invoke(make_ctx(apply=True), "restart-server", {"reason": "page 123"})
    invoke(make_ctx(apply=True), "nope", {})
    lines = (tmp_path / "audit.jsonl").read_text().splitlines()
    records = [json.loads(x) for x in lines]
    assert [r["outcome"] for r in records] == ["planned", "applied", "refused"]
    first = records[1]
    assert first["actor"] == "oncall@test" and first["action"] == "restart-server"
    assert first["params"]["reason"] == "page 123" and first["apply"] is True
    assert first["plan"][0].startswith("restart server-mineru-vlm")
    assert first["restarted"] == ["server-mineru-vlm"] and first["time"].startswith("2027-01-15")
    assert "unknown action 'nope'" in records[2]["summary"]
