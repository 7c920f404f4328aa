"""Outputs of a run: per-request JSONL, summary JSON and a self-contained HTML report."""
