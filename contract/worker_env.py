"""Environment variables the worker reads: the contract between the worker and whatever starts
it (the local stack's launcher, the Kubernetes Deployment, Compose).

The spec itself reaches the worker as a file (``SPLITSTACK_SPEC_FILE``); these carry only what
differs per replica or per platform. The API key and the queue URL are read from the variables
the spec names (``inference_servers[].api_key.env``, ``queue.url_env``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import quote, urlsplit, urlunsplit

if TYPE_CHECKING:
    from contract.spec import Spec

ENV_SPEC_FILE = "SPLITSTACK_SPEC_FILE"  # JSON of the resolved spec, written by the launcher
ENV_SERVER_URL = "SPLITSTACK_SERVER_URL"  # base URL of the inference server the pool calls
ENV_OUTPUT_DIR = "SPLITSTACK_OUTPUT_DIR"  # the output store as mounted in the worker
ENV_METRICS_PORT = "SPLITSTACK_WORKER_METRICS_PORT"  # /metrics, /healthz and /readyz
ENV_URL_ALLOWLIST = "SPLITSTACK_WORKER_URL_ALLOWLIST"  # comma-separated URL prefixes jobs may name
ENV_DRAIN_TIMEOUT = "SPLITSTACK_WORKER_DRAIN_TIMEOUT_S"  # SIGTERM drain budget, seconds
ENV_RSS_FRACTION = "SPLITSTACK_WORKER_RSS_LIMIT_FRACTION"  # recycle above this share of the limit
ENV_ALLOW_TORCH = "SPLITSTACK_WORKER_ALLOW_TORCH"  # "1" lets MinerU import torch (off by default)
ENV_MODEL_SOURCE = "SPLITSTACK_MODEL_SOURCE"  # monolithic mode: the model the worker loads
# MinerU's own variable for its page-render process pool; the worker sizes it to its CPU budget
# unless the operator set it.
ENV_RENDER_PROCESSES = "MINERU_PDF_RENDER_THREADS"
# The Redis AUTH password when queue.password names no variable (the local stack always sets
# one; a URL that carries its own password wins).
ENV_REDIS_PASSWORD = "SPLITSTACK_REDIS_PASSWORD"


def redis_password_env(spec: Spec) -> str:
    """The variable that holds the queue's Redis password."""
    return spec.queue.password.env if spec.queue.password else ENV_REDIS_PASSWORD


def with_password(url: str, password: str | None) -> str:
    """``url`` with ``password`` as its Redis AUTH password, unless it carries one already."""
    parts = urlsplit(url)
    if not password or parts.password or parts.scheme not in ("redis", "rediss"):
        return url
    return urlunsplit(parts._replace(netloc=f":{quote(password, safe='')}@{parts.netloc}"))
