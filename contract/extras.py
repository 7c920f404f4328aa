"""Optional dependencies (the extras of pyproject.toml), imported where they are used.

A missing extra fails loudly at the point of use, naming what needs it and the command that
installs it; nothing is skipped silently because an import failed.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType


class MissingExtra(RuntimeError):
    """An optional dependency is not installed; the message says which extra brings it."""


# The top-level modules each extra of pyproject.toml brings (what an ImportError can name).
EXTRA_MODULES: dict[str, frozenset[str]] = {
    "infra": frozenset({"pulumi", "pulumi_kubernetes", "pulumi_policy", "jsonschema"}),
    "infra-eks": frozenset({"pulumi_eks", "pulumi_aws"}),
    "infra-gke": frozenset({"pulumi_gcp"}),
    "infra-aks": frozenset({"pulumi_azure_native"}),
    "sim": frozenset({"uvicorn", "PIL"}),
    "worker": frozenset({"mineru", "mineru_vl_utils", "pypdfium2", "pypdf", "reportlab", "loguru", "PIL",
                        "obstore"}),
    "bench": frozenset({"locust", "gevent", "reportlab"}),
    "runbooks": frozenset({"kubernetes"}),
    "cluster": frozenset({"cryptography", "kubernetes"}),
    "vllm": frozenset({"vllm", "torch", "transformers", "tokenizers", "safetensors", "huggingface_hub"}),
    "otel": frozenset({"opentelemetry"}),
    "dev": frozenset({"kubernetes_validate", "jsonschema"}),
}


def _message(module: str, extra: str, feature: str) -> str:
    return (f"{feature} needs the Python package that provides '{module}', which is not installed: "
            f"`pip install 'splitstack[{extra}]'` (from a checkout: `pip install -e '.[{extra}]'` or "
            "`make setup`)")


def require(module: str, extra: str, feature: str) -> ModuleType:
    """Import ``module`` (a library of the extra, or a module of ours built on one) or raise
    MissingExtra naming ``extra`` when what is missing is one of that extra's libraries."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        missing = (exc.name or "").split(".")[0]
        if missing not in EXTRA_MODULES.get(extra, frozenset()) and missing != module.split(".")[0]:
            raise  # something else is broken: its own error says more than ours would
        raise MissingExtra(_message(missing or module, extra, feature)) from exc


def check(module: str, extra: str, feature: str) -> None:
    """Like :func:`require` without importing (for packages a child process will import)."""
    try:
        found = importlib.util.find_spec(module) is not None
    except ImportError:  # a dotted name whose parent package is missing
        found = False
    if not found:
        raise MissingExtra(_message(module, extra, feature))
