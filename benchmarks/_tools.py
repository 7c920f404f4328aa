"""The load generators the benchmark scripts compare, in one table: how each is installed and the
command line that makes it send a given load shape (benchmarks/bench_same_shape.py,
benchmarks/bench_client_overhead.py).

Third-party tools are installed into their own virtualenvs under .cache/venvs/ (inference-perf
needs Python >= 3.12: found via pyenv or PATH, else skipped with the reason). They run in the tiny
model's parent folder, where the tokenizer id "tiny" (or "./tiny") resolves to it: no Hugging
Face hub is reachable from here.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks._bench_servers import ROOT

VENVS = ROOT / ".cache" / "venvs"
MODEL_DIR = ROOT / ".cache" / "models" / "tiny"  # tokenizer for tools that need one (localvllm/tinymodel.py)
TOOL_CWD = MODEL_DIR.parent
VLLM_BENCH = ("import sys\nfrom vllm.utils.argparse_utils import FlexibleArgumentParser\n"
              "from vllm.benchmarks.serve import add_cli_args, main\n"
              "p = FlexibleArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))\n")


@dataclass(frozen=True)
class Shape:
    """One load shape, the same for every tool: a closed loop of ``users`` back to back, or
    Poisson arrivals at ``rate_rps``; streamed chat completions of ``in_tok`` prompt tokens and
    exactly ``out_tok`` output tokens (ignore_eos)."""

    mode: str  # "closed" | "open"
    rate_rps: float
    users: int
    in_tok: int
    out_tok: int
    client_tokenizer: bool = False  # the server has no /tokenize: this bench counts with the tiny model's


Argv = tuple[list[str], dict[str, str]]


def ours(url: str, s: Shape, n: int, work: Path, bindir: Path | None = None) -> Argv:
    loop = (f"{{mode: closed, concurrency: {s.users}, count: {n}}}" if s.mode == "closed"
            else f"{{arrival: poisson, rate_rps: {s.rate_rps}, count: {n}, seed: 0}}")
    scn = work / f"ours-{n}.yaml"
    # usage at the end only and no server-gauge sampling: what the other tools ask of a server
    scn.write_text(f"kind: chat\nname: same-shape\nprompt_tokens: {{mean: {s.in_tok}}}\n"
                   f"output_tokens: {{mean: {s.out_tok}}}\nprompt_pool: 64\ncontinuous_usage_stats: false\n"
                   f"server_gauge_interval_s: 0\nload: {loop}\n")
    argv = [sys.executable, "-m", "splitstack.cli.bench", "run", str(scn), "--url", url, "--model", "tiny",
            "--out", str(work / f"ours-{n}")]
    if s.client_tokenizer:
        argv += ["--tokenizer", str(MODEL_DIR)]
    return argv, {}


def vllm_bench(url: str, s: Shape, n: int, work: Path, bindir: Path | None = None) -> Argv:
    load_args = ["--request-rate", "inf", "--max-concurrency", str(s.users)] if s.mode == "closed" else [
        "--request-rate", str(s.rate_rps)]
    return [sys.executable, "-c", VLLM_BENCH, "--backend", "openai-chat", "--base-url", url,
            "--endpoint", "/v1/chat/completions", "--model", "tiny", "--tokenizer", str(MODEL_DIR),
            "--dataset-name", "random", "--random-input-len", str(s.in_tok), "--random-output-len", str(s.out_tok),
            "--num-prompts", str(n), *load_args, "--ignore-eos", "--seed", "0", "--disable-tqdm"], \
        {"OPENAI_API_KEY": "none"}


def guidellm(url: str, s: Shape, n: int, work: Path, bindir: Path | None = None) -> Argv:
    assert bindir is not None
    profile = ({"kind": "concurrent", "streams": [s.users]} if s.mode == "closed"
               else {"kind": "poisson", "rate": [s.rate_rps]})
    scenario = work / f"guidellm-{n}-scenario.json"
    scenario.write_text(json.dumps({"metadata": {"name": "same-shape", "description": "client cost"}, "spec": {
        "backend": {"kind": "openai_http", "target": url, "model": "tiny", "request_format": "/v1/chat/completions"},
        "profile": profile,
        "data": [{"kind": "synthetic_text", "prompt_tokens": s.in_tok, "output_tokens": s.out_tok}],
        "tokenizer": {"kind": "huggingface_auto"},
        "constraints": [{"kind": "max_requests", "count": n}]}}))
    return [str(bindir / "guidellm"), "run", "--scenario", str(scenario), "--disable-console-interactive",
            "--output", f"kind=json,path={work / f'guidellm-{n}.json'}"], {"HF_HUB_OFFLINE": "1"}


def aiperf(url: str, s: Shape, n: int, work: Path, bindir: Path | None = None) -> Argv:
    assert bindir is not None
    load_args = ["--concurrency", str(s.users)] if s.mode == "closed" else ["--request-rate", str(s.rate_rps)]
    return [str(bindir / "aiperf"), "profile", "--model", "tiny", "--url", url, "--endpoint-type", "chat",
            "--streaming", *load_args, "--request-count", str(n), "--tokenizer", "./tiny",
            "--synthetic-input-tokens-mean", str(s.in_tok), "--output-tokens-mean", str(s.out_tok),
            "--extra-inputs", "ignore_eos:true", "--artifact-dir", str(work / f"aiperf-{n}"), "--ui-type", "none"], {}


def inference_perf(url: str, s: Shape, n: int, work: Path, bindir: Path | None = None) -> Argv:
    """inference-perf's random data only drives /v1/completions (its chat API needs a dataset), so
    it streams completions of the same lengths."""
    assert bindir is not None
    if s.mode == "closed":
        raise NotImplementedError("inference-perf generates load at a rate (load.type constant or poisson): "
                                  "it has no closed loop of N users")
    cfg = work / f"ip-{n}.yaml"
    cfg.write_text(
        "load:\n  type: poisson\n  stages:\n"
        f"    - rate: {s.rate_rps}\n      duration: {max(1, round(n / s.rate_rps))}\n"
        f"api:\n  type: completion\n  streaming: true\nserver:\n  type: vllm\n  model_name: tiny\n  base_url: {url}\n"
        "  ignore_eos: true\n"
        "tokenizer:\n  pretrained_model_name_or_path: ./tiny\n"
        f"data:\n  type: random\n  input_distribution: {{min: {s.in_tok}, max: {s.in_tok}, mean: {s.in_tok}}}\n"
        f"  output_distribution: {{min: {s.out_tok}, max: {s.out_tok}, mean: {s.out_tok}}}\n"
        f"report:\n  request_lifecycle:\n    summary: true\nstorage:\n  local_storage:\n    path: {work / f'ip-{n}'}\n")
    return [str(bindir / "inference-perf"), "--config_file", str(cfg)], {}


Builder = Callable[[str, Shape, int, Path, "Path | None"], Argv]
# tool: ((virtualenv name, pip package, Python: None = this one, "py312" = >= 3.12) or None, builder)
TOOLS: dict[str, tuple[tuple[str, str, str | None] | None, Builder]] = {
    "ours": (None, ours),
    "vllm": (None, vllm_bench),
    "guidellm": (("guidellm", "guidellm", None), guidellm),
    "aiperf": (("aiperf", "aiperf", None), aiperf),
    "inference-perf": (("inference-perf", "inference-perf", "py312"), inference_perf),
}


def python_312() -> str | None:
    for cand in ("python3.13", "python3.12"):
        p = shutil.which(cand)
        if p and subprocess.run([p, "-V"], capture_output=True).returncode == 0:
            return p
    for base in sorted(Path("/root/.pyenv/versions").glob("3.1[23]*"), reverse=True):
        if (base / "bin" / "python3").is_file():
            return str(base / "bin" / "python3")
    return None


def ensure_venv(name: str, package: str, python: str = sys.executable) -> Path | str:
    """The tool's own virtualenv (created once). Returns its bin dir, or why it is unavailable."""
    venv = VENVS / name
    marker = venv / ".installed"
    if marker.is_file():
        return venv / "bin"
    VENVS.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(venv, ignore_errors=True)
    r = subprocess.run([python, "-m", "venv", str(venv)], capture_output=True, text=True)
    if r.returncode != 0:
        return f"venv failed: {r.stderr[-300:]}"
    r = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", package], capture_output=True, text=True)
    if r.returncode != 0:
        last = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode
        return f"pip install {package} failed: {last}"
    marker.write_text(package)
    return venv / "bin"


