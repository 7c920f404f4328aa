"""Go/no-go gates: typed models keyed by ``kind`` (models.py), the gate file (spec.py) and the
verdict with its exit code (verdict.py)."""
