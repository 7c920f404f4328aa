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

``vlm-transformers`` is loaded by the worker itself, with the options MinerU's
``ModelSingleton`` passes to ``MinerUClient``, because MinerU 3.4's own loader breaks in three
places that are not about the model: it passes ``device_map`` (which needs ``accelerate``), it
builds Qwen2-VL's full processor with ``AutoProcessor`` (whose video processor needs
``torchvision``; MinerU sends images only), and mineru-vl-utils 1.2 reads
``max_position_embeddings`` from the top of the model config, where transformers 5 no longer
keeps it for Qwen2-VL. The worker loads without ``device_map`` (then moves the model to the
GPU when one is visible), builds an image-only processor when ``torchvision`` does not import,
and copies the text config's ``max_position_embeddings`` up. Everything after loading is
MinerU's: its ``TransformersVlmClient`` generates, its pipeline parses.

What each backend needs is checked first (:func:`preflight`), so a worker that cannot load its
engine exits with a message naming the setting to change, not with a traceback minutes into
the load.
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
from worker.mineru_backend import analyze

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
            problems.append("transformers is not installed (MinerU's vlm extra pins >=4.57.3)")
        elif _major(tf) < 4:
            problems.append(f"transformers {tf} is installed; Qwen2-VL needs >=4.57.3")
        why = _importable("torch")
        if why is not None:
            problems.append(f"torch does not import ({why})")
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
    fix = ("on a CPU-only machine set it to 'vlm-transformers' (slow; torch and transformers)"
           if backend is InProcessBackend.vllm_engine else
           "install torch and transformers in the worker's environment (MinerU's vlm extra), "
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


def _image_only_processor(model_path: str):
    """Qwen2-VL's processor without its video processor (which needs torchvision)."""
    from transformers import AutoImageProcessor, AutoTokenizer, ProcessorMixin
    from transformers.models.qwen2_vl.processing_qwen2_vl import Qwen2VLProcessor

    class ImageOnlyQwen2VLProcessor(Qwen2VLProcessor):
        def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
            self.image_token = getattr(tokenizer, "image_token", None) or "<|image_pad|>"
            self.video_token = getattr(tokenizer, "video_token", None) or "<|video_pad|>"
            self.image_token_id = (getattr(tokenizer, "image_token_id", None)
                                   or tokenizer.convert_tokens_to_ids(self.image_token))
            self.video_token_id = (getattr(tokenizer, "video_token_id", None)
                                   or tokenizer.convert_tokens_to_ids(self.video_token))
            ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    return ImageOnlyQwen2VLProcessor(AutoImageProcessor.from_pretrained(model_path), tokenizer,
                                     chat_template=getattr(tokenizer, "chat_template", None))


def load_transformers_predictor(model_path: str):
    """MinerU's transformers predictor, loaded as MinerU's ModelSingleton does, minus the three
    steps that break here (module docstring)."""
    import torch
    from mineru_vl_utils import MinerUClient
    from transformers import AutoProcessor, Qwen2VLForConditionalGeneration

    model = Qwen2VLForConditionalGeneration.from_pretrained(model_path, dtype="auto")
    if torch.cuda.is_available():
        model = model.to("cuda")
    if getattr(model.config, "max_position_embeddings", None) is None:
        model.config.max_position_embeddings = model.config.get_text_config().max_position_embeddings
    if _importable("torchvision") is None:
        processor = AutoProcessor.from_pretrained(model_path, use_fast=True)
    else:
        processor = _image_only_processor(model_path)
    if getattr(processor, "chat_template", None) is None:
        template = Path(model_path) / "chat_template.jinja"
        if template.is_file():
            processor.chat_template = template.read_text()
    return MinerUClient(
        backend="transformers", model=model, processor=processor, batch_size=1, use_tqdm=False,
        # the same options MinerU's own ModelSingleton passes
        enable_table_formula_eq_wrap=True, image_analysis=True, enable_cross_page_table_merge=True)


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
        os.environ.setdefault("TQDM_DISABLE", "1")
        if self.mineru_backend == "transformers":
            self._predictor = load_transformers_predictor(self.model_path)
            return
        from mineru.backend.vlm.vlm_analyze import ModelSingleton

        self._predictor = ModelSingleton().get_model(self.mineru_backend, self.model_path, None)

    async def process(self, pdf: bytes, out_dir: Path, first_page_index: int) -> BackendResult:
        if self._predictor is None:
            await asyncio.to_thread(self.load)
        return await analyze(pdf, out_dir, first_page_index, self._predictor, backend=self.mineru_backend,
                             model_path=self.model_path)

    def recycle(self) -> None:
        # The engine (GPU memory, minutes to load) stays: MinerU's ModelSingleton holds it.
        gc.collect()
