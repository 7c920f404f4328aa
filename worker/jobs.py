"""A job on the stream: which PDF, which pages, options, and the ids that follow it around.

On the wire a job is one stream entry with a single field ``job`` holding this model as JSON,
so the dead-letter stream can carry the original job byte for byte.
"""

from __future__ import annotations

import re
import time
import uuid

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from redis.typing import EncodableT, FieldT

JOB_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"  # safe as a directory name


class PageRange(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    first: int = Field(ge=1, description="First page, 1-based, inclusive.")
    last: int = Field(ge=1, description="Last page, 1-based, inclusive.")

    @model_validator(mode="after")
    def _ordered(self) -> PageRange:
        if self.last < self.first:
            raise ValueError(f"page range {self.first}-{self.last}: last page is before the first")
        return self

    @property
    def count(self) -> int:
        return self.last - self.first + 1


class PartOf(BaseModel):
    """Set on the page-range jobs of a fanned-out document."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    parent_id: str
    index: int = Field(ge=0)
    total: int = Field(ge=1)


class Job(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    job_id: str = Field(default_factory=lambda: uuid.uuid4().hex, pattern=JOB_ID_PATTERN)
    source: str = Field(description="Absolute path of a PDF on the worker's filesystem, or an allowed URL.")
    pages: PageRange | None = Field(default=None, description="Only these pages; None = all.")
    language: str | None = Field(default=None, description="Document language hint (e.g. 'en', 'ch').")
    correlation_id: str | None = Field(default=None, description="Caller's id, echoed in logs and metadata.")
    traceparent: str | None = Field(default=None, description="W3C traceparent of the caller.")
    submitted_at: float = Field(default_factory=time.time, description="Unix time of submission, s.")
    part_of: PartOf | None = None

    @field_validator("source")
    @classmethod
    def _source_kind(cls, value: str) -> str:
        if not (value.startswith("/") or re.match(r"^https?://", value)):
            raise ValueError(
                f"source {value!r} is neither an absolute path nor an http(s) URL; give the "
                "absolute path of a PDF the workers can read, or a URL from the allow-list"
            )
        return value

    def to_fields(self) -> dict[FieldT, EncodableT]:
        """The stream entry, typed as redis-py's ``xadd`` takes it."""
        return {"job": self.model_dump_json(exclude_none=True)}

    @classmethod
    def from_fields(cls, fields: dict) -> Job:
        raw = fields.get("job") if "job" in fields else fields.get(b"job")
        if raw is None:
            raise ValueError(f"stream entry has no 'job' field (fields: {sorted(map(str, fields))})")
        return cls.model_validate_json(raw)
