"""Every runbook action's parameters, by action name (:data:`PARAMS`).

One model per action: the `runbook` command's options are its fields (descriptions as help;
``json_schema_extra`` may spell the flag: ``cli_flag``, ``cli_key``, ``cli_example``), and a
suggested next step (runbooks/suggestion.py) is checked against it. Unknown keys are errors (a
typo must not vanish). The models live here, below the actions, so that diagnose can suggest an
action it does not import.
"""

from __future__ import annotations

from typing import Literal

import yaml
from pydantic import Field, field_validator
from pydantic.fields import FieldInfo

from contract.models import Strict
from contract.spec import DeploymentMode
from runbooks.names import Action

MIGRATION_GATE = "migration-cohorts"  # bench/gates/migration-cohorts.yaml
VERSION_KEYS = ("image_tag", "sim_profile", "extra_args")  # what `upgrade-server --set` may change


class ActionParams(Strict):
    """Base of every action's parameters (strict: a typo in a parameter is refused)."""


class ServerParams(ActionParams):
    server: str | None = Field(
        default=None, description="Inference server name from the spec; default: the workers' server."
    )


def cli_spelling(field: FieldInfo, key: str, default: str) -> str:
    """Command-line spelling a field asks for in its json_schema_extra (cli_flag, cli_key, cli_example)."""
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    return str(extra.get(key, default))


def cli_flag(name: str, field: FieldInfo) -> str:
    """The option's name without its dashes: ``cli_flag`` or the field's name, dashed."""
    return cli_spelling(field, "cli_flag", name.replace("_", "-"))


class DiagnoseParams(ActionParams):
    thresholds: dict[str, str] = Field(default_factory=dict, description="Overrides of "
                                       "runbooks/diagnose/thresholds.yaml, e.g. queue_waiting_max=5.",
                                       json_schema_extra={"cli_flag": "threshold", "cli_key": "NAME",
                                                          "cli_example": "queue_waiting_max=5"})
    log_lines: int = Field(default=300, ge=10, le=100_000, description="Log lines scanned per component.")
    gpu: bool = Field(default=True, description="Read this machine's GPUs through NVML.",
                      json_schema_extra={"cli_flag": "nvml"})


class SloStatusParams(ActionParams):
    window: str | None = Field(default=None, description="SLO window, e.g. 30d; default: each SLO's own.")
    current: str = Field(default="1h", description="Window of the current burn rate.")


class SlowPdfsParams(ActionParams):
    top: int = Field(default=20, ge=1, le=1000, description="How many documents to list.")
    log_lines: int = Field(default=5000, ge=10, description="Worker log lines scanned.")


class RestartComponentParams(ActionParams):
    component: str = Field(description="What to restart: queue, prometheus, server-<name>, workers "
                           "(all, one at a time) or worker-<i> (names as `splitstack status` lists them).",
                           json_schema_extra={"cli_example": "server-vlm"})
    reason: str = Field(default="", description="Why, for the audit log.")


class RestartServerParams(ServerParams):
    force: bool = Field(default=False, description="Restart a healthy server too (KV-cache "
                        "fragmentation, weekly cache clearing), or despite a GPU/token signature.")
    reason: str = Field(default="", description="Why, for the audit log.")


class UpdateHfTokenParams(ServerParams):
    token_env: str | None = Field(default=None, description="Environment variable holding the new "
                                  "token; default: the spec's hf_token.env.")
    force: bool = Field(default=False, description="Update even when the logs show no token failure.")


class DrainGpuNodeParams(ServerParams):
    node: str | None = Field(default=None, description="Node to drain; default: the node of the "
                             "server's crashing pod.")
    force: bool = Field(default=False, description="Drain without a CUDA/Xid signature in the logs.")


class GpuNodeFailureParams(ServerParams):
    pass


class TuneParams(ServerParams):
    set: dict[str, str] = Field(description="Knob=value pairs; knobs are spec field names.",
                                json_schema_extra={"cli_key": "KNOB", "cli_example": "max_num_batched_tokens=4096"})

    @field_validator("set")
    @classmethod
    def _not_empty(cls, v: dict[str, str]) -> dict[str, str]:
        if not v:
            raise ValueError("give at least one --set KNOB=VALUE, e.g. --set concurrency_per_worker=2")
        return v


class ScaleParams(ActionParams):
    component: str = Field(description="server-<name> or workers.", json_schema_extra={"cli_example": "workers"})
    replicas: int = Field(ge=0, description="Replicas wanted.", json_schema_extra={"cli_example": "4"})


class RestartWorkersParams(ActionParams):
    force: bool = Field(default=False, description="Restart even when no breaker is open.")


