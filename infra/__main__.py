"""The Pulumi program (`pulumi up` with Pulumi.yaml's ``main: infra/``).

Reads the stack's ``splitstack:`` config into the same typed spec everything else uses, then
builds the deployment. The spec holds SecretRefs only; secret values come from the encrypted
``splitstack-secrets:`` config (infra/components/secrets.py) as secret Outputs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pulumi

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # pulumi runs this folder as a script, not as the package
    sys.path.insert(0, str(ROOT))

from contract.cluster_fit import ClusterFitError  # noqa: E402
from contract.spec_loader import SpecError  # noqa: E402
from infra.components.config import spec_from_pulumi_config  # noqa: E402
from infra.components.program import build  # noqa: E402
from infra.components.secrets import SecretsConfigError  # noqa: E402


def main() -> None:
    try:
        spec = spec_from_pulumi_config()
    except SpecError as exc:
        raise pulumi.RunError(str(exc)) from None
    try:
        deployment = build(spec, ROOT)
    except (SecretsConfigError, ClusterFitError) as exc:
        raise pulumi.RunError(str(exc)) from None
    for key, value in deployment.outputs.items():
        pulumi.export(key, value)


main()
