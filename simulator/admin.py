"""``/sim/*``: the simulator's own admin API (faults at run time, MinerU plans, engine state)."""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING
from urllib.parse import parse_qs

import orjson

from .asgi import bad_request, read_body, respond
from .faults import FaultError

if TYPE_CHECKING:
    from .app import SimApp

log = logging.getLogger("simulator")
CRASH_EXIT_CODE = 70


def crash() -> None:
    """The injected crash: exit at once, like a process killed mid-request (no graceful drain)."""
    log.error("injected crash: exiting with status %d", CRASH_EXIT_CODE)
    logging.shutdown()
    os._exit(CRASH_EXIT_CODE)


class AdminAPI:
    def __init__(self, app: SimApp) -> None:
        self.app = app

    async def get_faults(self, scope, receive, send):
        return await respond(send, 200, self.app.faults.spec.model_dump_json().encode())

    async def put_faults(self, scope, receive, send):
        try:
            changes = orjson.loads(await read_body(receive))
            if not isinstance(changes, dict):
                raise FaultError("body must be a JSON object of FaultSpec fields")
            spec = self.app.faults.update(changes)
        except (orjson.JSONDecodeError, FaultError) as exc:
            raise bad_request(f"invalid fault settings: {exc}") from exc
        self.app.scheduler.kv_capacity_factor = spec.kv_capacity_factor
        self.app.engine.poke()  # a larger KV cache may unblock the queue
        log.warning("faults now: %s", spec.model_dump_json())
        status = await respond(send, 200, spec.model_dump_json().encode())
        if self.app.faults.should_crash():
            crash()
        return status

    async def get_plans(self, scope, receive, send):
        body = {"layouts": list(self.app.answerer.plans), "requests_by_kind": dict(self.app.answerer.kind_counts)}
        return await respond(send, 200, orjson.dumps(body))

    async def delete_plans(self, scope, receive, send):
        self.app.answerer.plans.clear()
        self.app.answerer.kind_counts.clear()
        return await respond(send, 200, b"{}")

    async def get_timings(self, scope, receive, send):
        """Per-request server timestamps (simulator/timings.py); ``?since=N`` = entries after the one
        numbered N (the previous answer's ``last_seq``), ``?clear=true`` empties the log after answering."""
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        since_s = query.get("since", ["0"])[-1]
        try:
            since = int(since_s)
        except ValueError:
            raise bad_request(f"since={since_s!r} is not an integer: pass the last_seq of a previous "
                              "GET /sim/timings answer (or 0 for everything kept)", "since") from None
        clear = query.get("clear", ["false"])[-1].lower()
        if clear not in ("true", "false", "1", "0"):
            raise bad_request(f"clear={clear!r}: use clear=true or clear=false", "clear")
        body = orjson.dumps(self.app.timings.body(since))
        if clear in ("true", "1"):
            self.app.timings.clear()
        return await respond(send, 200, body)

    async def delete_timings(self, scope, receive, send):
        return await respond(send, 200, orjson.dumps({"cleared": self.app.timings.clear()}))

    async def state(self, scope, receive, send):
        s = self.app.scheduler
        body = {"profile": self.app.profile.name, "running": len(s.running), "waiting": len(s.waiting),
                "kv_usage": s.kv_usage, "kv_blocks_total": s.total_blocks, "preemptions": s.num_preemptions,
                "limits": self.app.limits.model_dump(), "requests_seen": self.app.faults.requests}
        return await respond(send, 200, orjson.dumps(body))
