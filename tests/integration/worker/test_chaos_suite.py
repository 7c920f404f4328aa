"""The chaos suite, in CI: every fault of testsupport/chaos.py on one real local stack (Redis with
AUTH, Prometheus, the simulator, two MinerU workers under supervisord), with short faults.

For each: nothing lost, nothing ended twice, dead letters only where the document is at fault
(with the right kind), and the pipeline back at full width within 10 s of the fault's end (a
server or stack that had to start again: from the moment it was healthy).
benchmarks/chaos.py runs the same scenarios with 20 s faults and prints the table.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testsupport.chaos import EXPECTED_DEAD, SCENARIOS, ChaosRig

pytestmark = pytest.mark.integration

FAULT_S = 4.0
DOCUMENTS = 8
RECOVERY_TARGET_S = 10.0


@pytest.fixture(scope="module")
def rig(tmp_path_factory) -> Iterator[ChaosRig]:
    r = ChaosRig(tmp_path_factory.mktemp("chaos"))
    r.up()
    try:
        yield r
    finally:
        r.down()
        assert r.stack.processes() == [], "processes left behind"


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_fault_loses_nothing_and_recovers(rig: ChaosRig, scenario: str) -> None:
    out = SCENARIOS[scenario](rig, FAULT_S, DOCUMENTS)
    detail = f"{out.row()} {out.notes}"
    assert out.lost == 0 and out.duplicated == 0, detail
    assert out.dead == EXPECTED_DEAD.get(scenario, {}), detail
    assert out.recovery_s is not None and out.recovery_s < RECOVERY_TARGET_S, detail
    if scenario == "worker-kill":
        assert "still alive: 0 of" in out.notes[0], detail  # render processes died with it
    if scenario == "parser-failure":
        assert all("page 2: MinerU" in n for n in out.notes), detail
    if scenario == "down":
        assert "(not drained): 0" in out.notes[0], detail
