"""The simulator as a real process over HTTP: start-up, streaming, queueing, faults, bad input."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from testsupport.procs import free_port, running

from .servers import API_KEY, ROOT, sim_argv, sim_server

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
AUTH = {"Authorization": f"Bearer {API_KEY}"}


def chat(content: str = "hello", **kw) -> dict:
    return {"model": "tiny", "messages": [{"role": "user", "content": content}], **kw}


def metric(text: str, name: str, **labels) -> float:
    want = {"engine": "0", "model_name": "tiny", **labels}
    for line in text.splitlines():
        m = re.match(r"^([^{ ]+)(?:\{(.*)\})? (\S+)$", line)
        if m and m.group(1) == name:
            got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
            if got == want:
                return float(m.group(3))
    raise AssertionError(f"{name}{want} not in /metrics")


def test_starts_in_seconds_and_serves_a_streamed_chat():
    port = free_port()
    t0 = time.monotonic()
    with running("sim", sim_argv(port), port=port) as server:
        ready_s = server.wait_ready("/health", 30)
        assert ready_s < 15
        with httpx.Client(base_url=server.url, headers=AUTH, timeout=10) as c:
            assert c.get("/v1/models").json()["data"][0]["id"] == "tiny"
            with c.stream("POST", "/v1/chat/completions", json=chat(max_tokens=16, stream=True, stream_options={
                    "include_usage": True, "continuous_usage_stats": True})) as r:
                assert r.headers["content-type"] == "text/event-stream; charset=utf-8"
                assert r.headers["server"] == "uvicorn"
                events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
            assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
            assert events[-1]["usage"]["completion_tokens"] == 16
        assert "serving model 'tiny' (profile instant, seed 1)" in server.log()
    assert time.monotonic() - t0 < 30


def test_queueing_shows_in_metrics_and_ttft_when_concurrency_exceeds_max_num_seqs():
    with sim_server("--profile", "mineru25-a100", "--max-num-seqs", "2") as server:
        async def run() -> tuple[list[float], float]:
            async with httpx.AsyncClient(base_url=server.url, headers=AUTH, timeout=60) as c:
                async def one() -> float:
                    t, ttft = time.monotonic(), None
                    async with c.stream("POST", "/v1/chat/completions", json=chat(max_tokens=20, stream=True)) as r:
                        async for line in r.aiter_lines():  # read to the end: leaving early aborts the request
                            if ttft is None and '"content":"' in line and '"role"' not in line:
                                ttft = time.monotonic() - t
                    return ttft

                tasks = [asyncio.create_task(one()) for _ in range(8)]
                await asyncio.sleep(0.15)
                waiting = metric((await c.get("/metrics")).text, "vllm:num_requests_waiting")
                return await asyncio.gather(*tasks), waiting

        ttfts, waiting = asyncio.run(run())
        assert waiting >= 4  # 8 offered, 2 running
        ttfts.sort()
        assert ttfts[-1] > 2.5 * ttfts[0]  # the last wave waited for three earlier ones
        text = httpx.get(f"{server.url}/metrics").text
        assert metric(text, "vllm:request_queue_time_seconds_sum") > 0.5
        assert metric(text, "vllm:request_success_total", finished_reason="length") == 8
        assert metric(text, "vllm:num_requests_running") == 0


def test_faults_at_start_503_with_retry_after_then_cleared_at_run_time():
    with sim_server("--fault", "error_rate=1", "--fault", "retry_after_s=7") as server:
        with httpx.Client(base_url=server.url, headers=AUTH, timeout=10) as c:
            r = c.post("/v1/chat/completions", json=chat(max_tokens=2))
            assert r.status_code == 503 and r.headers["retry-after"] == "7"
            assert r.json()["error"] == {"message": "injected fault: HTTP 503", "type": "ServiceUnavailableError",
                                         "param": None, "code": 503}
            assert c.put("/sim/faults", json={"error_rate": 0}).status_code == 200
            assert c.post("/v1/chat/completions", json=chat(max_tokens=2)).status_code == 200
            wrong_key = {"Authorization": "Bearer x"}
            assert c.put("/sim/faults", json={"error_rate": 1}, headers=wrong_key).status_code == 401


def test_runtime_faults_reset_hang_latency_and_kv_exhaustion():
    # vllm-cpu-tiny: answers run to max_tokens; 128-token KV blocks, so 256 tokens = 2 blocks
    with sim_server("--profile", "vllm-cpu-tiny", "--max-model-len", "256") as server:
        with httpx.Client(base_url=server.url, headers=AUTH, timeout=10) as c:
            c.put("/sim/faults", json={"reset_rate": 1})
            with pytest.raises(httpx.RemoteProtocolError):
                c.post("/v1/chat/completions", json=chat(max_tokens=8))
            with pytest.raises(httpx.RemoteProtocolError):
                with c.stream("POST", "/v1/chat/completions", json=chat(max_tokens=8, stream=True)) as r:
                    list(r.iter_lines())
            assert "injected connection reset" in server.log() and "Traceback" not in server.log()
            c.put("/sim/faults", json={"reset_rate": 0, "hang_rate": 1})
            with pytest.raises(httpx.ReadTimeout):
                c.post("/v1/chat/completions", json=chat(max_tokens=8), timeout=1.0)
            c.put("/sim/faults", json={"hang_rate": 0, "added_latency_ms": 400})
            t = time.monotonic()
            assert c.post("/v1/chat/completions", json=chat(max_tokens=2)).status_code == 200
            assert time.monotonic() - t >= 0.4
            c.put("/sim/faults", json={"added_latency_ms": 0, "kv_capacity_factor": 1e-9})

        async def burst() -> list[int]:
            async with httpx.AsyncClient(base_url=server.url, headers=AUTH, timeout=30) as ac:
                rs = await asyncio.gather(*(ac.post("/v1/chat/completions", json=chat(max_tokens=200))
                                            for _ in range(6)))
                return [r.json()["usage"]["completion_tokens"] for r in rs]

        assert asyncio.run(burst()) == [200] * 6  # all finish despite preemptions
        text = httpx.get(f"{server.url}/metrics").text
        assert metric(text, "vllm:num_preemptions_total") > 0
        assert metric(text, "vllm:request_num_preemptions_sum") > 0
        state = httpx.get(f"{server.url}/sim/state", headers=AUTH).json()
        assert state["kv_blocks_total"] == 2 and state["running"] == 0  # 256 tokens: one max_model_len


def test_crash_fault_kills_the_process_with_status_70():
    with sim_server("--fault", "crash_after_requests=2") as server:
        with httpx.Client(base_url=server.url, headers=AUTH, timeout=10) as c:
            assert c.post("/v1/chat/completions", json=chat(max_tokens=2)).status_code == 200
            with pytest.raises(httpx.TransportError):
                c.post("/v1/chat/completions", json=chat(max_tokens=2))
        assert server.popen.wait(10) == 70
        assert "injected crash" in server.log()


def test_slow_start_delays_health():
    port = free_port()
    with running("sim", sim_argv(port, "--fault", "slow_start_s=2"), port=port) as server:
        assert server.wait_ready("/health", 30) >= 2.0


def test_sigterm_exits_promptly_without_a_traceback():
    with sim_server() as server:
        server.popen.send_signal(signal.SIGTERM)
        # uvicorn shuts down gracefully, then re-raises the signal (its documented behaviour)
        assert server.popen.wait(10) in (0, -signal.SIGTERM)
        assert "Traceback" not in server.log()


def test_port_in_use_names_the_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = subprocess.run(sim_argv(port), cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert f"error: port {port} on 127.0.0.1 is already in use" in r.stderr


def test_unknown_profile_exits_2_listing_valid_names():
    r = subprocess.run([sys.executable, "-m", "splitstack.cli.sim", "serve", "--profile", "nope"], cwd=ROOT,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert "error: unknown profile 'nope': valid names are instant, mineru25-a100, mineru25-h200" in r.stderr
    assert r.stdout == ""


def test_fit_drive_recovers_the_profile_it_was_served_with(tmp_path):
    # A per-sequence cost large enough to stand out of a loaded CI machine's scheduling noise: the
    # A100 profile's 0.22 ms/seq is ~2 ms across levels 1..8, which a busy neighbour can double.
    import yaml

    served = yaml.safe_load((ROOT / "simulator" / "profiles" / "mineru25-a100.yaml").read_text())
    served["name"] = "fit-target"
    served["latency"].update(step_base_ms=10.0, decode_per_seq_ms=4.0)
    profile = tmp_path / "fit-target.yaml"
    profile.write_text(yaml.safe_dump(served))
    with sim_server("--profile", str(profile), "--max-num-seqs", "16") as server:
        r = subprocess.run([sys.executable, "-m", "splitstack.cli.sim", "fit", f"{server.url}/metrics",
                            "--drive", server.url,
                            "--levels", "1,8", "--requests-per-level", "8", "--max-tokens", "24", "--api-key", API_KEY,
                            "--name", "refit", "--base", "mineru25-a100"], cwd=ROOT, capture_output=True, text=True,
                           timeout=120)
    assert r.returncode == 0, r.stderr
    fitted = yaml.safe_load(r.stdout)["latency"]
    assert fitted["step_base_ms"] == pytest.approx(10.0, rel=0.3)
    assert fitted["decode_per_seq_ms"] == pytest.approx(4.0, rel=0.3)
