"""Per-request records: what the engine observed, before any metric is derived.

Raw observations only (monotonic nanosecond timestamps relative to the run's t0, token counts
from the server's usage), so every metric can be recomputed later from the JSONL file with the
formulas in bench/metrics.py. One JSON object per line; ``kind`` says which workload wrote it.
"""

from __future__ import annotations

import marshal
import struct
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field

Phase = Literal["warmup", "measure", "cooldown"]


class RequestRecord(BaseModel):
    """One request of the ``chat`` workload (OpenAI chat completions, streamed or not)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["chat"] = "chat"
    request_id: str = Field(description="Client-side id, unique in the run.")
    phase: Phase = Field(description="Warmup and cooldown records are kept but never measured.")
    process: int = Field(default=0, description="Index of the client process that sent it.")
    intended_ns: int = Field(description="Scheduled send time, ns after t0 (open loop: arrival).")
    sent_ns: int = Field(description="Actual send time, ns after t0 (just before the request is written).")
    wall_sent_s: float = Field(description="Unix time of the send, for joining with server logs.")
    headers_ns: int | None = Field(default=None, description="Response status + headers received, ns after t0.")
    event_ns: list[int] = Field(
        default_factory=list,
        description="For each SSE event carrying generated output: arrival of its first byte, ns after t0.",
    )
    event_tokens: list[int] = Field(
        default_factory=list,
        description="Completion tokens each of those events added (from continuous_usage_stats).",
    )
    event_content: list[bool] = Field(
        default_factory=list, description="True where the event carried non-empty delta.content."
    )
    end_ns: int | None = Field(default=None, description="Last byte of the response, ns after t0.")
    status: int | None = Field(default=None, description="HTTP status; None when no response came.")
    error: str | None = Field(default=None, description="Error reason (class of failure); None = success.")
    error_detail: str | None = Field(default=None, description="Server message or exception text.")
    prompt_tokens: int | None = Field(default=None, description="Exact prompt length from /tokenize.")
    server_prompt_tokens: int | None = Field(default=None, description="usage.prompt_tokens from the server.")
    output_tokens: int | None = Field(default=None, description="usage.completion_tokens from the server.")
    output_tokens_source: Literal["usage", "tokenizer", "events"] | None = Field(
        default=None, description="Where output_tokens came from: the server's usage; counted after the run "
        "with the run's tokenizer (a server that sends no usage); or one per event with text (no usage and no "
        "tokenizer).")
    max_tokens: int | None = Field(default=None, description="Requested max_tokens.")
    output_text: str | None = Field(
        default=None, description="Generated text when kept (the scenario's keep_output: true).")
    finish_reason: str | None = None
    response_id: str | None = Field(
        default=None, description="The server's response id (\"id\" of the first SSE event or of the body): "
        "joins the record with the server's logs and the simulator's GET /sim/timings.")

    @property
    def ok(self) -> bool:
        return self.error is None


class PipelineRecord(BaseModel):
    """One document of the ``pipeline`` workload (a PDF through the worker queue)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["pipeline"] = "pipeline"
    request_id: str = Field(description="Job id in the queue.")
    phase: Phase
    process: int = 0
    document: str = Field(description="Source PDF (path or name).")
    pages: int = Field(ge=0, description="Pages of the document.")
    intended_ns: int
    sent_ns: int = Field(description="Enqueue time, ns after t0.")
    wall_sent_s: float
    end_ns: int | None = Field(default=None, description="Output observed written, ns after t0.")
    status: Literal["done", "failed", "timeout"] = "timeout"
    error: str | None = None
    error_detail: str | None = None
    server_requests: int | None = Field(default=None, description="Inference requests the job made.")
    output_sha256: str | None = Field(default=None, description="Hash of the markdown output.")
    processing_s: float | None = Field(default=None, description="Worker-reported processing time (job record), s.")
    worker_pages: int | None = Field(default=None, description="Pages the worker reported (job record).")
    output_verified: bool | None = Field(
        default=None, description="Output read from the store (True), missing there (False), not checked (None).")

    @property
    def ok(self) -> bool:
        return self.error is None and self.status == "done"


AnyRecord = RequestRecord | PipelineRecord

# -- rows: how the engine writes a finished request while the run goes ---------------------------
# A row is a tuple of plain values in the record's field order (no model object is built in the
# hot path), marshalled to the run's spool file as soon as the request ends, so nothing of it
# stays in the client's memory. Uniform event lists are elided: ``event_tokens`` None when every
# event added one token, ``event_content`` None when every event had content.
CHAT_FIELDS = tuple(RequestRecord.model_fields)
PIPELINE_FIELDS = tuple(PipelineRecord.model_fields)
_I_NS, _I_TOK, _I_CONTENT = (CHAT_FIELDS.index(f) for f in ("event_ns", "event_tokens", "event_content"))


