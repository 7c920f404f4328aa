"""Where the output store is, as people and scripts see it: the workers' stores, the Pulumi
program and the local stack's commands agree on these. (A done job's record in Redis carries
its own ``output``, written by the worker that stored it.)"""

from __future__ import annotations

from pathlib import Path

from contract.spec import Spec

OUTPUTS_CLAIM = "splitstack-outputs"  # the ReadWriteMany PVC of kind directory in Kubernetes


def store_root(spec: Spec) -> str:
    """``s3://bucket/prefix`` (kind s3) or the directory kind's claim in Kubernetes."""
    store = spec.output_store
    if store.kind == "s3":
        return f"s3://{store.bucket}" + (f"/{store.prefix}" if store.prefix else "")
    return f"pvc://{OUTPUTS_CLAIM}"


def local_output_dir(spec: Spec, project_root: Path) -> Path:
    """The local stack's output folder (kind directory) or staging folder (kind s3)."""
    state = Path(spec.local.state_dir)
    if not state.is_absolute():
        state = project_root / state
    return state / "data" / spec.output_store.path
