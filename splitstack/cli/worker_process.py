"""The worker process: ``python -m splitstack.cli.worker_process --stack local --index 0``.

What the local stack's launcher, the Kubernetes Deployment and Compose start for each worker
replica. Parses flags, then hands over to :func:`worker.main.main`.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from contract.spec_loader import SpecError
from worker.config import ConfigError
from worker.main import main as run
from worker.orphans import die_with_parent, mark_parent
from worker.torchless import keep_torch_out

if __name__ == "__mp_main__":  # a MinerU page-render process (spawn) importing us: see worker/orphans.py
    die_with_parent()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m splitstack.cli.worker_process", description=__doc__)
    parser.add_argument("--stack", default="local", help="Pulumi.<stack>.yaml to read")
    parser.add_argument("--index", type=int, default=0, help="replica index (port offset)")
    parser.add_argument("--spec-override", "--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override a spec field, e.g. queue.visibility_timeout_s=5")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    keep_torch_out()  # worker.main imports MinerU only when it builds the backend, after this
    mark_parent()

    try:
        return run(args.stack, args.index, args.overrides, args.log_level)
    except (SpecError, ConfigError, ValueError) as exc:
        print(f"worker: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    code = main()
    # Everything is closed (queue, server client, outputs written atomically): skip the
    # interpreter's teardown, which joins MinerU's helper threads and pools and held an idle
    # worker's exit for seconds after its work was done.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