def pack_events(ns: list[int], tokens: list[int], content: list[bool]) -> tuple[list[int], list[int] | None,
                                                                               list[bool] | None]:
    n = len(ns)
    return ns, None if tokens.count(1) == n else tokens, None if content.count(True) == n else content


def chat_row(*, request_id: str, phase: Phase, process: int, intended_ns: int, sent_ns: int, wall_sent_s: float,
             headers_ns: int | None, event_ns: list[int], event_tokens: list[int] | None,
             event_content: list[bool] | None, end_ns: int | None, status: int | None = None,
             error: str | None = None, error_detail: str | None = None, prompt_tokens: int | None = None,
             server_prompt_tokens: int | None = None, output_tokens: int | None = None,
             output_tokens_source: str | None = None, max_tokens: int | None = None, output_text: str | None = None,
             finish_reason: str | None = None, response_id: str | None = None) -> tuple[Any, ...]:
    """A chat request's row, its values named as RequestRecord's fields (events packed by
    pack_events). The one place that knows the field order: one function call, no object built
    (tests/unit/bench/test_bench_records.py checks the order against RequestRecord)."""
    return ("chat", request_id, phase, process, intended_ns, sent_ns, wall_sent_s, headers_ns, event_ns, event_tokens,
            event_content, end_ns, status, error, error_detail, prompt_tokens, server_prompt_tokens, output_tokens,
            output_tokens_source, max_tokens, output_text, finish_reason, response_id)


def to_row(rec: AnyRecord) -> tuple[Any, ...]:
    """A record as a row (records the engine makes itself: overload errors, pipeline documents)."""
    if isinstance(rec, PipelineRecord):
        return tuple(rec.__dict__.values())
    values = list(rec.__dict__.values())
    values[_I_NS], values[_I_TOK], values[_I_CONTENT] = pack_events(rec.event_ns, rec.event_tokens,
                                                                    rec.event_content)
    return tuple(values)


def from_row(row: tuple[Any, ...]) -> AnyRecord:
    if row[0] == "pipeline":
        return PipelineRecord.model_construct(**dict(zip(PIPELINE_FIELDS, row)))
    values = dict(zip(CHAT_FIELDS, row))
    n = len(row[_I_NS])
    if row[_I_TOK] is None:
        values["event_tokens"] = [1] * n
    if row[_I_CONTENT] is None:
        values["event_content"] = [True] * n
    return RequestRecord.model_construct(**values)


_FRAME = struct.Struct("<I")


class Spool:
    """Rows written to a file as the run goes (marshal, length-framed), so a long run's records
    live on disk rather than in the client's memory. Writes go out in ~1 MB blocks."""

    FLUSH_BYTES = 1 << 20

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh = path.open("wb")
        self._buf = bytearray()
        self.rows = 0

    def append(self, row: tuple[Any, ...]) -> None:
        data = marshal.dumps(row)
        buf = self._buf
        buf += _FRAME.pack(len(data))
        buf += data
        self.rows += 1
        if len(buf) >= self.FLUSH_BYTES:
            self._fh.write(buf)
            buf.clear()

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.write(self._buf)
            self._buf.clear()
            self._fh.close()


def read_spool(path: Path) -> Iterator[tuple[Any, ...]]:
    data = memoryview(path.read_bytes())
    i, size, unpack = 0, len(data), _FRAME.unpack_from
    while i < size:
        (n,) = unpack(data, i)
        yield marshal.loads(data[i + 4:i + 4 + n])
        i += 4 + n


def parse_record(line: bytes | str) -> AnyRecord:
    data = orjson.loads(line)
    if data.get("kind") == "pipeline":
        return PipelineRecord.model_validate(data)
    return RequestRecord.model_validate(data)


def write_jsonl(path: Path, records: Iterable[AnyRecord]) -> int:
    n = 0
    with path.open("wb") as fh:
        for rec in records:
            # the fields are plain JSON types: __dict__ skips model_dump's per-field machinery
            fh.write(orjson.dumps(rec.__dict__) + b"\n")
            n += 1
    return n


def read_jsonl(path: Path) -> Iterator[AnyRecord]:
    with path.open("rb") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield parse_record(line)
            except ValueError as exc:
                raise ValueError(f"{path}:{lineno}: not a bench record ({exc}); "
                                 "was the file written by `bench run`?") from None
