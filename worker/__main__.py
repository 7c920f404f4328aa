"""``python -m worker --stack local --index 0 [--set key=value ...]``"""

from __future__ import annotations

import argparse
import sys

from infra.spec_loader import SpecError
from worker.config import ConfigError


def cli(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m worker", description=__doc__)
    parser.add_argument("--stack", default="local", help="Pulumi.<stack>.yaml to read")
    parser.add_argument("--index", type=int, default=0, help="replica index (port offset)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override a spec field, e.g. queue.visibility_timeout_s=5")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    from worker.main import main

    try:
        return main(args.stack, args.index, args.overrides, args.log_level)
    except (SpecError, ConfigError, ValueError) as exc:
        print(f"worker: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(cli())
