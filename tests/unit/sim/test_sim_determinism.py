"""Like vLLM, greedy (temperature 0) or seeded requests get the same text for the same prompt,
whatever else the server is doing; sampled requests do not (the bench's determinism gate)."""

from __future__ import annotations

from simulator.answers import Answerer
from simulator.profile import load_profile
from simulator.schemas import ChatRequest

MESSAGES = [{"role": "user", "content": "Summarise the split pipeline."}]


def _answer(answerer: Answerer, **fields) -> str:
    req = ChatRequest(model="tiny", messages=MESSAGES, max_tokens=24, **fields)
    return answerer.answer("", None, 24, req.deterministic_key(["Summarise the split pipeline."])).text


def test_greedy_and_seeded_requests_repeat_across_interleaved_traffic() -> None:
    answerer = Answerer(load_profile("instant"), seed=0, plan_log_size=8)
    greedy = _answer(answerer, temperature=0)
    _answer(answerer, temperature=0.8)  # other traffic in between must not change the answer
    assert _answer(answerer, temperature=0) == greedy
    seeded = _answer(answerer, temperature=0.8, seed=7)
    assert _answer(answerer, temperature=0.8, seed=7) == seeded
    assert _answer(answerer, temperature=0.8, seed=8) != seeded


def test_sampled_requests_differ() -> None:
    answerer = Answerer(load_profile("instant"), seed=0, plan_log_size=8)
    texts = [_answer(answerer, temperature=1.0) for _ in range(5)]
    assert all(texts) and len(set(texts)) == 5, texts  # 24 sampled tokens: a repeat would be a bug
