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


def _message(module: str, extra: str, feature: str) -> str:
    return (f"{feature} needs the Python package that provides '{module}', which is not installed: "
            f"`pip install 'splitstack[{extra}]'` (from a checkout: `pip install -e '.[{extra}]'` or "
            "`make setup`)")


def require(module: str, extra: str, feature: str) -> ModuleType:
    """Import ``module`` or raise MissingExtra naming ``extra``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if exc.name is not None and not module.startswith(exc.name):
            raise  # the package is there but broken: its own error says more than ours would
        raise MissingExtra(_message(module, extra, feature)) from exc


def check(module: str, extra: str, feature: str) -> None:
    """Like :func:`require` without importing (for packages a child process will import)."""
    if importlib.util.find_spec(module) is None:
        raise MissingExtra(_message(module, extra, feature))
