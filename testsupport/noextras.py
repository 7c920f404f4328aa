"""Run a module as the core install would, without any optional extra.

``python -m testsupport.noextras MODULE [ARGS...]`` makes every library that an extra of
pyproject.toml brings (contract.extras.EXTRA_MODULES) fail to import, then runs MODULE as
``python -m MODULE ARGS``. Tests use it to prove that commands never vanish and that a missing
extra is named, not shown as a traceback.
"""

from __future__ import annotations

import importlib.abc
import runpy
import sys

from contract.extras import EXTRA_MODULES

BLOCKED = frozenset().union(*EXTRA_MODULES.values()) | {"opentelemetry"}


class _Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def main() -> None:
    sys.meta_path.insert(0, _Blocker())
    module, sys.argv = sys.argv[1], sys.argv[1:]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
