"""MinerU in-process (its Python API, VLM HTTP-client backend), not the CLI.

The CLI of MinerU 3.x starts a temporary local ``mineru-api`` server per call; a long-lived
worker calls ``aio_doc_analyze`` with a predictor it builds once, and renders markdown and the
content list with MinerU's own ``union_make``.

Instrumentation without patching MinerU's internals: mineru-vl-utils 1.2 offers no transport or
event-hook option on its HTTP client (``HttpVlmClient`` builds its httpx clients in private
methods). Its public surface is enough: ``MinerUClient.client`` is a public attribute holding a
``VlmClient``, and ``HttpVlmClient``'s public ``build_request_body`` / ``get_response_content``
build MinerU's exact request and parse its answer. :class:`ObservedVlmClient` subclasses
``HttpVlmClient`` overriding only the public ``aio_predict`` to send that body through the
worker's client (retries, breaker, trace context, metrics), so the wire protocol stays MinerU's.
"""

from __future__ import annotations

import asyncio
import gc
import os
from pathlib import Path
from typing import Any

from worker.backends import BackendResult
from worker.client import InferenceClient
from worker.errors import ServerAnswerError


def configure_mineru_env(page_window: int) -> None:
    """MinerU reads these at call time; set them before the first document."""
    # Pages rendered and held in memory at once: bounds RSS for long documents.
    os.environ["MINERU_PROCESSING_WINDOW_SIZE"] = str(page_window)
    os.environ.setdefault("TQDM_DISABLE", "1")


def _observed_client_class():
    from mineru_vl_utils.vlm_client.base_client import RequestError, ServerError
    from mineru_vl_utils.vlm_client.http_client import HttpVlmClient
    from mineru_vl_utils.vlm_client.utils import aio_image_to_bytes_list_and_format

    class ObservedVlmClient(HttpVlmClient):
        def __init__(self, inference: InferenceClient, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.inference = inference

        async def aio_predict(self, image, prompt="", sampling_params=None, priority=None) -> str:
            images, image_format = await aio_image_to_bytes_list_and_format(image)
            body = self.build_request_body(
                system_prompt=self.system_prompt, image=images, prompt=prompt,
                sampling_params=sampling_params, image_format=image_format, priority=priority,
            )
            data = await self.inference.post_chat(body)
            try:
                return self.get_response_content(data)
            except (RequestError, ServerError) as exc:
                raise ServerAnswerError(200, f"MinerU rejected the answer: {exc}") from exc

    return ObservedVlmClient


class MinerUBackend:
    name = "vlm-http-client"

    def __init__(self, inference: InferenceClient, model_name: str, concurrency: int,
                 request_timeout_s: float) -> None:
        import mineru.version

        self.version = mineru.version.__version__
        self.inference = inference
        self.model_name = model_name
        self.concurrency = concurrency
        self.request_timeout_s = request_timeout_s
        self._predictor = None

    def _new_predictor(self):
        from mineru_vl_utils import MinerUClient

        url = self.inference.base_url + "/"  # trailing '/' keeps any path prefix (vl-utils < 2)
        predictor = MinerUClient(
            backend="http-client", model_name=self.model_name, server_url=url,
            skip_model_name_checking=True,  # readiness already checked /v1/models
            max_concurrency=self.concurrency, http_timeout=int(self.request_timeout_s),
            max_retries=0, use_tqdm=False,
            # the same options MinerU's own ModelSingleton passes for this backend
            enable_table_formula_eq_wrap=True, image_analysis=True,
            enable_cross_page_table_merge=True,
        )
        predictor.client = _observed_client_class()(
            self.inference, model_name=self.model_name, server_url=url,
            skip_model_name_checking=True, max_concurrency=self.concurrency,
            http_timeout=int(self.request_timeout_s), max_retries=0,
            system_prompt=predictor.client.system_prompt, allow_truncated_content=True,
        )
        return predictor

    async def process(self, pdf: bytes, out_dir: Path, first_page_index: int) -> BackendResult:
        if self._predictor is None:
            self._predictor = self._new_predictor()
        return await analyze(pdf, out_dir, first_page_index, self._predictor, backend="http-client")

    def recycle(self) -> None:
        self._predictor = None
        gc.collect()


async def analyze(pdf: bytes, out_dir: Path, first_page_index: int, predictor: Any, **options: Any) -> BackendResult:
    """MinerU's VLM pipeline on one PDF with ``predictor`` (an HTTP client or an in-process
    engine; ``options`` go to ``aio_doc_analyze``): markdown, content list (page_idx shifted to
    the original document's) and crops under ``out_dir/images``."""
    from mineru.backend.vlm.vlm_analyze import aio_doc_analyze
    from mineru.backend.vlm.vlm_middle_json_mkcontent import union_make
    from mineru.data.data_reader_writer import FileBasedDataWriter
    from mineru.utils.enum_class import MakeMode

    image_dir = out_dir / "images"
    image_dir.mkdir(parents=True, exist_ok=True)
    # What MinerU raises on the document is classified by the caller (worker/parse_errors.py).
    middle_json, _ = await aio_doc_analyze(pdf, image_writer=FileBasedDataWriter(str(image_dir)),
                                           predictor=predictor, **options)
    pdf_info = middle_json["pdf_info"]
    # union_make walks every block; off the event loop so heartbeats keep going.
    markdown, content_list = await asyncio.to_thread(
        lambda: (union_make(pdf_info, MakeMode.MM_MD, "images"),
                 union_make(pdf_info, MakeMode.CONTENT_LIST, "images")))
    for item in content_list:
        if isinstance(item.get("page_idx"), int):
            item["page_idx"] += first_page_index
    if not any(image_dir.iterdir()):
        image_dir.rmdir()
    return BackendResult(markdown, content_list, len(pdf_info), {"blocks": len(content_list)})
