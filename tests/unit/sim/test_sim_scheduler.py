"""The continuous-batching latency model, on a virtual clock (fast and deterministic)."""

from __future__ import annotations

import statistics

import pytest

from simulator.profile import EngineLimits, LatencyModel
from simulator.scheduler import Scheduler, SimRequest, simulate, simulate_closed_loop

LAT = LatencyModel(step_base_ms=10.0, decode_per_seq_ms=1.0, prefill_per_token_ms=0.1, image_encode_ms=5.0)


def limits(**kw) -> EngineLimits:
    base = dict(max_num_seqs=4, max_model_len=4096, max_num_batched_tokens=4096, kv_cache_tokens=1_000_000,
                block_size_tokens=16)
    return EngineLimits(**(base | kw))


def burst(n: int, prompt: int = 100, out: int = 20, at: float = 0.0) -> list[SimRequest]:
    return [SimRequest(f"r{i}", prompt, out, at) for i in range(n)]


def ttft(r: SimRequest) -> float:
    return r.first_token_s - r.arrival_s


def test_single_request_timeline_follows_the_step_formula():
    [req] = reqs = burst(1, prompt=100, out=3)
    simulate(Scheduler(limits(), LAT), reqs)
    prefill_step = (10.0 + 0.1 * 100) / 1000  # base + prompt tokens; first token sampled at its end
    decode_step = (10.0 + 1.0 * 1) / 1000
    assert req.first_token_s == pytest.approx(prefill_step)
    assert req.finished_s == pytest.approx(prefill_step + 2 * decode_step)
    assert req.queue_time_s == 0.0


def test_no_queueing_up_to_max_num_seqs():
    reqs = burst(4)
    simulate(Scheduler(limits(max_num_seqs=4), LAT), reqs)
    assert all(r.queue_time_s == 0.0 for r in reqs)
    assert len({r.first_token_s for r in reqs}) == 1  # one batched prefill


def test_queueing_appears_when_concurrency_exceeds_max_num_seqs():
    reqs = burst(12)
    sched = Scheduler(limits(max_num_seqs=4), LAT)
    sched_waiting = []
    for r in reqs:
        sched.add(r, 0.0)
    sched.step(0.0)
    sched_waiting.append(len(sched.waiting))
    assert len(sched.running) == 4 and sched_waiting == [8]
    reqs = burst(12)
    simulate(Scheduler(limits(max_num_seqs=4), LAT), reqs)
    queued = [r for r in reqs if r.queue_time_s > 0]
    assert len(queued) == 8
    # admitted in waves of 4: the second wave waits for the first to finish
    first_wave_end = max(r.finished_s for r in reqs[:4])
    assert min(r.first_scheduled_s for r in reqs[4:8]) == pytest.approx(first_wave_end)


def test_ttft_grows_with_queue_position():
    reqs = burst(16)
    simulate(Scheduler(limits(max_num_seqs=4), LAT), reqs)
    waves = [statistics.fmean(ttft(r) for r in reqs[i:i + 4]) for i in range(0, 16, 4)]
    assert waves == sorted(waves) and waves[-1] > 3 * waves[0]


def test_ttft_grows_with_offered_concurrency():
    def mean_ttft(concurrency: int) -> float:
        reqs = burst(concurrency)
        simulate(Scheduler(limits(max_num_seqs=8), LAT), reqs)
        return statistics.fmean(ttft(r) for r in reqs)

    values = [mean_ttft(c) for c in (4, 8, 16, 32, 64)]
    assert values == sorted(values)
    assert values[-1] > 5 * values[1]  # beyond max_num_seqs TTFT is dominated by queueing


def throughput(concurrency: int, max_num_seqs: int = 8, total: int = 400) -> float:
    """Output tokens/s with `concurrency` closed-loop clients (next request when one finishes)."""
    end = simulate_closed_loop(Scheduler(limits(max_num_seqs=max_num_seqs), LAT),
                               lambda i, now: SimRequest(f"r{i}", 50, 50, now), concurrency, total)
    return total * 50 / end


