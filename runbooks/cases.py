"""Every runbook case: the situations `runbook diagnose` names and the actions handle.

A case is a :class:`Case` member: its value is what a report, the audit log and
runbooks/diagnose/signatures.yaml spell; ``heading`` is the line diagnose reports for it;
``requirement`` the requirement it answers (docs/requirements.md), where one does. The cases
diagnose can name come first, in priority order (an outage before a slowdown, a cause before a
symptom: when several hold, the first is the one reported); the cases only an action reports
(maintenance, tuning, the migration) follow. docs/runbooks.md lists them
(tests/unit/runbooks/test_cases.py keeps the two in step).
"""

from __future__ import annotations

from enum import StrEnum


class Case(StrEnum):
    heading: str
    requirement: str | None
    diagnosed: bool

    def __new__(cls, value: str, heading: str, requirement: str | None = None,
                diagnosed: bool = True) -> Case:
        member = str.__new__(cls, value)
        member._value_ = value
        member.heading = heading
        member.requirement = requirement
        member.diagnosed = diagnosed
        return member

    # What diagnose names, in priority order.
    PLATFORM_UNREACHABLE = "platform-unreachable", "the platform did not answer"
    STACK_DOWN = "stack-down", "the local stack is not running"
    SERVER_CRASHLOOP_CUDA = ("server-crashloop-cuda", "server down: GPU driver crash (CUDA error / Xid)",
                             "RUNBOOK-3")
    SERVER_DOWN_MODEL_LOAD = ("server-down-model-load",
                              "server down: model loading failure (Hugging Face token or network)", "RUNBOOK-4")
    SERVER_DOWN_OOM = "server-down-oom", "server down: out of memory (OOMKilled)", "RUNBOOK-2"
    GPU_NODE_FAILURE = "gpu-node-failure", "GPU node failure", "RUNBOOK-13"
    SERVER_DOWN = "server-down", "server down", "RUNBOOK-1"
    QUEUE_DOWN = "queue-down", "queue down: Redis does not answer"
    SERVER_HUNG = "server-hung", "server hung: it answers /health but requests time out unanswered"
    SERVER_ERRORS = "server-errors", "server failing: it answers /health but every request fails"
    WORKERS_DOWN = "workers-down", "workers down: a worker process is not running"
    BREAKER_STUCK_OPEN = "breaker-stuck-open", "worker circuit breaker stuck open", "RUNBOOK-9"
    PIPELINE_STALLED = "pipeline-stalled", "pipeline stalled: documents wait and none finishes"
    QUEUE_BACKLOG = "queue-backlog", "high latency: queue backlog at the inference server", "RUNBOOK-6"
    KV_FRAGMENTATION = ("kv-fragmentation", "high latency: KV cache near full (fragmentation / memory pressure)",
                        "RUNBOOK-8")
    LARGE_PDFS = "large-pdfs", "high latency without a backlog: large or complex PDFs", "RUNBOOK-7"
    BREAKER_RECOVERING = ("breaker-recovering",
                          "circuit breaker recovering: the server answers again, trials are under way", "RUNBOOK-9")
    WORKERS_STARTING = ("workers-starting",
                        "a worker is starting again (it restarted by itself; the others took over its jobs)")
    HEALTHY = "healthy", "no runbook case matches: the deployment looks healthy"

    # What only an action reports (diagnose never names these).
    COMPONENT_RESTART = "component-restart", "a component restarted in place", None, False
    TUNING = "tuning", "performance tuning: a server or worker knob changed", None, False
    WORKER_SECURITY_PATCH = ("worker-security-patch", "worker image update, rolling", "RUNBOOK-11", False)
    VLLM_UPGRADE = "vllm-upgrade", "inference server upgrade, with validation and rollback", "RUNBOOK-10", False
    ROLLBACK = "rollback", "the one-flag rollback to monolithic workers, or the return to split", "MIG-7", False
    MIGRATION = ("production rollout: split share of documents",
                 "production rollout: a share of documents on split", "MIG-5", False)

    @property
    def priority(self) -> int:
        """0 is the most urgent; only cases diagnose names have one."""
        if not self.diagnosed:
            raise ValueError(f"case {self.value!r} is not one diagnose names: it has no priority")
        return DIAGNOSED.index(self)


DIAGNOSED: tuple[Case, ...] = tuple(c for c in Case if c.diagnosed)
