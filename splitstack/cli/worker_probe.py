"""A worker's own health check: ``python -m splitstack.cli.worker_probe [/readyz|/healthz]``.

The worker image's HEALTHCHECK. Asks the worker in the same container on its metrics port
(``SPLITSTACK_WORKER_METRICS_PORT``, else the spec's default ``worker_pool.metrics_port``); exit 0
when it answers 200, 1 otherwise, printing the answer.
"""

from __future__ import annotations

import argparse
import os
import sys

from contract.spec import WorkerPool
from contract.worker_env import ENV_METRICS_PORT
from worker.health import probe_self


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m splitstack.cli.worker_probe", description=__doc__)
    parser.add_argument("path", nargs="?", default="/readyz", choices=["/readyz", "/healthz"])
    parser.add_argument("--timeout-s", type=float, default=4.0)
    args = parser.parse_args(argv)
    raw = os.environ.get(ENV_METRICS_PORT) or str(WorkerPool.model_fields["metrics_port"].default)
    if not raw.isdigit():
        print(f"{ENV_METRICS_PORT}={raw!r} is not a port number; set it to the worker's metrics port",
              file=sys.stderr)
        return 2
    ok, answer = probe_self(args.path, int(raw), args.timeout_s)
    print(answer)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
