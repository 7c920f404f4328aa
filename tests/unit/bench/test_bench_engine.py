"""The load engine offline: a sender that answers at once (no server), records spooled as rows."""

import asyncio
import gc

import pytest

from bench import engine
from bench.load import NS, LoadSpec, open_schedule
from bench.records import RequestRecord, Spool, from_row, read_spool, to_row


class _Sender:
    def __init__(self, process: int) -> None:
        self.process = process

    async def send(self, index, intended_ns, phase, t0):
        await asyncio.sleep(0)
        return RequestRecord(request_id=f"p{self.process}-{index}", phase=phase, process=self.process,
                             intended_ns=intended_ns, sent_ns=intended_ns, wall_sent_s=0.0, end_ns=intended_ns + 1,
                             status=200, event_ns=[intended_ns + 1], event_tokens=[1], event_content=[True],
                             output_tokens=1, output_tokens_source="usage")

    async def aclose(self):
        pass


class _Workload:
    name = "fake"

    async def sender(self, process, timeout_s):
        return _Sender(process)


@pytest.mark.parametrize("concurrency", [1, 7, 64])
def test_closed_loop_count_sends_exactly_count_requests(concurrency):
    spec = LoadSpec(mode="closed", concurrency=concurrency, count=100)
    res = engine.run(_Workload(), spec)
    assert len(res.records) == 100 and all(r.phase == "measure" for r in res.records)
    assert len({r.request_id for r in res.records}) == 100


def test_closed_loop_count_with_a_cooldown_keeps_the_load_on_past_the_count():
    spec = LoadSpec(mode="closed", concurrency=4, count=50, cooldown_s=0.05)
    res = engine.run(_Workload(), spec)
    assert sum(r.phase == "measure" for r in res.records) == 50
    assert sum(r.phase == "cooldown" for r in res.records) > 0


@pytest.mark.parametrize("count,users,processes", [(100, 8, 3), (7, 2, 4), (1, 64, 2), (1000, 5, 5)])
def test_closed_loop_count_splits_over_processes_without_loss(count, users, processes):
    spec = LoadSpec(mode="closed", concurrency=users, count=count, processes=processes)
    shares = [engine.closed_share(spec, p) for p in range(processes)]
    assert sum(s["count"] for s in shares) == count
    assert [s["first_index"] for s in shares] == list(range(processes))


def test_open_loop_sends_the_schedule_and_logs_collections():
    spec = LoadSpec(rate_rps=2000, count=400, arrival="poisson", seed=1)
    res = engine.run(_Workload(), spec)
    schedule, _, _ = open_schedule(spec)
    assert len(res.records) == len(schedule)
    log = res.processes[0].gc
    assert set(log) == {"collections", "total_pause_ms", "max_pause_ms", "longest", "freezes", "frozen_garbage"}
    assert log["freezes"] == 0 and log["frozen_garbage"] is None
    assert log["collections"] == {"gen0": 0, "gen1": 0, "gen2": 0}  # no collection while the load runs
    assert gc.get_freeze_count() == 0 and gc.isenabled()  # the run's regime is undone


class _CyclicSender(_Sender):
    async def send(self, index, intended_ns, phase, t0):
        junk: list = [None] * 8
        junk.append(junk)  # a reference cycle: only a collection frees it
        return await super().send(index, intended_ns, phase, t0)


class _CyclicWorkload(_Workload):
    async def sender(self, process, timeout_s):
        return _CyclicSender(process)


@pytest.mark.parametrize("spec", [LoadSpec(mode="closed", concurrency=4, count=2000),
                                  LoadSpec(rate_rps=50_000, count=2000, arrival="constant")])
def test_a_run_that_leaves_cycles_is_collected_by_the_backlog_guard(monkeypatch, spec):
    monkeypatch.setattr(engine, "GC_BACKLOG_MAX", 500)
    monkeypatch.setattr(engine, "GC_CHECK_EVERY", 64)
    res = engine.run(_CyclicWorkload(), spec)
    log = res.processes[0].gc
    # the guard acted at least twice: a walk of the young generations, or (a slow machine leaving more
    # than GC_WALK_IN_FLIGHT_MAX of the 50k req/s open loop in flight) a freeze; never a full collection
    assert log["collections"]["gen1"] + log["freezes"] >= 2 and log["collections"]["gen2"] == 0
    assert len(log["longest"]) == sum(log["collections"].values()) or len(log["longest"]) == engine.GC_PAUSES_KEPT
    assert all(0 <= p["cpu_ms"] and p["ms"] >= 0 for p in log["longest"])  # wall and CPU time of each
    assert gc.isenabled()


