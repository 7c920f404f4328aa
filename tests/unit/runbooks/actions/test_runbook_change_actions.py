"""tune, scale, upgrade-server (with automatic rollback), patch-workers, restart-workers."""

from __future__ import annotations

from runbooks.registry import invoke

SERVER = "mineru-vlm"


def _args(kube, name=SERVER):
    return kube.deployments[name]["args"]


def test_tune_sets_the_vllm_flag_and_is_idempotent(make_ctx, kube):
    report = invoke(make_ctx(apply=True), "tune", {"set": {"max_num_batched_tokens": "32768"}})
    assert report.outcome == "applied", report.render()
    args = _args(kube)
    assert args[args.index("--max-num-batched-tokens") + 1] == "32768"
    assert invoke(make_ctx(apply=True), "tune", {"set": {"max_num_batched_tokens": "32768"}}).outcome == "noop"


def test_tune_worker_concurrency_rewrites_the_spec_the_workers_read(make_ctx, kube):
    import json

    from contract import naming

    report = invoke(make_ctx(apply=True), "tune", {"set": {"concurrency_per_worker": "2"}})
    assert report.outcome == "applied", report.render()
    text = kube.config_maps["worker-spec"][naming.WORKER_SPEC_KEY]
    assert json.loads(text)["worker_pool"]["concurrency_per_worker"] == 2
    # ... and the workers roll onto it: the digest in their template is the new document's.
    assert kube.deployments["worker"]["annotations"][naming.WORKER_SPEC_DIGEST_ANNOTATION] == \
        naming.spec_digest(text)


def test_tune_rejects_what_the_spec_rejects(make_ctx, kube):
    report = invoke(make_ctx(apply=True), "tune", {"set": {"gpu_memory_utilization": "1.5"}})
    assert report.outcome == "refused"
    assert "inference_servers.0.gpu_memory_utilization" in report.summary
    assert "less than or equal to 0.98" in report.summary and "nothing was changed" in report.summary
    assert kube.changes() == []


def test_tune_refuses_unknown_and_mixed_knobs(make_ctx):
    report = invoke(make_ctx(), "tune", {"set": {"max_num_seqs": "8", "concurrency_per_worker": "2"}})
    assert report.outcome == "refused" and "cannot tune concurrency_per_worker, max_num_seqs together" in report.summary
    empty = invoke(make_ctx(), "tune", {"set": {}})
    assert empty.outcome == "refused" and "give at least one --set KNOB=VALUE" in empty.summary


def test_tune_that_breaks_the_server_is_rolled_back(make_ctx, kube):
    kube.breaks = lambda image, args: "--max-num-seqs" in args and args[args.index("--max-num-seqs") + 1] == "512"
    report = invoke(make_ctx(apply=True), "tune", {"set": {"max_num_seqs": "512"}})
    assert report.outcome == "rolled_back", report.render()
    args = _args(kube)
    assert args[args.index("--max-num-seqs") + 1] == "256"
    assert any(d.startswith("undo set") for d in report.done)


def test_upgrade_validates_and_keeps_a_good_version(make_ctx, kube):
    report = invoke(make_ctx(apply=True), "upgrade-server", {"to": {"image_tag": "v0.33.0"}})
    assert report.outcome == "applied", report.render()
    assert kube.deployments[SERVER]["image"] == "ghcr.io/splitstack/inference-server:v0.33.0"
    post = [c for c in kube.calls if c[0] == "proxy_post"]
    assert post and post[0][1][0] == f"{SERVER}:8000" and post[0][1][1] == "v1/chat/completions"
    assert post[0][1][2]["model"] == "mineru-vlm"


def test_upgrade_to_a_crashing_version_rolls_back(make_ctx, kube):
    report = invoke(make_ctx(apply=True), "upgrade-server", {"to": {"image_tag": "v0.33.0-broken"}})
    assert report.outcome == "rolled_back", report.render()
    assert "failed and will not become healthy" in report.summary
    assert kube.deployments[SERVER]["image"] == "ghcr.io/splitstack/inference-server:v0.32.0"


def test_upgrade_failing_test_inference_rolls_back(make_ctx, kube):
    kube.proxy["v1/chat/completions"] = (500, "")
    report = invoke(make_ctx(apply=True), "upgrade-server", {"to": {"image_tag": "v0.33.0"}})
    assert report.outcome == "rolled_back", report.render()
    assert "test inference: HTTP 500" in report.summary
    assert kube.deployments[SERVER]["image"] == "ghcr.io/splitstack/inference-server:v0.32.0"


