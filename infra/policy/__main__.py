"""The CrossGuard policy pack: `pulumi preview --policy-pack infra/policy`.

Serves the rules of infra/policy/rules.py to the Pulumi engine (the constructor blocks).
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the engine runs this folder as a script
    sys.path.insert(0, str(ROOT))

from pulumi_policy import EnforcementLevel, PolicyPack  # noqa: E402

from infra.policy.pack import PACK_NAME, POLICIES  # noqa: E402

PolicyPack(name=PACK_NAME, enforcement_level=EnforcementLevel.MANDATORY, policies=POLICIES)
