import json
from pathlib import Path

from contract.spec_loader import load_stack
from stack.components import BuildContext
from stack.paths import StackPaths
from stack.workers import worker_component


def test_worker_component_matches_the_stack_contract(tmp_path) -> None:
    spec = load_stack("local", overrides={"worker_pool.replicas": 2, "inference_servers.0.engine": "sim"})
    paths = StackPaths(tmp_path)
    ctx = BuildContext(spec, paths, Path.cwd(), api_key="secret", python="/py")
    c = worker_component(ctx, 1)
    port = spec.worker_pool.metrics_port + 1
    assert c.argv == ["/py", "-m", "splitstack.cli.worker_process", "--stack", "local", "--index", "1"]
    assert c.role == "worker" and c.autorestart and c.name == "worker-1" and c.port == port
    assert c.health.kind == "http" and c.health.url == f"http://127.0.0.1:{port}/readyz"
    # Secrets by file only: read into the environment at start by stack.secretexec.
    assert c.secrets == {"SPLITSTACK_API_KEY": tmp_path / "secrets" / "api-key",
                         "SPLITSTACK_REDIS_PASSWORD": tmp_path / "secrets" / "redis-password"}
    assert "secret" not in json.dumps(c.env)
    assert c.term_leader_only and c.stop_wait_s > 15  # SIGTERM to the worker alone; room to drain
    assert c.env["SPLITSTACK_SERVER_URL"] == f"http://127.0.0.1:{spec.worker_server.port}"
    assert c.env["SPLITSTACK_REDIS_URL"] == f"redis://127.0.0.1:{spec.queue.port}/0"
    assert c.env["SPLITSTACK_OUTPUT_DIR"] == str(tmp_path / "data" / "outputs")
    assert json.loads(Path(c.env["SPLITSTACK_SPEC_FILE"]).read_text())["worker_pool"]["replicas"] == 2
    assert "secret" not in " ".join(c.argv)  # the key stays out of `ps`


def test_supervisord_config_carries_no_secret_and_drains_workers(tmp_path) -> None:
    from stack.components import build_components
    from stack.secrets import redis_password, resolve_api_key
    from stack.supervisor import program_argv, render_config

    spec = load_stack("local", overrides={"worker_pool.replicas": 1, "inference_servers.0.engine": "sim",
                                          "local.state_dir": str(tmp_path)})
    paths = StackPaths(tmp_path)
    paths.make()
    key = resolve_api_key(spec, paths)
    ctx = BuildContext(spec, paths, Path.cwd(), api_key=key)
    components = {c.name: c for c in build_components(ctx)}
    text = render_config(components.values(), paths)
    assert key not in text and redis_password(paths) not in text
    assert (paths.secrets / "api-key").stat().st_mode & 0o077 == 0
    worker = text.split("[program:worker-0]")[1]
    assert "stopasgroup=false" in worker and "killasgroup=true" in worker and "autorestart=true" in worker
    assert "autorestart=true" in text.split("[program:queue]")[1].split("[program:")[0]
    assert "autorestart=false" in text.split("[program:server-vlm]")[1].split("[program:")[0]
    assert program_argv(components["server-vlm"])[:4] == [
        components["server-vlm"].argv[0], "-m", "stack.secretexec", f"VLLM_API_KEY={paths.secrets / 'api-key'}"]
    assert "--web.enable-lifecycle" not in components["prometheus"].argv
