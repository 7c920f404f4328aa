"""``collection.json``: the master's account of which worker delivered which records.

Kept free of Locust imports: ingestion runs in the `bench` process, which must not import
Locust (importing it monkey-patches the process with gevent).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MANIFEST = "collection.json"
RECORD_GLOB = "records-*.jsonl"


def read_manifest(records_dir: Path) -> dict[str, Any] | None:
    p = records_dir / MANIFEST
    return json.loads(p.read_text()) if p.is_file() else None


def clear(records_dir: Path) -> None:
    """Remove a previous run's record files and manifest, so a reused --out never merges two runs."""
    for p in [*records_dir.glob(RECORD_GLOB), records_dir / MANIFEST]:
        p.unlink(missing_ok=True)
