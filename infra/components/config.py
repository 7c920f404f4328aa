"""The stack's ``splitstack:`` Pulumi config -> :class:`contract.spec.Spec`.

Goes through ``contract.spec_loader`` (config_to_mapping + parse_spec) so `pulumi up` and
``load_stack`` accept and reject exactly the same documents.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pulumi

from contract.image_refs import merge_lock
from contract.spec import Spec
from contract.spec_loader import NAMESPACE, config_to_mapping, parse_spec


def _value(text: str) -> Any:
    """Pulumi hands structured config as JSON text and plain values as strings."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def spec_from_pulumi_config(root: Path | None = None) -> Spec:
    stack = pulumi.get_stack()
    config: dict[str, Any] = {}
    for key in Spec.model_fields:
        full = f"{NAMESPACE}:{key}"
        text = pulumi.runtime.get_config(full)
        if text is None:
            continue
        # A secret value is refused by config_to_mapping (secrets are taken by reference only).
        config[full] = {"secure": "<secret>"} if pulumi.runtime.is_config_secret(full) else _value(text)
    raw = config_to_mapping(config, f"Pulumi.{stack}.yaml")
    raw.setdefault("stack", stack)
    raw = merge_lock(raw, root or Path.cwd(), stack)  # images/lock/<stack>.json, as load_stack reads it
    return parse_spec(raw, f"Pulumi.{stack}.yaml")
