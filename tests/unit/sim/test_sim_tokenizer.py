"""The simulator counting with the served model's tokenizer (--tokenizer)."""

import json
import random
import sys
from pathlib import Path

import pytest

from .sim_helpers import sim_client

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fixtures" / "tokenizers"))
from tok_fixtures import make_tokenizer_dir  # noqa: E402

pytest.importorskip("tokenizers")
pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    return make_tokenizer_dir(tmp_path_factory.mktemp("tok"), vocab_size=800, seed=3)


def _hf_count(tok_dir, messages=None, text=None):
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(str(tok_dir))
    if messages is not None:
        text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return len(tok(text, add_special_tokens=False)["input_ids"])


async def test_tokenize_usage_and_answers_use_the_models_tokenizer(tok_dir):
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "the layout of a table page"}]
    async with sim_client(tokenizer=str(tok_dir)) as (app, client):
        r = await client.post("/tokenize", json={"model": "tiny", "messages": msgs})
        assert r.json()["count"] == _hf_count(tok_dir, messages=msgs)
        r = await client.post("/tokenize", json={"model": "tiny", "prompt": "model layout server"})
        assert r.json()["count"] == _hf_count(tok_dir, text="model layout server")
        r = await client.post("/v1/chat/completions", json={
            "model": "tiny", "messages": msgs, "max_tokens": 48, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}})
        events = [json.loads(line[6:]) for line in r.text.split("\n\n") if line.startswith("data: {")]
        usage = events[-1]["usage"]
        text = "".join(c["delta"].get("content") or "" for e in events for c in e["choices"])
        assert usage["completion_tokens"] == 48 and usage["prompt_tokens"] == _hf_count(tok_dir, messages=msgs)
        assert sum(1 for e in events for c in e["choices"] if c["delta"].get("content")) == 48
        assert abs(_hf_count(tok_dir, text=text) - 48) <= 1  # re-encoding the answer gives its count back
        metrics = (await client.get("/metrics")).text
        line = next(x for x in metrics.splitlines() if x.startswith("vllm:generation_tokens_total"))
        assert float(line.rsplit(" ", 1)[1]) == 48


def test_filler_tokens_join_back_to_text_that_reencodes_to_them(tok_dir):
    from simulator.tokens import ModelTokens

    t = ModelTokens(tok_dir)
    for seed in range(5):
        pieces = t.filler(random.Random(seed), 64)
        assert len(pieces) == 64 and t.split("".join(pieces))[:63] == pieces[:63]


def test_a_directory_without_a_tokenizer_is_refused(tmp_path):
    from simulator.tokens import ModelTokens, TokenizerError

    with pytest.raises(TokenizerError, match="no tokenizer.json"):
        ModelTokens(tmp_path)
    (tmp_path / "tokenizer.json").write_text((Path(make_tokenizer_dir(tmp_path / "t")) / "tokenizer.json").read_text())
    with pytest.raises(TokenizerError, match="no chat_template"):
        ModelTokens(tmp_path)
