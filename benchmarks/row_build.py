"""Cost of building one chat row in the sender's hot path (bench/chat.py): before, a tuple
display written by position inside the sender; now, bench.records.chat_row called with every
value by field name. Same values, the streamed success path's 22 named fields and an error
row's 14; the values are local variables, as in the sender.

    python benchmarks/row_build.py [--number 200000] [--repeat 7]

Prints ns per row, the best of ``--repeat`` timings of ``--number`` rows each (timeit's minimum:
the least disturbed by other work on the machine), and the difference.
"""

from __future__ import annotations

import argparse
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.records import chat_row  # noqa: E402

SETUP = ("rid, phase, process, intended, sent, wall, headers, end = 'p0-1', 'measure', 0, 1, 2, 3.0, 4, 5\n"
         "ns, toks, content, text, prompt, max_tokens = list(range(64)), None, None, None, 16, 64\n")
CASES = {
    "success row": (
        "('chat', rid, phase, process, intended, sent, wall, headers, ns, toks, content, end, 200, None, None, "
        "prompt, 16, 64, 'usage', max_tokens, text, 'length', 'chatcmpl-1')",
        "chat_row(request_id=rid, phase=phase, process=process, intended_ns=intended, sent_ns=sent, "
        "wall_sent_s=wall, headers_ns=headers, event_ns=ns, event_tokens=toks, event_content=content, end_ns=end, "
        "status=200, error=None, error_detail=None, prompt_tokens=prompt, server_prompt_tokens=16, "
        "output_tokens=64, output_tokens_source='usage', max_tokens=max_tokens, output_text=text, "
        "finish_reason='length', response_id='chatcmpl-1')"),
    "error row": (
        "('chat', rid, phase, process, intended, sent, wall, None, [], None, None, end, None, 'connect_error', "
        "'refused', prompt, None, None, None, max_tokens, None, None, None)",
        "chat_row(request_id=rid, phase=phase, process=process, intended_ns=intended, sent_ns=sent, "
        "wall_sent_s=wall, headers_ns=None, event_ns=[], event_tokens=None, event_content=None, end_ns=end, "
        "error='connect_error', error_detail='refused', prompt_tokens=prompt, max_tokens=max_tokens)"),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--number", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    env = {"chat_row": chat_row}
    print(f"python {sys.version.split()[0]}; best of {args.repeat} x {args.number} rows; ns per row")
    for label, (by_position, by_name) in CASES.items():
        ns: dict[str, object] = dict(env)
        exec(SETUP + f"a = {by_position}\nb = {by_name}\n", ns)
        assert ns["a"] == ns["b"], f"{label}: the two rows differ"
        t = [min(timeit.repeat(stmt, SETUP, number=args.number, repeat=args.repeat, globals=env)) / args.number * 1e9
             for stmt in (by_position, by_name)]
        print(f"{label:12s} by position (before) {t[0]:7.1f}   chat_row by name (now) {t[1]:7.1f}   "
              f"difference {t[1] - t[0]:+7.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