def test_throughput_saturates_at_the_profile_capacity():
    # capacity with a full batch of 8: 8 tokens per step of (10 + 8*1) ms, less prefill steps
    ceiling = 8 / ((10 + 8 * 1.0) / 1000)
    rates = [throughput(c) for c in (1, 2, 4, 8, 16, 64)]
    assert rates[:4] == sorted(rates[:4]) and rates[3] > 3 * rates[0]  # grows while the batch fills
    assert rates[0] < 0.25 * ceiling
    for r in rates[3:]:
        assert 0.85 * ceiling < r <= ceiling  # flat once max_num_seqs is full
    assert rates[-1] == pytest.approx(rates[-2], rel=0.05)


def test_kv_exhaustion_queues_then_preempts():
    # 4 requests of 64 prompt + 64 output tokens; KV for 160 tokens (10 blocks): not all fit
    lim = limits(kv_cache_tokens=160, max_model_len=128, max_num_seqs=8)
    reqs = burst(4, prompt=64, out=64)
    sched = Scheduler(lim, LAT)
    simulate(sched, reqs)
    assert all(r.done and r.generated == 64 for r in reqs)
    assert sched.num_preemptions > 0
    assert sum(r.num_preemptions for r in reqs) == sched.num_preemptions
    assert sched.used_blocks == 0


def test_kv_capacity_factor_models_exhaustion():
    def preemptions(factor: float) -> int:
        sched = Scheduler(limits(kv_cache_tokens=4096, max_model_len=256, max_num_seqs=16), LAT,
                          kv_capacity_factor=factor)
        simulate(sched, burst(16, prompt=100, out=100))
        return sched.num_preemptions

    assert preemptions(1.0) == 0
    assert preemptions(0.1) > 0


def test_images_add_encoder_time_to_the_prefill_step():
    plain, image = SimRequest("a", 100, 2, 0.0), SimRequest("b", 100, 2, 0.0, num_images=1)
    simulate(Scheduler(limits(), LAT), [plain])
    simulate(Scheduler(limits(), LAT), [image])
    assert ttft(image) - ttft(plain) == pytest.approx(LAT.image_encode_ms / 1000)


def test_chunked_prefill_respects_the_token_budget():
    req = SimRequest("long", 1000, 2, 0.0)
    sched = Scheduler(limits(max_num_batched_tokens=256), LAT)
    sched.add(req, 0.0)
    steps = []
    while not req.done:
        steps.append(sched.step(0.0).num_tokens)
    assert steps[:4] == [256, 256, 256, 232] and req.generated == 2


def test_abort_frees_kv_and_leaves_the_queue():
    reqs = burst(6)
    sched = Scheduler(limits(max_num_seqs=2), LAT)
    for r in reqs:
        sched.add(r, 0.0)
    sched.step(0.0)
    used = sched.used_blocks
    sched.abort(reqs[0])
    sched.abort(reqs[5])
    assert sched.used_blocks < used and reqs[5] not in sched.waiting and reqs[0] not in sched.running


def test_simulation_is_deterministic():
    def run() -> list[float]:
        reqs = [SimRequest(f"r{i}", 50 + i, 10 + i % 7, i * 0.003) for i in range(40)]
        simulate(Scheduler(limits(max_num_seqs=5), LAT), reqs)
        return [r.finished_s for r in reqs]

    first = run()
    assert len(first) == 40 and all(f is not None and f > 0 for f in first), first  # every request finished
    assert first == run()


def test_a_request_larger_than_the_kv_cache_stalls_with_a_clear_error():
    lim = limits(kv_cache_tokens=64, max_model_len=64)
    with pytest.raises(RuntimeError, match="do not fit in 4 KV blocks"):
        simulate(Scheduler(lim, LAT), [SimRequest("big", 100, 1, 0.0)])


def test_requests_without_tokens_are_refused():
    with pytest.raises(ValueError, match="prompt_tokens and output_tokens must be >= 1"):
        Scheduler(limits(), LAT).add(SimRequest("empty", 0, 5, 0.0), 0.0)
