"""Helpers for tests that run the real local stack on loopback (used by tests/integration)."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

from contract.spec_loader import load_stack, project_root
from stack.launcher import LocalStack
from stack.presets import with_presets
from testsupport.procs import free_port, free_port_run

ROOT = project_root(Path(__file__))


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def local_stack(state_dir: Path, rule_globs: list[str] | None = None, **overrides: Any) -> LocalStack:

    """The `local` stack on free ports and a private state dir (a running demo keeps its own)."""
    base = {
        "local.state_dir": str(state_dir),
        # the tests write their PDFs beside the state folder (the temp folder is no default
        # input root: contract/inputs.py)
        "worker_pool.input_roots": [str(state_dir.parent)],
        "queue.port": free_port(),
        "observability.prometheus_port": free_port(),
        "observability.alertmanager.port": free_port(),
        "inference_servers.0.port": free_port(),
        "worker_pool.metrics_port": free_port_run(int(overrides.get("worker_pool.replicas", 2))),
        # monolithic mode's private engines (stack/topology.py): one port per worker
        "local.private_engine_port": free_port_run(int(overrides.get("worker_pool.replicas", 2))),
        "observability.scrape_interval_s": 1,
        "observability.evaluation_interval_s": 1,
    }
    spec = load_stack("local", ROOT, overrides=with_presets({**base, **overrides}))
    return LocalStack(spec, ROOT, rule_globs)


def input_roots_override(stack: LocalStack) -> list[str]:
    """`--spec-override` flags that give a command line (``splitstack submit``) the input roots a
    test's stack was started with: the CLI reads the checkout's spec, whose roots are its own."""
    roots = [str(r) for r in stack.spec.worker_pool.input_roots]
    return ["--spec-override", f"worker_pool.input_roots={json.dumps(roots)}"]
