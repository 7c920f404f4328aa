"""What a user gets wrong about a deployed stack's queue, on a real Redis with no workers: a
missing stream, a missing group, no worker consuming (caught by the canary before any load),
and workers that stop mid-run (the stall watchdog ends the run, marked invalid)."""

from __future__ import annotations

import pytest
import yaml
from typer.testing import CliRunner

from bench.pdfgen import make_pdf
from splitstack.cli.bench import app

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture
def bare_redis(tmp_path):
    from testsupport.worker import Harness

    h = Harness(tmp_path / "stack")
    try:
        h.start_redis()
        yield h
    finally:
        h.close()


@pytest.fixture
def scenario(tmp_path):
    pytest.importorskip("reportlab", reason="PDF generation needs the worker extra")
    make_pdf(tmp_path / "docs" / "a.pdf", 1, seed=0)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({
        "kind": "pipeline", "name": "s", "documents": {"directory": str(tmp_path / "docs")},
        "job_timeout_s": 30, "stall_timeout_s": 1.5,
        "load": {"mode": "open", "arrival": "constant", "rate_rps": 2, "duration_s": 3, "warmup_s": 0,
                 "cooldown_s": 0}}))
    return path


def bench(args, h):
    res = CliRunner().invoke(app, ["run", *args, "--stack", "dev", "--queue-url-env", "Q"],
                             env={"Q": h.redis_url, "COLUMNS": "400"}, catch_exceptions=False)
    return res.exit_code, " ".join(res.output.split())


def test_missing_stream_then_missing_group_then_no_worker(bare_redis, scenario, tmp_path):
    h = bare_redis
    r = h.redis()
    r.xadd("other:jobs", {"x": "1"})
    code, out = bench([str(scenario)], h)
    assert code == 2, out
    assert (f"stream 'splitstack:jobs' does not exist at redis://127.0.0.1:{h.redis_port}/0 (streams there: "
            "['other:jobs']): no worker ever started against this queue") in out
    assert "--stream" in out

    r.xadd("splitstack:jobs", {"x": "1"})
    r.xgroup_create("splitstack:jobs", "someone-else", id="0")
    code, out = bench([str(scenario)], h)
    assert code == 2
    assert ("has no consumer group 'workers' (groups: ['someone-else']): no worker of this stack has ever "
            "started") in out

    code, out = bench([str(scenario), "--group", "someone-else", "--out", str(tmp_path / "run")], h)
    assert code == 2
    assert "no worker picked up the canary document within 1.5 s" in out
    assert "splitstack:jobs/someone-else: lag 1" in out and "no worker is consuming this queue" in out
    assert not (tmp_path / "run").exists()


def test_stall_mid_run_ends_the_run_invalid(bare_redis, scenario):
    """No canary (a local-stack target): workers 'gone' after preflight. Every document ends as
    stalled well before job_timeout_s, and validity names the queue's state."""
    from bench.runner import run_scenario
    from bench.scenario import load_scenario
    from bench.target import Target

    h = bare_redis
    h.redis().xgroup_create("splitstack:jobs", "workers", id="0", mkstream=True)
    target = Target(None, "tiny", queue_url=h.redis_url, spec=h.spec, state_dir=h.root)
    res = run_scenario(load_scenario(str(scenario)), target)
    recs = res.records
    assert len(recs) == 6 and {r.error for r in recs} == {"stalled"}
    assert sum(1 for r in recs if r.error_detail.startswith("not submitted")) >= 1  # later arrivals
    assert res.result.wall_s < 30  # ended by the watchdog, not by job_timeout_s
    s = res.summary
    check = next(c for c in s["validity"]["checks"] if c["check"] == "queue progress")
    assert not s["validity"]["valid"] and not check["passed"] and check["measured"] == 6
    assert "no document of this run changed state for 1.5 s" in check["why"]
    assert "splitstack:jobs/workers: lag" in check["why"] and "no worker is consuming" in check["why"]
    assert s["pipeline"]["queue_at_start"]["consumers"] == []
    assert s["server_source"].startswith("none")