def bindir_of(tool: str, skip_install: bool) -> Path | str | None:
    """Where a third-party tool's executable lives (installed unless ``skip_install``); None for
    the tools that run from this virtualenv; a string: why the tool is unavailable."""
    venv_spec, _ = TOOLS[tool]
    if not venv_spec:
        return None
    name, package, py = venv_spec
    python = sys.executable
    if py == "py312":
        found = python_312()
        if found is None:
            return "needs Python >= 3.12 (none found)"
        python = found
    bindir = (VENVS / name / "bin") if skip_install else ensure_venv(name, package, python)
    if isinstance(bindir, str) or not (bindir / name).exists():
        return bindir if isinstance(bindir, str) else f"not installed in {bindir}"
    return bindir


LAST_WAKEUPS: list[int] = [0]  # voluntary context switches (sleeps) of the last run_child's tool


def run_child(argv: list[str], env: dict | None = None, cwd: Path | None = None) -> tuple[float, float, str]:
    """Run a tool to its end: (CPU-seconds of it and its waited-for children, wall seconds, output).
    ``LAST_WAKEUPS[0]``: the times it went to sleep and was woken (rusage ``ru_nvcsw``)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    r = subprocess.run(argv, env={**os.environ, **(env or {})}, cwd=cwd or ROOT, capture_output=True, text=True,
                       timeout=1200)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode not in (0, 2):  # bench exits 2 for an invalid run: still measured
        raise RuntimeError(f"{argv[0]} {' '.join(argv[1:4])} failed ({r.returncode}):\n"
                           f"{r.stdout[-1500:]}\n{r.stderr[-2500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    LAST_WAKEUPS[0] = after.ru_nvcsw - before.ru_nvcsw
    return cpu, wall, r.stdout + r.stderr