class _SlowSender(_Sender):
    async def send(self, index, intended_ns, phase, t0):
        keep = [[i] for i in range(40)]  # tracked objects alive while the request is in flight
        await asyncio.sleep(0.2)
        del keep
        return await super().send(index, intended_ns, phase, t0)


class _SlowWorkload(_Workload):
    async def sender(self, process, timeout_s):
        return _SlowSender(process)


def test_many_requests_in_flight_are_frozen_not_walked(monkeypatch):
    """An overloaded run's young generation is its requests in flight: the guard freezes them (no
    pause) instead of collecting (a walk over all of them), and collects them after the load."""
    monkeypatch.setattr(engine, "GC_BACKLOG_MAX", 2000)
    monkeypatch.setattr(engine, "GC_WALK_IN_FLIGHT_MAX", 32)
    spec = LoadSpec(rate_rps=5000, count=1500, arrival="constant")
    res = engine.run(_SlowWorkload(), spec)
    assert len(res.records) == 1500
    log = res.processes[0].gc
    assert log["freezes"] >= 1
    assert log["collections"] == {"gen0": 0, "gen1": 0, "gen2": 0}
    assert log["frozen_garbage"] == 0  # the requests were freed by reference counting: nothing left to collect
    assert gc.get_freeze_count() == 0 and gc.isenabled()


def test_rows_round_trip_through_the_spool(tmp_path):
    recs = [RequestRecord(request_id="a", phase="measure", process=0, intended_ns=1, sent_ns=2, wall_sent_s=3.0,
                          event_ns=[4, 5], event_tokens=[1, 1], event_content=[True, True], status=200),
            RequestRecord(request_id="b", phase="warmup", process=1, intended_ns=1, sent_ns=2, wall_sent_s=3.0,
                          event_ns=[4, 5, 6], event_tokens=[2, 1, 1], event_content=[False, True, True],
                          error="http_500", output_tokens_source="events")]
    spool = Spool(tmp_path / "s")
    for r in recs:
        spool.append(to_row(r))
    spool.close()
    back = [from_row(row) for row in read_spool(tmp_path / "s")]
    assert [b.model_dump() for b in back] == [r.model_dump() for r in recs]


@pytest.mark.parametrize("seed", range(5))
def test_normalised_schedule_has_exactly_the_rate(seed):
    spec = LoadSpec(rate_rps=2, count=200, seed=seed, warmup_s=3, cooldown_s=2)
    assert spec.normalized
    arr, start, end = open_schedule(spec)
    measured = [t for t in arr if start <= t < end]
    assert len(measured) == 200 and (end - start) == 100 * NS
    raw = LoadSpec(rate_rps=2, count=200, seed=seed, normalize=False)
    assert not raw.normalized


def test_normalised_duration_run_has_round_rate_times_duration_arrivals():
    arr, start, end = open_schedule(LoadSpec(rate_rps=7, duration_s=10, normalize=True, seed=2))
    assert len([t for t in arr if start <= t < end]) == 70 and end - start == 10 * NS


@pytest.mark.parametrize("kw", [dict(mode="closed", concurrency=2), dict(arrival="trace", trace_path="x.jsonl"),
                                dict(rate_rps=5, ramp_from_rps=1, ramp_s=2)])
def test_normalize_refused_where_it_has_no_meaning(kw):
    kw = {"rate_rps": 5, **kw} if kw.get("mode") != "closed" else kw
    with pytest.raises(ValueError, match="normalize"):
        LoadSpec(count=10, normalize=True, **kw)


def test_frozen_heap_keeps_collections_off_what_exists_and_undoes_it():
    from bench.heap import frozen_heap

    before = gc.get_freeze_count()
    old = [[i] for i in range(1000)]  # tracked containers that exist on entry
    with frozen_heap():
        assert gc.get_freeze_count() >= before + len(old)  # moved out of every generation
        young = [[i] for i in range(10)]
        assert gc.is_tracked(young[0])
    assert gc.get_freeze_count() == 0
    del old, young
