import pytest
from pydantic import ValidationError

from contract.spec_loader import load_stack
from worker.config import ConfigError, settings_from_env
from worker.jobs import Job, PageRange
from worker.main import parse_overrides


def test_job_round_trips_through_stream_fields() -> None:
    job = Job(source="/data/a.pdf", pages=PageRange(first=2, last=5), correlation_id="c-1")
    back = Job.from_fields(job.to_fields())
    assert back == job and back.pages.count == 4


def test_job_errors_name_the_bad_input() -> None:
    with pytest.raises(ValidationError, match="neither an absolute path nor an http"):
        Job(source="relative/a.pdf")
    with pytest.raises(ValidationError, match="page range 5-2: last page is before the first"):
        PageRange(first=5, last=2)
    with pytest.raises(ValueError, match="has no 'job' field"):
        Job.from_fields({"other": "x"})


def test_settings_need_the_api_key_env_var_named_by_the_spec() -> None:
    spec = load_stack("local")
    with pytest.raises(ConfigError, match="set the environment variable SPLITSTACK_API_KEY"):
        settings_from_env(spec, 0, env={})


def test_local_settings_follow_the_spec_ports() -> None:
    spec = load_stack("local")
    s = settings_from_env(spec, 2, env={"SPLITSTACK_API_KEY": "k"})
    assert s.server_url == f"http://127.0.0.1:{spec.worker_server.port}"
    assert s.redis_url == f"redis://127.0.0.1:{spec.queue.port}/0"
    assert s.metrics_port == spec.worker_pool.metrics_port + 2
    assert s.output_dir.name == spec.output_store.path
    assert s.url_allowlist == ()


def test_parse_overrides_reads_yaml_scalars_and_rejects_bad_pairs() -> None:
    assert parse_overrides(["queue.visibility_timeout_s=5", "worker_pool.backend=page-vlm"]) == {
        "queue.visibility_timeout_s": 5, "worker_pool.backend": "page-vlm"}
    with pytest.raises(ValueError, match="expected KEY=VALUE"):
        parse_overrides(["novalue"])


def test_monolithic_private_server_needs_its_own_engine_url() -> None:
    mono = load_stack("local", overrides={"deployment_mode": "monolithic",
                                          "worker_pool.in_process.backend": "private-server"})
    with pytest.raises(ConfigError, match="private-server.*SPLITSTACK_SERVER_URL"):
        settings_from_env(mono, 0, env={"SPLITSTACK_API_KEY": "k"})
