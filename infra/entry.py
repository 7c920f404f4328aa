"""The Pulumi program's body: the stack's ``splitstack:`` config -> the typed spec -> every
resource, and the stack outputs. ``infra/__main__.py`` (what `pulumi up` runs) and the
Automation API driver (infra/automation.py, an inline program) both call :func:`run_program`.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pulumi

from contract import clusters
from contract.cluster_fit import ClusterFitError
from contract.spec import Spec
from contract.spec_loader import SpecError
from infra.components.config import spec_from_pulumi_config
from infra.components.program import build
from infra.components.secrets import SecretsConfigError


def preflight(spec: Spec) -> None:
    """The cloud's own checks of this machine before any resource (its program module's
    ``preflight``, where it has one: GKE's auth plugin); RuntimeError names what is missing."""
    pool = spec.gpu_node_pool
    if pool is None or pool.cloud.value not in clusters.MANAGED_CLOUDS:
        return
    module = importlib.import_module(f"infra.components.clouds.{pool.cloud.value}")
    check = getattr(module, "preflight", None)
    if check is not None:
        check()


def run_program(root: Path) -> None:
    """Build the stack's deployment; ``root`` holds alerts/ and dashboards/."""
    try:
        spec = spec_from_pulumi_config(root)
    except SpecError as exc:
        raise pulumi.RunError(str(exc)) from None
    try:
        preflight(spec)
    except RuntimeError as exc:
        raise pulumi.RunError(str(exc)) from None
    try:
        deployment = build(spec, root)
    except (SecretsConfigError, ClusterFitError, ValueError) as exc:  # each names the field and fix
        raise pulumi.RunError(str(exc)) from None
    for key, value in deployment.outputs.items():
        pulumi.export(key, value)
