"""The name of every runbook action: what `runbook <name>` runs, what a report and the audit log
record, what an alert's ``runbook_action`` annotation and a suggested next step name. The
registry (runbooks/registry.py) maps each one to its function; nothing else spells a name."""

from __future__ import annotations

from enum import StrEnum


class Action(StrEnum):
    DIAGNOSE = "diagnose"
    SLO_STATUS = "slo-status"
    RESTART = "restart"
    RESTART_SERVER = "restart-server"
    UPDATE_HF_TOKEN = "update-hf-token"
    DRAIN_GPU_NODE = "drain-gpu-node"
    GPU_NODE_FAILURE = "gpu-node-failure"
    TUNE = "tune"
    SCALE = "scale"
    SLOW_PDFS = "slow-pdfs"
    RESTART_WORKERS = "restart-workers"
    PATCH_WORKERS = "patch-workers"
    UPGRADE_SERVER = "upgrade-server"
    ROLLBACK = "rollback"
    MIGRATE = "migrate"
    MIGRATE_GUARD = "migrate-guard"
