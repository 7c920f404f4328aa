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
    assert c.env["SPLITSTACK_API_KEY"] == "secret"
    assert c.env["SPLITSTACK_SERVER_URL"] == f"http://127.0.0.1:{spec.worker_server.port}"
    assert c.env["SPLITSTACK_REDIS_URL"] == f"redis://127.0.0.1:{spec.queue.port}/0"
    assert c.env["SPLITSTACK_OUTPUT_DIR"] == str(tmp_path / "data" / "outputs")
    assert json.loads(Path(c.env["SPLITSTACK_SPEC_FILE"]).read_text())["worker_pool"]["replicas"] == 2
    assert "secret" not in " ".join(c.argv)  # the key stays out of `ps`
