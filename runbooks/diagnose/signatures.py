"""Match log text against the known failure signatures kept as data (signatures.yaml); each
names the case it points to, one diagnose names (runbooks/cases.py), checked when the file loads."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

from runbooks.cases import DIAGNOSED, Case

SIGNATURES_FILE = Path(__file__).with_name("signatures.yaml")


@dataclass(frozen=True)
class Signature:
    id: str
    case: Case
    pattern: re.Pattern[str]
    meaning: str
    source: str


@dataclass(frozen=True)
class Match:
    signature: Signature
    line: str

    def evidence(self, where: str) -> str:
        return (f"{where}: log line matches '{self.signature.id}' ({self.signature.meaning}): "
                f"{self.line.strip()[:200]}")


@lru_cache(maxsize=4)
def load_signatures(path: Path = SIGNATURES_FILE) -> tuple[Signature, ...]:
    data = yaml.safe_load(path.read_text())
    out = []
    for item in data["signatures"]:
        try:
            pattern = re.compile(item["pattern"])
        except re.error as exc:
            raise ValueError(f"{path}: signature {item.get('id')!r}: bad pattern: {exc}") from exc
        out.append(Signature(item["id"], _case(path, item), pattern, item["meaning"], item["source"]))
    return tuple(out)


def _case(path: Path, item: dict[str, str]) -> Case:
    case = item.get("case")
    known = {c.value: c for c in DIAGNOSED}
    if case not in known:
        raise ValueError(f"{path}: signature {item.get('id')!r}: case {case!r} is not a case diagnose names; "
                         f"use one of: {', '.join(known)} (runbooks/cases.py)")
    return known[case]


def match_logs(text: str, signatures: tuple[Signature, ...] | None = None) -> list[Match]:
    """The last matching line of each signature, most recent signature first."""
    sigs = signatures if signatures is not None else load_signatures()
    found: dict[str, tuple[int, Match]] = {}
    for number, line in enumerate(text.splitlines()):
        for sig in sigs:
            if sig.pattern.search(line):
                found[sig.id] = (number, Match(sig, line))
    return [m for _, m in sorted(found.values(), key=lambda t: -t[0])]
