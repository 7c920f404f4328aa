"""Every test can fail: each test function holds an assert, a pytest.raises/warns/fail, or calls a
helper (in tests/ or testsupport/) that does. A test that only runs code passes whatever it does."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECKS = {"raises", "warns", "fail", "assert_called_once_with", "assert_called_with", "assert_not_called",
          "assert_called_once", "assert_any_call", "assert_awaited"}
Function = ast.FunctionDef | ast.AsyncFunctionDef


def _functions(root: Path) -> Iterator[tuple[Path, Function]]:
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                yield path, node


def _direct(fn: Function) -> tuple[bool, set[str]]:
    """Whether ``fn`` checks something itself, and the names it calls."""
    calls: set[str] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Assert):
            return True, calls
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
            if name in CHECKS:
                return True, calls
            if name:
                calls.add(name)
    return False, calls


def unchecked_tests(roots: list[Path]) -> list[str]:
    """Test functions under ``roots`` that check nothing, as path:line::name. A called helper is
    resolved by its bare name over every function under ``roots`` (generous: a name that any
    checking helper bears counts)."""
    found = [(path, fn) for root in roots for path, fn in _functions(root)]
    direct: dict[str, tuple[bool, set[str]]] = {}
    for _, fn in found:
        has, calls = _direct(fn)
        old_has, old_calls = direct.get(fn.name, (False, set()))
        direct[fn.name] = (has or old_has, calls | old_calls)

    def checks(name: str, seen: frozenset[str]) -> bool:
        if name not in direct or name in seen:
            return False
        has, calls = direct[name]
        return has or any(checks(c, seen | {name}) for c in calls)

    unchecked = []
    for path, fn in found:
        if not fn.name.startswith("test") or not path.name.startswith(("test_", "conftest")):
            continue
        has, calls = _direct(fn)
        if not (has or any(checks(c, frozenset({fn.name})) for c in calls)):
            where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
            unchecked.append(f"{where}:{fn.lineno}::{fn.name}")
    return unchecked


def test_every_test_checks_something() -> None:
    assert unchecked_tests([ROOT / "tests", ROOT / "testsupport"]) == []


def test_a_test_that_only_runs_code_is_found(tmp_path: Path) -> None:
    (tmp_path / "test_x.py").write_text(
        "import pytest\n"
        "def helper(x):\n    assert x\n"
        "def runs(x):\n    return x\n"
        "def test_asserts():\n    assert 1\n"
        "def test_raises():\n    with pytest.raises(ValueError):\n        int('x')\n"
        "def test_via_helper():\n    helper(1)\n"
        "def test_only_runs():\n    runs(1)\n"
        "async def test_async_only_runs():\n    runs(2)\n")
    found = unchecked_tests([tmp_path])
    assert [f.rsplit("::", 1)[1] for f in found] == ["test_only_runs", "test_async_only_runs"]
