"""The Pulumi program (`pulumi up` with Pulumi.yaml's ``main: infra/``).

Reads the stack's ``splitstack:`` config into the same typed spec everything else uses, then
builds the deployment (infra/entry.py). The spec holds SecretRefs only; secret values come from
the encrypted ``splitstack-secrets:`` config (infra/components/secrets.py) as secret Outputs.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # pulumi runs this folder as a script, not as the package
    sys.path.insert(0, str(ROOT))

from infra.entry import run_program  # noqa: E402

run_program(ROOT)