class PatchWorkersParams(ActionParams):
    image_tag: str = Field(description="The patched worker image tag, e.g. 0.1.1-cve-2026-1234.",
                           json_schema_extra={"cli_example": "0.1.1-cve-2026-1234"})


class UpgradeServerParams(ServerParams):
    to: dict[str, object] = Field(description="New version settings: image_tag (k8s), sim_profile "
                                  "or extra_args (the local simulator), e.g. {'image_tag': 'v0.33.0'}.",
                                  json_schema_extra={"cli_flag": "set", "cli_key": "SETTING",
                                                     "cli_example": "image_tag=v0.33.0"})
    prompt: str = Field(default="Test", description="Content of the test chat completion.")

    @field_validator("to")
    @classmethod
    def _version_keys(cls, v: dict[str, object]) -> dict[str, object]:
        bad = sorted(set(v) - set(VERSION_KEYS))
        if not v or bad:
            raise ValueError(f"upgrade sets only {', '.join(VERSION_KEYS)}"
                             + (f"; not {', '.join(bad)} (use `runbook tune` for knobs)" if bad else ""))
        if isinstance(v.get("extra_args"), str):  # from the command line: a YAML list
            try:
                v = {**v, "extra_args": yaml.safe_load(str(v["extra_args"]))}
            except yaml.YAMLError as exc:
                raise ValueError(f"extra_args {v['extra_args']!r} is not a YAML list: {exc}") from None
        return v


class RollbackParams(ActionParams):
    to: DeploymentMode = Field(
        description="The deployment mode to switch to: monolithic (each worker runs the model "
        "itself, the rollback) or split (one shared inference server, CPU-only workers).",
        json_schema_extra={"cli_example": "monolithic"})


class WindowParams(ActionParams):
    gate: str = Field(default=MIGRATION_GATE, description="Gate file (bench/gates name or path) whose `cohorts` "
                      "gate holds the criteria; a drill with short windows may pass one with looser bounds.")
    window_s: float = Field(default=300.0, gt=0, description="The window judged: documents submitted in the "
                            "last this many seconds, both cohorts.")
    stuck_after_s: float = Field(default=120.0, gt=0, description="A document unfinished this long after its "
                                 "submission counts as failed (a hung server is a breach).")
    redis_url: str | None = Field(default=None, description="Kubernetes: the cluster's Redis, where the share "
                                  "lives, port-forwarded (`kubectl -n NAMESPACE port-forward svc/redis 6379`, "
                                  "then redis://127.0.0.1:6379; the password comes from the cluster's Secret). "
                                  "A local stack's own queue is found without it.")


class MigrateParams(WindowParams):
    to: Literal[0, 10, 50, 100] = Field(
        description="Split share to move to, in percent of documents: the next step of 10, 50, 100 "
        "(0: abort, every document back on the monolithic pool).", json_schema_extra={"cli_example": "10"})
    drain_timeout_s: float = Field(default=300.0, gt=0, description="--to 100: how long to wait for the "
                                   "monolithic cohort's stream to drain before stopping its pool.")
    shadow: int | None = Field(default=None, ge=0, le=100, description="Shadow sample: percent of documents "
                               "also processed by the other cohort, outputs compared by the gate (unchanged "
                               "when not given; copies are made while both cohorts take documents).",
                               json_schema_extra={"cli_example": "10"})


class MigrateGuardParams(WindowParams):
    watch_s: float = Field(default=0.0, ge=0, description="How long to keep judging (0: once).")
    every_s: float = Field(default=10.0, gt=0, description="Seconds between two judgements.")


PARAMS: dict[Action, type[ActionParams]] = {
    Action.DIAGNOSE: DiagnoseParams,
    Action.SLO_STATUS: SloStatusParams,
    Action.RESTART: RestartComponentParams,
    Action.RESTART_SERVER: RestartServerParams,
    Action.UPDATE_HF_TOKEN: UpdateHfTokenParams,
    Action.DRAIN_GPU_NODE: DrainGpuNodeParams,
    Action.GPU_NODE_FAILURE: GpuNodeFailureParams,
    Action.TUNE: TuneParams,
    Action.SCALE: ScaleParams,
    Action.SLOW_PDFS: SlowPdfsParams,
    Action.RESTART_WORKERS: RestartWorkersParams,
    Action.PATCH_WORKERS: PatchWorkersParams,
    Action.UPGRADE_SERVER: UpgradeServerParams,
    Action.ROLLBACK: RollbackParams,
    Action.MIGRATE: MigrateParams,
    Action.MIGRATE_GUARD: MigrateGuardParams,
}
assert set(PARAMS) == set(Action), "every action needs its parameters model"
