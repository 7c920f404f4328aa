"""Options that point a pipeline run at a deployed stack's queue: how they resolve, and the errors
(with their fixes) a user gets before anything is sent. Offline: the only socket opened is a
connection to a closed loopback port."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from bench.target import QueueOptions, TargetError, from_deployed, from_stack, mask_url, queue_url_for
from contract.spec_loader import load_stack
from splitstack.cli.bench import app


@pytest.mark.parametrize("url, shown", [
    ("redis://:pw@host:6379/0", "redis://:***@host:6379/0"),
    ("rediss://bench:p%40ss@redis.example.com:6380/2", "rediss://bench:***@redis.example.com:6380/2"),
    ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
    ("redis://user@host/0", "redis://user@host/0"),
    (None, None),
])
def test_mask_url(url, shown):
    assert mask_url(url) == shown


@pytest.fixture
def dev():
    return load_stack("dev")


def test_queue_url_from_the_spec_url_env_by_default(dev):
    url = queue_url_for(dev, QueueOptions(), {"SPLITSTACK_REDIS_URL": "redis://:x@127.0.0.1:6379/0"})
    assert url == "redis://:x@127.0.0.1:6379/0"
    assert queue_url_for(dev, QueueOptions(queue_url_env="MINE"), {"MINE": "redis://h:1/0"}) == "redis://h:1/0"


def test_queue_url_missing_says_how_to_get_one(dev):
    with pytest.raises(TargetError) as e:
        queue_url_for(dev, QueueOptions(), {})
    msg = str(e.value)
    assert "stack 'dev': the spec's queue.url_env SPLITSTACK_REDIS_URL is not set" in msg
    assert "kubectl -n splitstack-dev port-forward svc/redis 6379" in msg and "--queue-url" in msg
    with pytest.raises(TargetError, match="--queue-url-env MINE is not set"):
        queue_url_for(dev, QueueOptions(queue_url_env="MINE"), {})


def test_queue_url_errors(dev):
    with pytest.raises(TargetError, match="give one of --queue-url and --queue-url-env, not both"):
        queue_url_for(dev, QueueOptions(queue_url="redis://h/0", queue_url_env="X"), {})
    with pytest.raises(TargetError) as e:
        queue_url_for(dev, QueueOptions(queue_url="http://:secret@h:6379"), {})
    assert "'http://:***@h:6379' is not a Redis URL" in str(e.value) and "secret" not in str(e.value)


def test_deployed_target_takes_names_from_the_spec_with_overrides(tmp_path):
    opts = QueueOptions(queue_url="redis://:pw@127.0.0.1:6379/0", stream="bench:jobs", group="g2",
                        output_dir=tmp_path, documents_at="https://files.example.com/pdfs/",
                        prometheus_url="http://prom:9090/")
    t = from_stack("dev", queue=opts)
    assert (t.spec.queue.stream, t.spec.queue.group, t.spec.queue.dead_letter_stream) == (
        "bench:jobs", "g2", "splitstack:dead")
    assert t.base_url is None and t.stack is None and t.deployment == "dev" and t.model == "mineru-vlm"
    assert t.documents_at == "https://files.example.com/pdfs" and t.prometheus_url == "http://prom:9090"
    assert t.queue_label == "redis://:***@127.0.0.1:6379/0" and "pw" not in repr(t)


def test_deployed_server_url_and_api_key_from_the_spec(dev):
    t = from_deployed(dev, QueueOptions(queue_url="redis://h/0"), url="http://127.0.0.1:8000/",
                      environ={"SPLITSTACK_API_KEY": "k"})
    assert t.base_url == "http://127.0.0.1:8000" and t.api_key == "k" and t.headers["Authorization"] == "Bearer k"


@pytest.mark.parametrize("opts, text", [
    (QueueOptions(queue_url="redis://h/0", output_dir=Path("/nonexistent/store")),
     "--outputs-at /nonexistent/store: no such directory on this host; mount the workers' output store"),
    (QueueOptions(queue_url="redis://h/0", documents_at="shared/pdfs"),
     "--documents-at 'shared/pdfs': give an absolute path every worker mounts or an http(s) URL prefix"),
])
def test_deployed_option_errors(dev, opts, text):
    with pytest.raises(TargetError) as e:
        from_deployed(dev, opts, environ={})
    assert text in str(e.value)


def test_chat_on_a_deployed_stack_needs_url():
    with pytest.raises(TargetError, match="stack 'dev' is a kubernetes stack: pass its server with --url"):
        from_stack("dev", pipeline=False)


def test_queue_names_without_a_queue_on_a_local_stack():
    with pytest.raises(TargetError, match="add --queue-url"):
        from_stack("local", queue=QueueOptions(stream="x"))


@pytest.fixture
def scenario(tmp_path):
    pytest.importorskip("reportlab", reason="PDF generation needs the worker extra")
    from bench.pdfgen import make_pdf

    make_pdf(tmp_path / "docs" / "a.pdf", 1, seed=0)
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump({"kind": "pipeline", "name": "s", "documents": {"directory": str(tmp_path / "docs")},
                                 "load": {"mode": "open", "rate_rps": 1, "duration_s": 1}}))
    return str(p)


def test_cli_unreachable_queue_is_named_without_its_password(scenario, tmp_path):
    res = CliRunner().invoke(app, ["run", scenario, "--stack", "dev", "--queue-url", "redis://:hunter2@127.0.0.1:1/0",
                                   "--out", str(tmp_path / "run")], env={"COLUMNS": "400"})
    assert res.exit_code == 2
    out = " ".join(res.output.split())
    assert "--queue-url carries a password, visible in shell history and `ps`; prefer --queue-url-env" in out
    assert "the queue at redis://:***@127.0.0.1:1/0 does not answer" in out
    assert "kubectl -n splitstack-dev port-forward svc/redis 6379" in out and "Nothing was sent." in out
    assert "hunter2" not in res.output and not (tmp_path / "run").exists()


def test_cli_deployed_stack_without_queue(scenario):
    res = CliRunner().invoke(app, ["run", scenario, "--stack", "dev"],
                             env={"SPLITSTACK_REDIS_URL": "", "COLUMNS": "400"})
    assert res.exit_code == 2
    assert "SPLITSTACK_REDIS_URL is not set, so the bench has no queue" in " ".join(res.output.split())


def test_cli_both_queue_options(scenario):
    res = CliRunner().invoke(app, ["gate", "--gate", "phase2-workers", "--stack", "dev", "--queue-url", "redis://h/0",
                                   "--queue-url-env", "X"], env={"COLUMNS": "400"})
    assert res.exit_code == 2 and "give one of --queue-url and --queue-url-env" in res.output
