"""The bench against a plain OpenAI-compatible server: benchmarks/stub_openai_server.py has no
/tokenize, no /health and no /metrics, and sends usage only when asked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from testsupport.procs import free_port, running

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
ROOT = Path(__file__).resolve().parents[3]
TINY = ROOT / ".cache" / "models" / "tiny"


@pytest.fixture(scope="module")
def stub_url():
    port = free_port()
    argv = [sys.executable, str(ROOT / "benchmarks" / "stub_openai_server.py"), "--port", str(port)]
    with running("stub", argv, port=port, ready="/v1/models", ready_timeout_s=30) as server:
        yield server.url


def _bench(url: str, tmp_path: Path, *extra: str, scenario: str = "chat-smoke") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "splitstack.cli.bench", "run", scenario, "--url", url, "--model",
                           "tiny", "--count", "40", "--rate", "40", "--out", str(tmp_path / "out"), *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_without_a_tokenizer_the_run_stops_naming_the_fix(stub_url, tmp_path):
    r = _bench(stub_url, tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    out = " ".join((r.stdout + r.stderr).split())
    assert "has no /tokenize endpoint (404)" in out and "--tokenizer DIR" in out and "Nothing was sent" in out


@pytest.mark.skipif(not (TINY / "tokenizer.json").is_file(), reason=f"{TINY} not generated")
def test_prompts_counted_with_the_named_tokenizer_and_sources_reported(stub_url, tmp_path):
    scn = tmp_path / "scn.yaml"
    scn.write_text("kind: chat\nname: stub\nprompt_tokens: {mean: 32}\noutput_tokens: {mean: 16}\nprompt_pool: 8\n"
                   "continuous_usage_stats: false\n"
                   "load: {rate_rps: 40, count: 40, seed: 0}\n")
    r = _bench(stub_url, tmp_path, "--tokenizer", str(TINY), scenario=str(scn))
    text = r.stdout + r.stderr
    assert "prompt lengths: client tokenizer" in text, text[-2000:]
    s = json.loads(next((tmp_path / "out").rglob("summary.json")).read_text())
    assert s["requests"]["ok"] == 40 and s["requests"]["errors"] == 0
    assert "the server has no /tokenize" in s["tokens"]["prompt_source"]
    assert s["tokens"]["output_source"] == {"usage": s["requests"]["all_phases"]}
    assert s["tokens"]["prompt"]["mean"] <= 32 and s["tokens"]["output"]["mean"] == 16
    assert "report.html" in text
