"""Structured JSON logs, one object per line, with the job id and correlation id of the job the
current asyncio task is working on (contextvars, so concurrent jobs never mix their ids)."""

from __future__ import annotations

import contextvars
import importlib.util
import json
import logging
import sys
import time
from typing import Any

job_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("job_id", default=None)
correlation_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "correlation_id", default=None
)


class JsonFormatter(logging.Formatter):
    def __init__(self, worker: str) -> None:
        super().__init__()
        self.worker = worker

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": round(record.created, 3),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)),
            "level": record.levelname.lower(),
            "logger": record.name,
            "worker": self.worker,
            "msg": record.getMessage(),
        }
        job_id, correlation_id = job_id_var.get(), correlation_id_var.get()
        if job_id:
            out["job_id"] = job_id
        if correlation_id:
            out["correlation_id"] = correlation_id
        out.update(getattr(record, "fields", {}))
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def setup_logging(worker: str, level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonFormatter(worker))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    _quiet_mineru()


def _quiet_mineru() -> None:
    # MinerU logs through loguru at INFO per window and draws tqdm bars: route its warnings and
    # errors into our JSON stream and drop the chatter.
    if importlib.util.find_spec("loguru") is None:
        return  # MinerU (which brings loguru and logs through it) is not installed: nothing to quiet
    from loguru import logger as loguru_logger
    loguru_logger.remove()
    mineru_log = logging.getLogger("mineru")
    loguru_logger.add(lambda m: mineru_log.warning(str(m).rstrip()), level="WARNING", format="{message}")


def log(logger: logging.Logger, level: int, msg: str, **fields: Any) -> None:
    logger.log(level, msg, extra={"fields": fields})
