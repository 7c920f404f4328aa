"""How much metric history the SLOs need: the one number the deployment spec (Prometheus
retention) and the SLO spec (``window_d``) must agree on.

The SLO spec refuses an SLO window longer than ``SLO_WINDOW_MAX_D`` and the burn-rate windows of
slo/burn_windows.yaml longer than ``BURN_WINDOW_MAX_H``; the deployment spec refuses a retention
that cannot hold them (contract/spec_rules.py).
"""

from __future__ import annotations

# Every SLO is measured over 30 days (requirement SLO-8, docs/requirements.md).
SLO_WINDOW_MAX_D = 30
# The slowest burn-rate alert of the SRE workbook's 30-day set reads 3 days (slo/burn_windows.yaml).
BURN_WINDOW_MAX_H = 72
# A range selector reaches one lookback (5 min) past its window and Prometheus drops whole
# blocks (up to 10 % of the retention, at most 31 d) only once they are entirely too old: one
# extra day keeps the oldest slice of the window on disk.
RETENTION_MARGIN_H = 24
MIN_RETENTION_H = SLO_WINDOW_MAX_D * 24 + RETENTION_MARGIN_H  # 744 h = 31 d
# With a long-term store the 30-day rules and reports run against it; the local Prometheus still
# evaluates the burn-rate alerts, so it keeps at least their longest window.
MIN_RETENTION_WITH_STORE_H = BURN_WINDOW_MAX_H + RETENTION_MARGIN_H  # 96 h
