"""What a backend is: PDF bytes in, markdown + content list out, all requests through the
worker's :class:`~worker.client.InferenceClient`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol


@dataclass
class BackendResult:
    markdown: str
    content_list: list[dict[str, Any]]
    pages: int
    extra: dict[str, Any] = field(default_factory=dict)


class Backend(Protocol):
    name: str
    version: str

    async def process(self, pdf: bytes, out_dir: Path, first_page_index: int) -> BackendResult:
        """Parse ``pdf``; images go under ``out_dir/images``; page_idx in the content list
        is offset by ``first_page_index`` (0-based page of ``pdf``'s first page in the original
        document) so fanned-out parts merge in page order."""
        ...

    def recycle(self) -> None:
        """Drop per-process state that may grow (MinerU's predictor, caches)."""
        ...
