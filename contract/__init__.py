"""The contract layer: what every other package agrees on, and nothing else.

The deployment spec (its enums, cross-field rules and loader), sizing and Kubernetes naming,
the capacity math the rules need, Prometheus job names, the metric catalog and the environment
variables the worker reads. Pure data and functions; it imports nothing else of splitstack's
(checked by the import contract in pyproject.toml).
"""
