"""The command lines: `splitstack`, `bench`, `slo`, `runbook`, and the two service processes
(`python -m splitstack.cli.worker_process`, `python -m splitstack.cli.sim serve`).

The top layer: these modules parse arguments, call the packages below and print what they
return. Logic lives in the packages (see docs/architecture.md).
"""
