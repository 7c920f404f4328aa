"""splitstack bench: load generation, metrics, gates, comparisons and reports.

Layout (one job per module): ``load`` (load shapes and arrival schedules), ``sse`` (stream
framing with first-byte timestamps), ``engine`` (the asyncio runner), ``records`` (per-request
records), ``metrics`` (every formula, documented in docs/bench-metrics.md), ``validity`` (was the
client the bottleneck?), ``scenario``/``chat``/``pipeline`` (workloads), ``gating`` (typed gates),
``compare`` (bootstrap comparisons), ``search`` (saturation / SLO search), ``report`` (JSONL,
summary JSON, HTML), ``locust`` (many-machine load), ``cli`` (the ``bench`` command).
"""