def test_upgrade_refuses_when_the_server_cannot_be_reached_for_the_test(make_ctx, kube):
    kube.proxy["v1/models"] = (403, '{"kind":"Status","reason":"Forbidden"}')
    report = invoke(make_ctx(apply=True), "upgrade-server", {"to": {"image_tag": "v0.33.0"}})
    assert report.outcome == "refused"
    assert "GET /v1/models answers HTTP 403 before the upgrade" in report.summary
    assert kube.deployments[SERVER]["image"] == "ghcr.io/splitstack/inference-server:v0.32.0"


def test_upgrade_refuses_latest_and_knobs(make_ctx, kube):
    latest = invoke(make_ctx(apply=True), "upgrade-server", {"to": {"image_tag": "latest"}})
    assert latest.outcome == "refused" and "image tag 'latest' is not pinned" in latest.summary
    knob = invoke(make_ctx(apply=True), "upgrade-server", {"to": {"max_num_seqs": 4}})
    assert knob.outcome == "refused" and "use `runbook tune` for knobs" in knob.summary


def test_patch_workers_rolls_to_the_new_tag(make_ctx, kube):
    report = invoke(make_ctx(apply=True), "patch-workers", {"image_tag": "0.1.1-patched"})
    assert report.outcome == "applied", report.render()
    assert {p["image"] for p in kube.pods.values() if p["deployment"] == "worker"} == {
        "ghcr.io/splitstack/worker:0.1.1-patched"}
    assert invoke(make_ctx(apply=True), "patch-workers", {"image_tag": "0.1.1-patched"}).outcome == "noop"


def test_scale_server_is_bounded_by_the_gpu_pool(make_ctx, kube):
    report = invoke(make_ctx(apply=True), "scale", {"component": f"server-{SERVER}", "replicas": 3})
    assert report.outcome == "refused"
    assert "3 replicas need 3 GPUs, the pool has 2" in report.summary
    ok = invoke(make_ctx(apply=True), "scale", {"component": "workers", "replicas": 10})
    assert ok.outcome == "applied", ok.render()
    assert kube.deployments["worker"]["replicas"] == 10


class FakeSignals:
    url = "http://prometheus.test:9090"

    def __init__(self, breakers):
        self.breakers = breakers

    def breaker_states(self):
        return dict(self.breakers)


def test_restart_workers_refuses_while_the_server_is_down(make_ctx, kube):
    kube.crash(SERVER, "OOMKilled")
    report = invoke(make_ctx(apply=True, prometheus=FakeSignals({"w0": 2})), "restart-workers", {})
    assert report.outcome == "refused"
    assert "a worker restart cannot help; run `runbook restart-server` first" in report.summary


def test_restart_workers_refuses_while_the_server_fails_its_completions(make_ctx, kube):
    """A 503 storm: /health answers, every breaker is open, a worker restart cannot help."""
    kube.proxy["v1/chat/completions"] = (503, "injected fault")
    report = invoke(make_ctx(apply=True, prometheus=FakeSignals({"w0": 2, "w1": 2})), "restart-workers", {})
    assert report.outcome == "refused", report.render()
    assert "answers /health but not completions" in report.summary and "HTTP 503" in report.summary
    assert "runbook restart-server --force" in report.summary
    assert [c for c in kube.changes() if c[0] != "proxy_post"] == []


def test_restart_workers_resets_open_breakers(make_ctx, kube):
    signals = FakeSignals({"w0": 2, "w1": 0})
    ctx = make_ctx(apply=True, prometheus=signals)
    orig = ctx.platform.restart

    def restart(component):
        orig(component)
        signals.breakers = {"w0": 0, "w1": 0}  # a restarted worker starts with a closed breaker
    ctx.platform.restart = restart
    report = invoke(ctx, "restart-workers", {})
    assert report.outcome == "applied", report.render()
    assert "breaker state from Prometheus" in report.evidence[2] and "w0=open" in report.evidence[2]
    assert report.done[-1] == "check workers: no breaker open"
    assert invoke(make_ctx(apply=True, prometheus=signals), "restart-workers", {}).outcome == "noop"
