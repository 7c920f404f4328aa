"""Client-side tokenizer cross-check (bench/tokcheck.py): comparison math, loading errors that
name the flag and the fix, counting with a real tokenizer, CLI and report output. Offline."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import orjson
import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fixtures" / "tokenizers"))

from tok_fixtures import make_tokenizer_dir  # noqa: E402

from bench import tokcheck  # noqa: E402
from bench.chat import PreparedRequest  # noqa: E402
from bench.records import RequestRecord  # noqa: E402
from bench.report.html import render  # noqa: E402
from bench.runner import run_scenario  # noqa: E402
from bench.scenario import parse_scenario  # noqa: E402
from bench.target import Target  # noqa: E402

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    return make_tokenizer_dir(tmp_path_factory.mktemp("tok") / "bpe600")


def _chat(**extra):
    return parse_scenario({"kind": "chat", "name": "tc", "prompt_tokens": {"mean": 16},
                           "output_tokens": {"mean": 4}, "load": {"rate_rps": 1, "count": 1}, **extra}, "test")


def test_compare_counts_math():
    c = tokcheck.compare_counts([10, 12, 7, 5], [10, 10, 9, 5], ids=[3, 4, 5, 6])
    assert (c.checked, c.mismatches, c.max_abs_diff_tokens) == (4, 2, 2)
    assert c.mean_abs_diff_tokens == pytest.approx(1.0)  # (0 + 2 + 2 + 0) / 4
    assert c.mean_diff_tokens == pytest.approx(0.0)  # +2 and -2 cancel; |diff| does not
    assert c.examples == [{"index": 4, "client": 12, "server": 10}, {"index": 5, "client": 7, "server": 9}]


def test_compare_counts_empty_and_capped_examples():
    empty = tokcheck.compare_counts([], [])
    assert (empty.checked, empty.mismatches) == (0, 0)
    assert (empty.max_abs_diff_tokens, empty.mean_abs_diff_tokens) == (None, None)
    many = tokcheck.compare_counts([1] * 20, [2] * 20)
    assert many.mismatches == 20 and len(many.examples) == tokcheck.MAX_EXAMPLES
    with pytest.raises(ValueError, match="3 client counts vs 2 server counts"):
        tokcheck.compare_counts([1, 2, 3], [1, 2])


def test_missing_directory_names_the_flag_and_the_fix(tmp_path):
    with pytest.raises(tokcheck.TokenizerCheckError,
                       match=r"--tokenizer '.*nope': no such directory; pass the directory the server loads "
                             r"its tokenizer from .*Nothing was sent"):
        tokcheck.load_tokenizer(str(tmp_path / "nope"), "--tokenizer")


def test_file_and_empty_directory_and_unknown_name(tmp_path):
    f = tmp_path / "tokenizer.json"
    f.write_text("{}")
    with pytest.raises(tokcheck.TokenizerCheckError, match="is a file, not a tokenizer directory"):
        tokcheck.load_tokenizer(str(f), "--tokenizer")
    (tmp_path / "empty").mkdir()
    with pytest.raises(tokcheck.TokenizerCheckError, match=r"'.*empty': cannot load a tokenizer from this directory"):
        tokcheck.load_tokenizer(str(tmp_path / "empty"), "--tokenizer")
    with pytest.raises(tokcheck.TokenizerCheckError, match="not in the local Hugging Face cache"):
        tokcheck.load_tokenizer("no-such-org/no-such-model", "--tokenizer")


def test_tokenizer_without_chat_template_is_refused(tmp_path):
    d = make_tokenizer_dir(tmp_path / "plain", corpus_lines=1000, chat_template=False)
    with pytest.raises(tokcheck.TokenizerCheckError, match="has no chat template"):
        tokcheck.load_tokenizer(str(d), "--tokenizer")


def test_scenario_field_is_named_and_flag_is_chat_only(tmp_path):
    with pytest.raises(tokcheck.TokenizerCheckError, match=r"scenario 'tc' field tokenizer '/no/such/dir'"):
        tokcheck.for_run(_chat(tokenizer="/no/such/dir"), None)
    pipe = parse_scenario({"kind": "pipeline", "name": "p", "documents": {"generate_count": 1},
                           "load": {"rate_rps": 1, "count": 1}}, "test")
    with pytest.raises(tokcheck.TokenizerCheckError, match="applies to chat scenarios; 'p' is a pipeline"):
        tokcheck.for_run(pipe, "/x")
    assert tokcheck.for_run(_chat(), None) is None


def test_counts_match_the_chat_template_convention(tok_dir):
    """apply_chat_template(add_generation_prompt=True) rendered to text, then encoded without
    extra special tokens: the template's own <|im_start|>/<|im_end|> are one token each."""
    tok = tokcheck.load_tokenizer(str(tok_dir), "--tokenizer")
    msgs = [{"role": "user", "content": "the table of data"}]
    text = tok.tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    assert text.endswith("<|im_start|>assistant\n") and "You are a helpful assistant." in text
    ids = tok.tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tok.count_chats([msgs]) == [len(ids)]
    assert ids.count(tok.tokenizer.convert_tokens_to_ids("<|im_start|>")) == 3  # system, user, assistant
    from tokenizers import Tokenizer

    raw = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))  # the Rust library, no transformers
    texts = ["", "the", "Page table 12.5 | data"]
    assert tok.count_texts(texts) == [len(raw.encode(t, add_special_tokens=False).ids) for t in texts]


