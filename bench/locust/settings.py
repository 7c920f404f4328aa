"""How `bench locust` runs Locust: one typed model, the only place its defaults are defined.

The CLI options take their defaults from here; the locustfile reads the subset it needs from
``BENCH_*`` environment variables that ``bench locust`` sets (see ``to_env``), so a process on
another machine started by hand gets the same values by exporting the same variables.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_MASTER_PORT = 5557  # Locust's own default (--master-port / --master-bind-port)


class LocustSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    users: int = Field(default=8, ge=1, description="Locust users (concurrency), over all workers.")
    spawn_rate: float = Field(default=8.0, gt=0, description="Users started per second.")
    run_time_s: int = Field(default=60, ge=1, description="Seconds of load, warmup and cooldown included.")
    warmup_s: float = Field(default=5.0, ge=0, description="Excluded from metrics at the start.")
    cooldown_s: float = Field(default=2.0, ge=0, description="Excluded from metrics at the end.")
    expect_workers_max_wait_s: int = Field(
        default=60, ge=1,
        description="Distributed: the master gives up (and the run fails) when fewer workers than "
        "expected have connected after this long.",
    )
    drain_timeout_s: float = Field(
        default=30.0, gt=0,
        description="At the end, users send nothing new and requests in flight get this long to finish, "
        "so every request the server saw is recorded; still-open ones are counted as abandoned.",
    )
    connect_timeout_s: float = Field(
        default=60.0, gt=0,
        description="`bench locust worker`: fail when the master cannot be reached within this long "
        "(Locust itself would retry for 5 minutes).",
    )
    shutdown_grace_s: float = Field(
        default=15.0, gt=0,
        description="After the run (or Ctrl-C), how long Locust processes get to exit after SIGTERM "
        "before they are killed.",
    )
    flush_interval_s: float = Field(
        default=1.0, gt=0, description="Workers ship buffered records to the master this often."
    )

    def to_env(self) -> dict[str, str]:
        """The settings the locustfile needs, as the BENCH_* variables it reads."""
        return {"BENCH_DRAIN_TIMEOUT_S": str(self.drain_timeout_s),
                "BENCH_FLUSH_INTERVAL_S": str(self.flush_interval_s)}

    @classmethod
    def from_env(cls, env: dict[str, str]) -> LocustSettings:
        """The locustfile's side of ``to_env``; unset variables keep the defaults above."""
        kw = {}
        for name, key in (("drain_timeout_s", "BENCH_DRAIN_TIMEOUT_S"), ("flush_interval_s", "BENCH_FLUSH_INTERVAL_S")):
            if env.get(key):
                kw[name] = float(env[key])
        return cls.model_validate(kw)


def default(field: str):
    """A field's default, for CLI option defaults (so they are never repeated)."""
    return LocustSettings.model_fields[field].default
