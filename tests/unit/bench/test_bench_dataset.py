"""Reading a user's own dataset and arrival trace: each format, images by path, and errors that
name the file, the line and the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.dataset import DatasetError, load_dataset, read_trace
from bench.images import png_bytes
from bench.scenario import ScenarioError, load_scenario


def write(path: Path, lines: list) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_prompts_chat_and_sharegpt_records(tmp_path):
    (tmp_path / "page.png").write_bytes(png_bytes(32, 32, 1))
    ds = write(tmp_path / "mine.jsonl", [
        {"prompt": "Summarise this page.", "max_tokens": 50, "images": ["page.png"]},
        {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}]},
        {"conversations": [{"from": "human", "value": "Q1"}, {"from": "gpt", "value": "A1 is long"},
                           {"from": "human", "value": "Q2"}, {"from": "gpt", "value": "A2"}]},
        {"conversations": [{"from": "gpt", "value": "no question here"}]},
    ])
    entries = load_dataset(ds, order="file")
    assert len(entries) == 3  # the conversation without a human turn is skipped
    first, chat, share = entries
    assert first.max_tokens == 50 and first.has_images
    url = first.messages[0]["content"][0]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    assert first.messages[0]["content"][1]["text"] == "Summarise this page."
    assert [m["role"] for m in chat.messages] == ["system", "user"] and chat.max_tokens is None
    assert [m["content"] for m in share.messages] == ["Q1", "A1 is long", "Q2"] and share.answer == "A2"


def test_shuffle_is_seeded_and_limit_cuts(tmp_path):
    ds = write(tmp_path / "p.jsonl", [{"prompt": f"p{i}"} for i in range(20)])
    a = [e.messages[0]["content"] for e in load_dataset(ds, seed=3, limit=5)]
    assert a == [e.messages[0]["content"] for e in load_dataset(ds, seed=3, limit=5)]
    assert a != [f"p{i}" for i in range(5)] and len(a) == 5


def test_a_sharegpt_json_array(tmp_path):
    ds = tmp_path / "sg.json"
    ds.write_text(json.dumps([{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]}]))
    [e] = load_dataset(ds)
    assert e.messages == [{"role": "user", "content": "hi"}] and e.answer == "yo"


@pytest.mark.parametrize("content, message", [
    ("{not json}\n", "line 1: not valid JSON"),
    (json.dumps({"text": "x"}) + "\n", "line 1: no 'prompt', 'messages' or 'conversations' field"),
    (json.dumps({"prompt": "x", "max_tokens": 0}) + "\n", "max_tokens 0 is not a whole number >= 1"),
    (json.dumps({"prompt": "x", "images": ["missing.png"]}) + "\n", "image 'missing.png': no such file"),
    (json.dumps({"messages": [{"content": "x"}]}) + "\n", "every message needs 'role' and 'content'"),
    (json.dumps({"conversations": [{"from": "robot", "value": "x"}]}) + "\n", "turn from 'robot'"),
    ("\n\n", "no records"),
])
def test_bad_records_name_the_line_and_the_fix(tmp_path, content, message):
    ds = tmp_path / "bad.jsonl"
    ds.write_text(content)
    with pytest.raises(DatasetError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_dataset(ds)


def test_a_trace_of_timestamps_replays_from_the_first(tmp_path):
    tr = write(tmp_path / "t.jsonl", [{"timestamp": 1_700_000_010.5}, {"timestamp": 1_700_000_010.0},
                                      {"timestamp": 1_700_000_012.0}])
    assert read_trace(tr) == [0.0, 0.5, 2.0]
    offsets = write(tmp_path / "o.jsonl", [{"offset_s": 0.25}, {"offset_s": 1}])
    assert read_trace(offsets) == [0.25, 1.0]
    bad = write(tmp_path / "b.jsonl", [{"offset_s": 1}, {"at": 2}])
    with pytest.raises(DatasetError, match="line 2: expected"):
        read_trace(bad)


def test_a_scenario_names_its_dataset_relative_to_itself(tmp_path):
    write(tmp_path / "mine.jsonl", [{"prompt": "hello"}])
    scn = tmp_path / "scn.yaml"
    scn.write_text("kind: chat\nname: mine\ndataset: {path: mine.jsonl}\noutput_tokens: {mean: 8}\n"
                   "load: {rate_rps: 1, count: 1}\n")
    s = load_scenario(str(scn))
    assert s.dataset is not None and Path(s.dataset.path) == (tmp_path / "mine.jsonl").resolve()
    both = tmp_path / "both.yaml"
    both.write_text("kind: chat\nname: both\ndataset: {path: mine.jsonl}\nprompt_tokens: {mean: 8}\n"
                    "output_tokens: {mean: 8}\nload: {rate_rps: 1, count: 1}\n")
    with pytest.raises(ScenarioError, match="set exactly one of prompt_tokens"):
        load_scenario(str(both))
    trace = tmp_path / "trace.yaml"
    trace.write_text(f"kind: chat\nname: t\nprompt_tokens: {{mean: 8}}\noutput_tokens: {{mean: 8}}\n"
                     f"load: {{arrival: trace, trace_path: {tmp_path / 'nope.jsonl'}, count: 1}}\n")
    with pytest.raises(DatasetError, match="no such file"):
        load_scenario(str(trace))
