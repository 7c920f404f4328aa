"""Backend ``page-vlm``: one chat request per page image, for inference tiers that serve a
page-level OCR model (DeepSeek-OCR's "Convert the document to markdown.", a Qwen2.5-VL
extraction prompt) instead of MinerU's layout + per-block model.

Pages are rendered ``page_window`` at a time (bounded memory) and sent concurrently through the
worker's :class:`~worker.client.InferenceClient` (same retries, breaker, metrics, traces).
"""

from __future__ import annotations

import asyncio
import base64
import io
from pathlib import Path
from typing import Any

import pypdfium2 as pdfium

from worker.backends import BackendResult
from worker.client import InferenceClient
from worker.errors import ServerAnswerError
from worker.pdfcheck import _PDFIUM_LOCK

PAGE_DPI = 144  # enough for OCR models (DeepSeek-OCR works at 1024 px on the long side)
MAX_LONG_SIDE_PX = 1600


def _render(pdf: bytes, first: int, last: int) -> list[str]:
    """PNG data URLs of pages [first, last] (0-based, inclusive)."""
    urls = []
    with _PDFIUM_LOCK:
        doc = pdfium.PdfDocument(pdf)
        try:
            for i in range(first, last + 1):
                page = doc[i]
                w, h = page.get_size()
                scale = min(PAGE_DPI / 72, MAX_LONG_SIDE_PX / max(w, h, 1))
                image = page.render(scale=scale).to_pil()
                buf = io.BytesIO()
                image.save(buf, format="PNG")
                urls.append("data:image/png;base64," + base64.b64encode(buf.getvalue()).decode())
                page.close()
        finally:
            doc.close()
    return urls


class PageVlmBackend:
    name = "page-vlm"
    version = "1"

    def __init__(self, inference: InferenceClient, model_name: str, prompt: str, page_window: int) -> None:
        self.inference = inference
        self.model_name = model_name
        self.prompt = prompt
        self.page_window = page_window

    def body(self, image_url: str) -> dict[str, Any]:
        return {
            "model": self.model_name,
            "messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": image_url}},
                {"type": "text", "text": self.prompt},
            ]}],
            "temperature": 0.0,
        }

    async def _page(self, url: str) -> str:
        data = await self.inference.post_chat(self.body(url))
        try:
            choice = data["choices"][0]
            content = choice["message"]["content"] or ""
        except (KeyError, IndexError, TypeError) as exc:
            raise ServerAnswerError(200, f"answer has no choices[0].message.content: {str(data)[:200]}") from exc
        if choice.get("finish_reason") not in ("stop", "length"):
            raise ServerAnswerError(200, f"unexpected finish_reason {choice.get('finish_reason')!r}")
        return content.removesuffix("<|im_end|>").strip()

    async def process(self, pdf: bytes, out_dir: Path, first_page_index: int) -> BackendResult:
        with _PDFIUM_LOCK:
            doc = pdfium.PdfDocument(pdf)
            count = len(doc)
            doc.close()
        texts: list[str] = []
        for start in range(0, count, self.page_window):
            end = min(count, start + self.page_window) - 1
            urls = await asyncio.to_thread(_render, pdf, start, end)
            texts.extend(await asyncio.gather(*(self._page(u) for u in urls)))
            del urls
        content_list = [{"type": "text", "text": t, "page_idx": first_page_index + i}
                        for i, t in enumerate(texts)]
        return BackendResult("\n\n".join(texts) + "\n", content_list, count, {})

    def recycle(self) -> None:
        return None
