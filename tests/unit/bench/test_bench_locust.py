"""`bench locust` pieces that need no server: settings, command lines, the collection check,
ingestion of a two-worker records folder, and the process supervisor (with real processes)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import psutil
import pytest
from pydantic import ValidationError

from bench.locust.ingest import collection_check, ingest
from bench.locust.launch import RunPaths, deadline_s, load_argv, locust_env, master_argv, worker_argv
from bench.locust.manifest import MANIFEST, clear, read_manifest
from bench.locust.procs import Fleet, LocustRunError, wait_for
from bench.locust.settings import LocustSettings, default
from bench.records import RequestRecord, write_jsonl
from bench.scenario import load_scenario
from bench.target import Target

MS = 1_000_000


def _worker(index: int, sent: int, received: int | None = None, drained: bool = True, abandoned: int = 0) -> dict:
    return {"client_id": f"host_{index}", "tag": f"host-{100 + index}", "index": index,
            "records_received": sent if received is None else received, "records_sent": sent if drained else None,
            "abandoned": abandoned if drained else None, "drained": drained}


def _manifest(*workers: dict, expected: int = 2, connected: list[str] | None = None) -> dict:
    return {"mode": "distributed", "expected_workers": expected, "workers": list(workers),
            "connected_at_start": connected if connected is not None else [w["client_id"] for w in workers]}


# ---- settings ------------------------------------------------------------------------------
def test_settings_travel_to_the_locustfile_through_env():
    s = LocustSettings(drain_timeout_s=7.5, flush_interval_s=0.25)
    assert LocustSettings.from_env(s.to_env()).drain_timeout_s == 7.5
    assert LocustSettings.from_env({}).drain_timeout_s == default("drain_timeout_s") == LocustSettings().drain_timeout_s


def test_settings_reject_bad_values_naming_the_field():
    with pytest.raises(ValidationError, match="drain_timeout_s"):
        LocustSettings(drain_timeout_s=0)


# ---- command lines ---------------------------------------------------------------------------
def test_load_argv_forwards_rate_and_users_as_locust_options(tmp_path):
    argv = load_argv(LocustSettings(users=6, run_time_s=9), 12.0, tmp_path / "locust")
    joined = " ".join(argv)
    assert "--headless -u 6" in joined and "-t 9s" in joined
    assert "--bench-users 6 --bench-rate-rps 12.0" in joined  # the master forwards custom options to workers
    assert f"--json-file {tmp_path}/locust_final_stats" in joined


def test_master_and_worker_argv():
    s = LocustSettings(expect_workers_max_wait_s=17)
    assert master_argv("127.0.0.1", 6000, 3, s) == ["--master", "--master-bind-host", "127.0.0.1",
                                                    "--master-bind-port", "6000", "--expect-workers", "3",
                                                    "--expect-workers-max-wait", "17"]
    assert worker_argv("10.0.0.5", 6000) == ["--worker", "--master-host", "10.0.0.5", "--master-port", "6000"]


def test_deadline_covers_every_wait():
    s = LocustSettings(run_time_s=20, expect_workers_max_wait_s=30, drain_timeout_s=5, shutdown_grace_s=4)
    assert deadline_s(s, distributed=True) > deadline_s(s, distributed=False) > 20 + 5 + 4


def test_api_key_travels_in_env_not_argv(tmp_path):
    env = locust_env("chat-smoke", Target("http://h:1", "m", "sekret"), None, LocustSettings(), tmp_path, base={})
    assert env["BENCH_LOCUST_API_KEY"] == "sekret"
    assert json.loads(env["BENCH_TARGET_JSON"])["api_key_env"] == "BENCH_LOCUST_API_KEY"
    assert "sekret" not in env["BENCH_TARGET_JSON"] and env["BENCH_RECORDS_DIR"] == str(tmp_path)
    worker_env = locust_env("chat-smoke", Target("http://h:1", "m"), "MY_KEY", LocustSettings(), None, base={})
    assert "BENCH_RECORDS_DIR" not in worker_env
    assert json.loads(worker_env["BENCH_TARGET_JSON"])["api_key_env"] == "MY_KEY"


# ---- the collection check ---------------------------------------------------------------------
def test_collection_check_passes_when_everything_arrived():
    c = collection_check(_manifest(_worker(0, 50), _worker(1, 40)))
    assert c["passed"] and c["measured"] == "90 of 90 records from 2 of 2 workers, 0 abandoned"


@pytest.mark.parametrize("manifest, why", [
    (_manifest(_worker(0, 50), _worker(1, 40, received=38)), "worker 1 (host-101): the master got 38 of 40 records"),
    (_manifest(_worker(0, 50), _worker(1, 40, drained=False)), "worker 1 (host-101) never confirmed its drain"),
    (_manifest(_worker(0, 50), expected=2), "only 1 of 2 workers were connected when the load started"),
    (_manifest(_worker(0, 50), _worker(1, 40, abandoned=3)), "3 requests were still in flight after the drain"),
    (_manifest(_worker(0, 50), connected=["host_0", "host_9"]),
     "workers ['host_9'] were connected at the start but sent no records"),
])
def test_collection_check_names_what_is_missing(manifest, why):
    c = collection_check(manifest)
    assert not c["passed"] and why in c["why"]


# ---- ingestion of a two-worker folder ----------------------------------------------------------
def _records(process: int, n: int, t0_ns: int) -> list[RequestRecord]:
    out = []
    for i in range(n):
        sent = t0_ns + i * 100 * MS + process * 7 * MS
        ev = [sent + 20 * MS + k * MS for k in range(8)]
        out.append(RequestRecord(request_id=f"host-{process}-{i}", phase="measure", process=process, intended_ns=sent,
                                 sent_ns=sent, wall_sent_s=sent / 1e9, headers_ns=sent + 10 * MS, event_ns=ev,
                                 event_tokens=[1] * 8, event_content=[True] * 8, end_ns=ev[-1] + MS, status=200,
                                 output_tokens=8, prompt_tokens=16, max_tokens=8))
    return out


def test_ingest_merges_workers_and_adds_the_collection_check(tmp_path):
    t0 = 1_700_000_000 * 10**9
    write_jsonl(tmp_path / "records-host-100.jsonl", _records(0, 60, t0))
    write_jsonl(tmp_path / "records-host-101.jsonl", _records(1, 60, t0))
    (tmp_path / MANIFEST).write_text(json.dumps(_manifest(_worker(0, 60), _worker(1, 60, received=59))))
    recs, s = ingest(tmp_path, load_scenario("chat-smoke"), Target("http://h:1", "m"), 2, 1.0, 1.0)
    assert len(recs) == 120 and {r.process for r in recs} == {0, 1}
    assert recs[0].sent_ns == 0 and all(a.sent_ns <= b.sent_ns for a, b in zip(recs, recs[1:]))
    assert {r.phase for r in recs} == {"warmup", "measure", "cooldown"}
    check = next(c for c in s["validity"]["checks"] if c["check"] == "locust records complete")
    assert not check["passed"] and not s["validity"]["valid"]  # a lost record makes the run invalid
    assert s["run"]["client"]["tool"] == "locust" and len(s["run"]["client"]["locust"]["workers"]) == 2


def test_ingest_with_a_rate_checks_that_locust_achieved_it(tmp_path):
    write_jsonl(tmp_path / "records-a.jsonl", _records(0, 100, 10**18))  # 10 req/s
    _, s = ingest(tmp_path, load_scenario("chat-smoke"), Target("http://h:1", "m"), 2, 1, 1, rate_rps=20.0)
    achieved = next(c for c in s["validity"]["checks"] if c["check"] == "achieved / target rate")
    assert s["run"]["load_label"] == "constant 20 req/s" and not achieved["passed"]
    _, s = ingest(tmp_path, load_scenario("chat-smoke"), Target("http://h:1", "m"), 2, 1, 1, rate_rps=10.0)
    assert next(c for c in s["validity"]["checks"] if c["check"] == "achieved / target rate")["passed"]


def test_ingest_counts_worker_cpu_warnings_from_the_master_log(tmp_path):
    write_jsonl(tmp_path / "records-a.jsonl", _records(0, 40, 10**18))
    log = "Worker host_1 (index 1) exceeded cpu threshold (will only log this once per worker)\n"
    _, s = ingest(tmp_path, load_scenario("chat-smoke"), Target("http://h:1", "m"), 1, 0.5, 0.5, log)
    cpu = next(c for c in s["validity"]["checks"] if c["check"] == "locust CPU warnings")
    assert cpu["measured"] == 1 and not cpu["passed"] and "--processes N" in cpu["why"]


def test_ingest_of_an_empty_folder_says_where_records_are(tmp_path):
    with pytest.raises(FileNotFoundError, match="pass the folder of the headless process or master"):
        ingest(tmp_path, load_scenario("chat-smoke"), Target("http://h:1", "m"), 1, 1, 1)


def test_clear_removes_only_a_previous_runs_records(tmp_path):
    for name in ("records-a.jsonl", MANIFEST, "notes.txt"):
        (tmp_path / name).write_text("{}\n")
    clear(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"] and read_manifest(tmp_path) is None


# ---- the supervisor, with real processes ------------------------------------------------------------
SLEEPER = [sys.executable, "-c", "import subprocess, sys, time; "
           "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"]


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE  # orphans' zombies wait for pid 1
    except psutil.NoSuchProcess:
        return False


def _descendants(fleet: Fleet, n: int) -> set[int]:
    end = time.monotonic() + 10
    while len(pids := fleet.pids()) < n and time.monotonic() < end:
        time.sleep(0.05)
    return pids


def test_fleet_close_stops_every_process_and_its_children(tmp_path):
    with Fleet(tmp_path, grace_s=2) as fleet:
        fleet.start("a", SLEEPER, {})
        fleet.start("b", SLEEPER, {})
        pids = _descendants(fleet, 4)
        assert len(pids) == 4
    assert not [p for p in pids if _alive(p)]


def test_wait_for_stops_at_the_deadline_with_the_log(tmp_path):
    with Fleet(tmp_path, grace_s=2) as fleet:
        p = fleet.start("master", [sys.executable, "-c", "print('hello from master', flush=True); "
                                   "import time; time.sleep(60)"], {})
        t0 = time.monotonic()
        with pytest.raises(LocustRunError, match=r"locust master did not finish within 1 s(.|\n)*hello from master"):
            wait_for(p, 1.0)
        assert time.monotonic() - t0 < 5
    assert p.proc.poll() is not None


def test_wait_for_fails_early_when_a_worker_dies(tmp_path):
    with Fleet(tmp_path, grace_s=2) as fleet:
        master = fleet.start("master", SLEEPER, {})
        worker = fleet.start("worker-0", [sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"], {})
        with pytest.raises(LocustRunError, match=r"locust worker-0 exited with code 3 while the run was going on"):
            wait_for(master, 30, must_live=[worker])
        # once the master marked the drain done, workers quitting is the normal end
        marker = tmp_path / "done"
        marker.write_text("x")
        done = fleet.start("master2", [sys.executable, "-c", "import time; time.sleep(0.5)"], {})
        assert wait_for(done, 30, must_live=[worker], done_marker=marker) == 0


def test_run_paths_layout(tmp_path):
    p = RunPaths(tmp_path)
    assert (p.records, p.logs, p.csv_prefix) == (tmp_path / "locust-records", tmp_path / "logs", tmp_path / "locust")
    assert isinstance(p.records, Path)
