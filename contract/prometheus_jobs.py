"""Prometheus job names: the contract between whatever scrapes the pipeline (the local stack's
Prometheus, the ServiceMonitors of a cluster) and the alert rules, SLIs and dashboards that
select on ``job``."""

from __future__ import annotations

JOB_SERVER = "inference-server"
JOB_WORKERS = "workers"
JOB_PROMETHEUS = "prometheus"

# Prometheus' own scrape job, by deployment. No alert rule selects on it (the SLIs need no
# deployment's Prometheus job: slo/promql.py MONITORING_UP); listed for the scrape configs and
# the runbook pages that name it.
JOB_PROMETHEUS_KUBE_PROMETHEUS_STACK = "kube-prometheus-stack-prometheus"  # the chart's Service name
