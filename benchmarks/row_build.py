"""Cost of building one chat row in the sender's hot path: the tuple display the sender used to
write by position, against bench.records.chat_row called by field name (the same values, the
streamed success path's 23 fields and an error row's fewer).

    python benchmarks/row_build.py [--number 200000] [--repeat 7]

Prints ns per row, the best of ``--repeat`` timings of ``--number`` rows each (timeit's minimum:
the least disturbed by other work on the machine).
"""

from __future__ import annotations

import argparse
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.records import chat_row  # noqa: E402

NS, TOKS, CONTENT = list(range(64)), None, None


def positional(rid: str, phase: str, process: int, intended: int, sent: int, wall: float, headers: int, end: int,
               text: str | None) -> tuple:
    return ("chat", rid, phase, process, intended, sent, wall, headers, NS, TOKS, CONTENT, end, 200, None, None, 16,
            16, 64, "usage", 64, text, "length", "chatcmpl-1")


def by_name(rid: str, phase: str, process: int, intended: int, sent: int, wall: float, headers: int, end: int,
            text: str | None) -> tuple:
    return chat_row(request_id=rid, phase=phase, process=process, intended_ns=intended, sent_ns=sent,  # type: ignore[arg-type]
                    wall_sent_s=wall, headers_ns=headers, event_ns=NS, event_tokens=TOKS, event_content=CONTENT,
                    end_ns=end, status=200, error=None, error_detail=None, prompt_tokens=16, server_prompt_tokens=16,
                    output_tokens=64, output_tokens_source="usage", max_tokens=64, output_text=text,
                    finish_reason="length", response_id="chatcmpl-1")


def error_positional(rid: str, phase: str, process: int, intended: int, sent: int, wall: float, end: int) -> tuple:
    return ("chat", rid, phase, process, intended, sent, wall, None, [], None, None, end, None, "connect_error",
            "refused", 16, None, None, None, 64, None, None, None)


def error_by_name(rid: str, phase: str, process: int, intended: int, sent: int, wall: float, end: int) -> tuple:
    return chat_row(request_id=rid, phase=phase, process=process, intended_ns=intended, sent_ns=sent,  # type: ignore[arg-type]
                    wall_sent_s=wall, headers_ns=None, event_ns=[], event_tokens=None, event_content=None, end_ns=end,
                    error="connect_error", error_detail="refused", prompt_tokens=16, max_tokens=64)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--number", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    assert positional("p0-1", "measure", 0, 1, 2, 3.0, 4, 5, None) == by_name("p0-1", "measure", 0, 1, 2, 3.0, 4, 5,
                                                                             None)
    assert error_positional("p0-1", "measure", 0, 1, 2, 3.0, 5) == error_by_name("p0-1", "measure", 0, 1, 2, 3.0, 5)
    cases = {"success row, by position": "positional('p0-1', 'measure', 0, 1, 2, 3.0, 4, 5, None)",
             "success row, by name (chat_row)": "by_name('p0-1', 'measure', 0, 1, 2, 3.0, 4, 5, None)",
             "error row, by position": "error_positional('p0-1', 'measure', 0, 1, 2, 3.0, 5)",
             "error row, by name (chat_row)": "error_by_name('p0-1', 'measure', 0, 1, 2, 3.0, 5)"}
    print(f"python {sys.version.split()[0]}; best of {args.repeat} x {args.number} rows")
    for label, stmt in cases.items():
        best = min(timeit.repeat(stmt, globals=globals(), number=args.number, repeat=args.repeat))
        print(f"{label:34s} {best / args.number * 1e9:7.1f} ns/row")
    return 0


if __name__ == "__main__":
    sys.exit(main())
