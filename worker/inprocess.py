"""Monolithic mode: MinerU's VLM pipeline with an engine inside the worker process.

``deployment_mode: monolithic`` is the rollback from the split topology: every worker loads
the model itself. ``worker_pool.in_process.backend`` names how:

* ``vlm-vllm-engine`` (production, one GPU per worker): MinerU's ``vllm-async-engine``
  backend, vLLM's ``AsyncLLM`` in the worker process (the asynchronous twin of the CLI's
  ``vlm-vllm-engine``: a long-lived asyncio worker calls ``aio_doc_analyze``);
* ``vlm-transformers`` (CPU-capable): MinerU's ``transformers`` backend;
* ``private-server``: not in-process; the local stack's twin, where each worker calls an
  engine of its own over HTTP (worker/mineru_backend.py does that part).

The engine loads through MinerU's own ``ModelSingleton`` (the options its CLI passes), before
the worker reports ready, so the engine's load time is part of the worker's start-to-ready.

What each backend needs is checked first (:func:`preflight`), so a worker that cannot load its
engine exits with a message naming the setting to change, not with a traceback minutes into
the load. MinerU 3.4's transformers backend needs ``transformers<5`` (its ``vlm`` extra pins
``transformers>=4.57.3,<5``: with 5.x, mineru-vl-utils reads ``max_position_embeddings`` from
the top of a Qwen2-VL config, where transformers 5 no longer keeps it), ``accelerate`` (it loads
with ``device_map``) and ``torchvision`` (``AutoProcessor`` builds Qwen2-VL's video processor,
which requires it).
"""

from __future__ import annotations

import asyncio
import gc
import importlib.metadata
import importlib.util
import os
from pathlib import Path

from contract.enums import InProcessBackend
from contract.worker_env import ENV_MODEL_SOURCE
from worker.backends import BackendResult

SETTING = "worker_pool.in_process.backend"
# MinerU's own backend names for aio_doc_analyze.
MINERU_BACKEND = {
    InProcessBackend.vllm_engine: "vllm-async-engine",
    InProcessBackend.transformers: "transformers",
}


class EngineUnavailable(Exception):
    """The in-process engine cannot load here; the message names the setting and the fix."""


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _major(version: str) -> int:
    head = version.split(".", 1)[0]
    return int(head) if head.isdigit() else 0


def _importable(module: str) -> str | None:
    """None when ``module`` imports; else why not (ModuleNotFoundError, a broken wheel...)."""
    if importlib.util.find_spec(module) is None:
        return "not installed"
    try:
        __import__(module)
    except Exception as exc:  # noqa: BLE001 - a broken wheel raises anything (RuntimeError, OSError)
        return f"{type(exc).__name__}: {str(exc)[:160]}"
    return None


def missing_requirements(backend: InProcessBackend) -> list[str]:
    """What this process lacks to run ``backend`` (empty: it can try to load)."""
    problems: list[str] = []
    if backend is InProcessBackend.transformers:
        tf = _version("transformers")
        if tf is None:
            problems.append("transformers is not installed (MinerU's vlm extra pins >=4.57.3,<5)")
        elif _major(tf) >= 5:
            problems.append(f"transformers {tf} is installed; MinerU 3.4's transformers backend "
                            "needs >=4.57.3,<5 (its vlm extra's pin)")
        if _version("accelerate") is None:
            problems.append("accelerate is not installed (MinerU loads the model with device_map)")
        why = _importable("torchvision")
        if why is not None:
            problems.append(f"torchvision does not import ({why}); Qwen2-VL's processor needs it")
    elif backend is InProcessBackend.vllm_engine:
        why = _importable("vllm")
        if why is not None:
            problems.append(f"vllm does not import ({why})")
        else:
            import torch

            if not torch.cuda.is_available():
                problems.append("no CUDA GPU is visible (vLLM's engine in the worker needs one GPU "
                                "per worker)")
    return problems


def preflight(backend: InProcessBackend) -> None:
    problems = missing_requirements(backend)
    if not problems:
        return
    fix = ("on a CPU-only machine set it to 'vlm-transformers' in an environment that has "
           "MinerU's vlm extra (transformers<5, accelerate, torchvision)"
           if backend is InProcessBackend.vllm_engine else
           "install MinerU's vlm extra in the worker's environment (pip install 'mineru[vlm]'), "
           "or run 'vlm-vllm-engine' on a GPU")
    raise EngineUnavailable(
        f"deployment_mode monolithic: {SETTING}={backend.value!r} cannot load here: "
        + "; ".join(problems) + f". Fix: {fix}; or roll back to deployment_mode 'split' "
        "(`runbook rollback --to split`)")


def resolve_model_path(configured: str | None, server_source: str, env: dict[str, str]) -> str:
    """worker_pool.in_process.model_path, else SPLITSTACK_MODEL_SOURCE (a pod), else the
    worker server's model.source. A relative or absolute path must be a model folder."""
    path = configured or env.get(ENV_MODEL_SOURCE) or server_source
    looks_like_path = path.startswith(("/", ".", "~"))
    if looks_like_path and not (Path(path).expanduser() / "config.json").is_file():
        raise EngineUnavailable(
            f"worker_pool.in_process.model_path {path!r} is not a model folder (no config.json); "
            "point it at the downloaded model, or at a Hugging Face id the pod may download")
    return path


class InProcessMinerUBackend:
    """MinerU's VLM pipeline with the predictor MinerU builds for an in-process engine."""

    def __init__(self, backend: InProcessBackend, model_path: str) -> None:
        import mineru.version

        self.name = backend.value
        self.version = mineru.version.__version__
        self.mineru_backend = MINERU_BACKEND[backend]
        self.model_path = model_path
        self._predictor = None

    def load(self) -> None:
        """Load the engine now (seconds to minutes): the worker is ready only after this."""
        from mineru.backend.vlm.vlm_analyze import ModelSingleton

        os.environ.setdefault("TQDM_DISABLE", "1")
        self._predictor = ModelSingleton().get_model(self.mineru_backend, self.model_path, None)

    async def process(self, pdf: bytes, out_dir: Path, first_page_index: int) -> BackendResult:
        from mineru.backend.vlm.vlm_analyze import aio_doc_analyze
        from mineru.backend.vlm.vlm_middle_json_mkcontent import union_make
        from mineru.data.data_reader_writer import FileBasedDataWriter
        from mineru.utils.enum_class import MakeMode

        if self._predictor is None:
            await asyncio.to_thread(self.load)
        image_dir = out_dir / "images"
        image_dir.mkdir(parents=True, exist_ok=True)
        middle_json, _ = await aio_doc_analyze(
            pdf, image_writer=FileBasedDataWriter(str(image_dir)), predictor=self._predictor,
            backend=self.mineru_backend, model_path=self.model_path)
        pdf_info = middle_json["pdf_info"]
        markdown, content_list = await asyncio.to_thread(
            lambda: (union_make(pdf_info, MakeMode.MM_MD, "images"),
                     union_make(pdf_info, MakeMode.CONTENT_LIST, "images")))
        for item in content_list:
            if isinstance(item.get("page_idx"), int):
                item["page_idx"] += first_page_index
        if not any(image_dir.iterdir()):
            image_dir.rmdir()
        return BackendResult(markdown, content_list, len(pdf_info), {"blocks": len(content_list)})

    def recycle(self) -> None:
        # The engine (GPU memory, minutes to load) stays: MinerU's ModelSingleton holds it.
        gc.collect()
