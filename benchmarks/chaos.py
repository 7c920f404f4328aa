"""The chaos table: faults in the middle of a run of documents on the real local stack, and what
became of every document (testsupport/chaos.py holds the scenarios and the definitions).

Run: .venv/bin/python benchmarks/chaos.py [--fault-s 20] [--documents 16] [--scenarios hang,slow,...]

The local stack as `splitstack up --engine sim --workers 2` starts it (Redis with AUTH,
Prometheus, the simulator with profile 'instant', two MinerU workers under supervisord) on free
ports, `queue.visibility_timeout_s` 5. Per scenario: documents done / dead-lettered (kind) /
lost / duplicated, and seconds from the fault's end until every worker has finished a document
again (target: under 10 s, plus the start time of what had to start again). Prints the load
average beside the table: take the figures on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # testsupport/ is not installed


def main() -> None:
    from testsupport.chaos import HEADER, SCENARIOS, ChaosRig

    parser = argparse.ArgumentParser()
    parser.add_argument("--fault-s", type=float, default=20.0)
    parser.add_argument("--documents", type=int, default=16)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help=", ".join(SCENARIOS))
    args = parser.parse_args()
    names = [n for n in args.scenarios.split(",") if n]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        sys.exit(f"unknown scenario(s) {unknown}; known: {', '.join(SCENARIOS)}")
    rig = ChaosRig(Path(tempfile.mkdtemp(prefix="chaos-")))
    t0 = time.monotonic()
    rig.up()
    print(f"stack up in {time.monotonic() - t0:.1f} s", flush=True)
    outcomes = []
    try:
        for name in names:
            load = os.getloadavg()[0]
            out = SCENARIOS[name](rig, args.fault_s, args.documents)
            outcomes.append(out)
            print(f"{out.row()}  load {load:.1f}" + "".join(f"\n    {n}" for n in out.notes), flush=True)
    finally:
        rig.down()
    print()
    print(HEADER)
    for out in outcomes:
        print(out.row())
    print(f"\nload average (1, 5, 15 min) at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"{os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