def _prepared(text: str, server_count: int | None) -> PreparedRequest:
    body = {"model": "m", "messages": [{"role": "user", "content": text}], "max_tokens": 4}
    return PreparedRequest(orjson.dumps(body), server_count, 4)


def _record(i: int, text: str | None, tokens: int) -> RequestRecord:
    return RequestRecord(request_id=f"p0-{i}", phase="measure", intended_ns=0, sent_ns=0, wall_sent_s=0.0,
                         status=200, output_tokens=tokens, output_text=text)


def test_crosscheck_reports_mismatches_as_warnings(tok_dir):
    tok = tokcheck.load_tokenizer(str(tok_dir), "--tokenizer")
    texts = ["the of and to", "page table figure", "report data model server"]
    exact = tok.count_chats([[{"role": "user", "content": t}] for t in texts])
    prepared = [_prepared(texts[0], exact[0]), _prepared(texts[1], exact[1] + 3),
                _prepared(texts[2], exact[2]), _prepared("with an image", None)]
    prompts = tokcheck.count_prompts(tok, prepared)
    assert prompts.skipped == 1 and prompts.ids == [0, 1, 2]
    out_n = tok.count_texts(["the model", "data"])
    records = [_record(0, "the model", out_n[0]), _record(1, "data", out_n[1] + 1)]
    x = tokcheck.crosscheck(tok, prompts, records, "--tokenizer")
    assert (x["prompts_checked"], x["prompt_mismatches"], x["max_abs_diff_tokens"]) == (3, 1, 3)
    assert x["mean_abs_diff"] == pytest.approx(1.0) and x["mean_diff"] == pytest.approx(-1.0)
    assert x["prompt_examples"] == [{"index": 1, "client": exact[1], "server": exact[1] + 3}]
    assert (x["output_checked"], x["output_mismatches"], x["output_max_abs_diff_tokens"]) == (2, 1, 1)
    assert x["output_examples"] == [{"request_id": "p0-1", "client": out_n[1], "server": out_n[1] + 1}]
    assert not x["agrees"] and len(x["warnings"]) == 2 and "server's /tokenize" in x["warnings"][0]
    assert "does not make the run invalid" in x["note"] and x["output_note"] is None
    lines = tokcheck.summary_lines(x)
    assert "prompts 3 checked, 1 mismatched (max |diff| 3" in lines[0] and "1 with images skipped" in lines[0]
    assert any(line.startswith("  warning: 1 of 3 prompts") for line in lines)


def test_outputs_not_kept_are_said_not_counted(tok_dir):
    tok = tokcheck.load_tokenizer(str(tok_dir), "--tokenizer")
    counted = tok.count_chats([[{"role": "user", "content": "the"}]])[0]
    prompts = tokcheck.count_prompts(tok, [_prepared("the", counted)])
    x = tokcheck.crosscheck(tok, prompts, [_record(0, None, 4)], "scenario")
    assert x["agrees"] and x["output_checked"] == 0 and "set keep_output: true" in x["output_note"]
    assert x["warnings"] == []


def test_bad_tokenizer_fails_before_any_request(tmp_path):
    sent: list[httpx.Request] = []
    http = httpx.Client(transport=httpx.MockTransport(lambda r: sent.append(r) or httpx.Response(200)))
    with pytest.raises(tokcheck.TokenizerCheckError, match="--tokenizer"):
        run_scenario(_chat(), Target("http://127.0.0.1:9", "m", None, 4096), http=http,
                     tokenizer=str(tmp_path / "missing"))
    assert sent == []


def test_cli_exits_2_with_the_message(tmp_path):
    from splitstack.cli.bench import app

    res = CliRunner().invoke(app, ["run", "chat-smoke", "--url", "http://127.0.0.1:9", "--model", "m",
                                   "--tokenizer", str(tmp_path / "missing"), "--out", str(tmp_path / "run")])
    assert res.exit_code == 2
    assert "--tokenizer" in res.output and "no such directory" in res.output and not (tmp_path / "run").exists()


def test_report_shows_the_crosscheck_in_validity(run_factory):
    recs, s = run_factory(n=20)
    s["tokenizer_crosscheck"] = {
        "tokenizer": "/m/tok", "source": "--tokenizer", "note": tokcheck.NOTE, "agrees": False,
        "prompts_checked": 8, "prompts_skipped": 0, "prompt_mismatches": 8, "max_abs_diff_tokens": 9,
        "mean_abs_diff": 6.5, "mean_diff": 6.5, "prompt_examples": [], "output_checked": 0,
        "output_mismatches": 0, "output_max_abs_diff_tokens": None, "output_mean_abs_diff": None,
        "output_mean_diff": None, "output_examples": [], "output_note": tokcheck.OUTPUT_NOT_KEPT,
        "warnings": ["8 of 8 prompts counted differently"]}
    html = render(s, recs)
    validity = html[html.index("Run validity"):html.index("Requests and throughput")]
    assert "Tokenizer cross-check" in validity and "warning: 8 of 8 prompts counted differently" in validity
    assert "/m/tok" in validity and "set keep_output: true" in validity and "does not make the run invalid" in validity
    assert "Tokenizer cross-check" not in render({k: v for k, v in s.items() if k != "tokenizer_crosscheck"}, recs)
