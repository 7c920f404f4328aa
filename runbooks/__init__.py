"""On-call runbooks: pages, scripted actions and the `runbook` CLI."""
