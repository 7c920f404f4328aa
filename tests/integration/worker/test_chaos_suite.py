"""The chaos suite, in CI: every fault of testsupport/chaos.py on one real local stack (Redis with
AUTH, Prometheus, the simulator, two MinerU workers under supervisord), with short faults.

For each: nothing lost, nothing ended twice, dead letters only where the document is at fault
(with the right kind), and the pipeline back at full width within 10 s of the fault's end (a
server or stack that had to start again: from the moment it was healthy).
benchmarks/chaos.py runs the same scenarios with 20 s faults and prints the table.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import psutil
import pytest
import redis

from stack.secrets import redis_password, resolve_api_key
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
    print(detail)  # `pytest -rP` shows the table's rows
    assert out.lost == 0 and out.duplicated == 0, detail
    assert out.dead == EXPECTED_DEAD.get(scenario, {}), detail
    assert out.recovery_s is not None, detail
    # The hang too: a request the server lost is cut as soon as a newer request or a 1-token
    # probe is answered (worker/client.py), not at its deadline.
    assert out.recovery_s < RECOVERY_TARGET_S, detail
    if scenario == "worker-kill":
        assert "still alive: 0 of" in out.notes[0], detail  # render processes died with it
    if scenario == "parser-failure":
        assert all("page 2: MinerU" in n for n in out.notes), detail
    if scenario == "down":
        assert "(not drained): 0" in out.notes[0], detail


def test_no_secret_in_ps_config_or_logs_and_no_unauthenticated_control(rig: ChaosRig) -> None:
    """After every fault above (restarts included): neither the API key nor the Redis password is
    on any command line of the stack, in supervisord's config (owner-only) or in any log; Redis
    refuses a client without the password; Prometheus refuses `POST /-/quit` and its admin API."""
    paths, spec = rig.stack.paths, rig.spec
    key, password = resolve_api_key(spec, paths), redis_password(paths)
    assert key and password
    procs = rig.stack.processes()
    assert len(procs) >= 5  # supervisord, Redis, Prometheus, the simulator, the workers
    for p in procs:
        try:
            line = " ".join(p.cmdline())
        except psutil.NoSuchProcess:
            continue
        assert key not in line and password not in line, f"secret on the command line of {p.pid}"
    conf = paths.supervisord_conf
    assert key not in conf.read_text() and password not in conf.read_text()
    assert conf.stat().st_mode & 0o077 == 0
    logs = [log for log in paths.logs.rglob("*") if log.is_file()]
    assert len(logs) >= 4, logs  # supervisord's and each component's: the secrets are looked for in them
    for log in logs:
        text = log.read_text(errors="replace")
        assert key not in text and password not in text, f"secret in {log}"

    anonymous = redis.Redis(host=spec.local.host, port=spec.queue.port, socket_timeout=5)
    with pytest.raises(redis.AuthenticationError):
        anonymous.ping()
    prom = f"http://{spec.local.host}:{spec.observability.prometheus_port}"
    quit_ = httpx.post(f"{prom}/-/quit", timeout=5)
    snap = httpx.post(f"{prom}/api/v1/admin/tsdb/snapshot", timeout=5)
    # refused because the stack leaves them off (no --web.enable-lifecycle, --web.enable-admin-api),
    # not merely failing
    assert (quit_.status_code, quit_.text.strip()) == (403, "Lifecycle API is not enabled."), quit_.text
    assert snap.status_code != 200 and snap.json()["error"] == "admin APIs disabled", snap.text
    assert httpx.get(f"{prom}/-/ready", timeout=5).status_code == 200  # still up
