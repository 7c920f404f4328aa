"""Runbook actions: small functions `(ctx, params) -> Report`, dry-run unless applied.

`registry.invoke(ctx, name, params)` is the entry point (CLI and tests); `registry.ACTIONS`
lists every action with the runbook case it handles.
"""
