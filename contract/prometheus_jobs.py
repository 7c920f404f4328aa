"""Prometheus job names: the contract between whatever scrapes the pipeline (the local stack's
Prometheus, the ServiceMonitors of a cluster) and the alert rules, SLIs and dashboards that
select on ``job``."""

from __future__ import annotations

JOB_SERVER = "inference-server"
JOB_WORKERS = "workers"
JOB_PROMETHEUS = "prometheus"
