"""Client-side tokenizer cross-check: count tokens with a local Hugging Face tokenizer and
compare with the server's counts, which stay authoritative.

The bench takes every token count from the server (prompt lengths from ``/tokenize``, output
lengths from ``usage.completion_tokens``). This module recounts them on the client, so a run
against a server whose tokenizer or chat template is not the one the user thinks it is (a
wrong revision, another model behind the same name) shows up in the report. A mismatch is a
warning, never a reason to mark the run invalid.

Counting never runs in the send path: prompts are counted once they are prepared, before the
clock starts, and outputs after the run, from the records.

How the counts are made, matching vLLM 0.32's ``/tokenize`` for chat ``messages`` and its chat
completions endpoint (``TokenizeChatRequest``: ``add_generation_prompt=True``,
``add_special_tokens=False``): the chat template is rendered to text with
``apply_chat_template(messages, add_generation_prompt=True, tokenize=False)`` and the text is
encoded with ``add_special_tokens=False`` (the template already holds the special tokens).
Outputs: ``len(encode(output_text, add_special_tokens=False))``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from bench.records import AnyRecord, RequestRecord

NOTE = ("warning only: the server's counts are authoritative (prompt lengths from /tokenize, "
        "outputs from usage.completion_tokens); a mismatch does not make the run invalid")
OUTPUT_NOT_KEPT = ("outputs not kept: set keep_output: true in the scenario to cross-check output "
                   "counts (it makes the client decode every SSE event's JSON, costing client CPU)")
MAX_EXAMPLES = 5


class TokenizerCheckError(ValueError):
    """The client-side tokenizer cannot be used; raised before anything is sent."""


@dataclass(frozen=True)
class Comparison:
    """Client counts against server counts, pair by pair (diff = client - server)."""

    checked: int
    mismatches: int
    max_abs_diff_tokens: int | None
    mean_abs_diff_tokens: float | None
    mean_diff_tokens: float | None
    examples: list[dict[str, int]]


def compare_counts(client: Sequence[int], server: Sequence[int], ids: Sequence[int] | None = None) -> Comparison:
    """Exact comparison; ``ids`` label the examples of mismatching pairs (default: positions)."""
    if len(client) != len(server):
        raise ValueError(f"compare_counts: {len(client)} client counts vs {len(server)} server counts")
    ids = list(ids) if ids is not None else list(range(len(client)))
    diffs = [c - s for c, s in zip(client, server)]
    n = len(diffs)
    bad = [i for i, d in enumerate(diffs) if d != 0]
    return Comparison(
        checked=n,
        mismatches=len(bad),
        max_abs_diff_tokens=max(abs(d) for d in diffs) if n else None,
        mean_abs_diff_tokens=sum(abs(d) for d in diffs) / n if n else None,
        mean_diff_tokens=sum(diffs) / n if n else None,
        examples=[{"index": ids[i], "client": client[i], "server": server[i]} for i in bad[:MAX_EXAMPLES]],
    )


class ClientTokenizer:
    """A local tokenizer plus the chat-template convention of the server's /tokenize."""

    def __init__(self, tokenizer: Any, name: str) -> None:
        self.tokenizer = tokenizer
        self.name = name

    def count_texts(self, texts: Sequence[str]) -> list[int]:
        if not texts:
            return []
        enc = self.tokenizer(list(texts), add_special_tokens=False)["input_ids"]
        return [len(ids) for ids in enc]

    def count_chats(self, conversations: Sequence[list[dict]]) -> list[int]:
        if not conversations:
            return []
        rendered = self.tokenizer.apply_chat_template(list(conversations), add_generation_prompt=True,
                                                      tokenize=False)
        return self.count_texts(rendered)


def load_tokenizer(path_or_name: str, origin: str) -> ClientTokenizer:
    """Load a tokenizer from a local directory (or the local Hugging Face cache; never the
    network). ``origin`` names where the setting came from, for the error message."""
    fix = ("pass the directory the server loads its tokenizer from (for the local stack's vLLM: "
           ".cache/models/tiny), or drop the setting to skip the cross-check")
    path = Path(path_or_name).expanduser()
    if path.exists() and not path.is_dir():
        raise TokenizerCheckError(f"{origin} {path_or_name!r}: is a file, not a tokenizer directory; {fix}. "
                                  "Nothing was sent.")
    looks_like_path = path.is_absolute() or path_or_name.startswith(".") or path.exists()
    if looks_like_path and not path.is_dir():
        raise TokenizerCheckError(f"{origin} {path_or_name!r}: no such directory; {fix}. Nothing was sent.")
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:
        raise TokenizerCheckError(f"{origin}: the client-side tokenizer needs transformers ({exc}); "
                                  "pip install -e '.[vllm]' or drop the setting. Nothing was sent.") from None
    try:
        tok = AutoTokenizer.from_pretrained(str(path) if path.is_dir() else path_or_name, local_files_only=True)
    except (OSError, ValueError, KeyError, TypeError) as exc:  # transformers' ways of saying "not a tokenizer"
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        where = "directory" if path.is_dir() else "name (not a directory here, and not in the local Hugging Face cache)"
        raise TokenizerCheckError(f"{origin} {path_or_name!r}: cannot load a tokenizer from this {where}: "
                                  f"{first}; {fix}. Nothing was sent.") from None
    if not getattr(tok, "chat_template", None):
        raise TokenizerCheckError(f"{origin} {path_or_name!r}: the tokenizer has no chat template, so chat "
                                  "prompts cannot be counted the way the server counts them; use the model's "
                                  "own tokenizer directory (tokenizer_config.json with chat_template). "
                                  "Nothing was sent.")
    return ClientTokenizer(tok, path_or_name)


@dataclass(frozen=True)
class PromptCounts:
    """Client and server counts of the prepared prompts (taken before the run)."""

    client: list[int]
    server: list[int]
    ids: list[int]
    skipped: int  # prompts with images: their length is not a text tokenizer's to count
    count_s: float = 0.0  # time spent counting, before the run


def count_prompts(tok: ClientTokenizer, prepared: Sequence[Any]) -> PromptCounts:
    """``prepared``: bench.chat.PreparedRequest (body bytes + the /tokenize count)."""
    t0 = time.perf_counter()
    convs, server, ids = [], [], []
    for i, req in enumerate(prepared):
        if req.prompt_tokens is None:
            continue
        convs.append(orjson.loads(req.body)["messages"])
        server.append(req.prompt_tokens)
        ids.append(i)
    client = tok.count_chats(convs)
    return PromptCounts(client, server, ids, len(prepared) - len(convs), time.perf_counter() - t0)


def crosscheck(tok: ClientTokenizer, prompts: PromptCounts, records: Sequence[AnyRecord],
               source: str) -> dict[str, Any]:
    """The summary's ``tokenizer_crosscheck`` block. Outputs: every successful record of the
    run (all phases: counting does not depend on the measured window) that kept its text."""
    t0 = time.perf_counter()
    p = compare_counts(prompts.client, prompts.server, prompts.ids)
    chats = [r for r in records if isinstance(r, RequestRecord) and r.ok and r.output_tokens is not None]
    kept = [r for r in chats if r.output_text is not None]
    o = compare_counts(tok.count_texts([r.output_text or "" for r in kept]), [r.output_tokens or 0 for r in kept])
    output_count_s = time.perf_counter() - t0
    o_examples = [{"request_id": kept[e["index"]].request_id, "client": e["client"], "server": e["server"]}
                  for e in o.examples]
    warnings = []
    if p.mismatches:
        warnings.append(f"{p.mismatches} of {p.checked} prompts counted differently by {tok.name!r} than by "
                        f"the server's /tokenize (max |diff| {p.max_abs_diff_tokens} tokens): is it the "
                        "server's tokenizer and chat template?")
    if o.mismatches:
        warnings.append(f"{o.mismatches} of {o.checked} outputs re-encode to a different count than "
                        "usage.completion_tokens (re-encoding decoded text need not round-trip; see "
                        "docs/bench-metrics.md)")
    return {
        "tokenizer": tok.name, "source": source, "note": NOTE,
        "agrees": p.mismatches == 0 and o.mismatches == 0,
        "prompts_checked": p.checked, "prompts_skipped": prompts.skipped, "prompt_mismatches": p.mismatches,
        "max_abs_diff_tokens": p.max_abs_diff_tokens, "mean_abs_diff": p.mean_abs_diff_tokens,
        "mean_diff": p.mean_diff_tokens, "prompt_examples": p.examples,
        "output_checked": o.checked, "output_mismatches": o.mismatches,
        "output_max_abs_diff_tokens": o.max_abs_diff_tokens, "output_mean_abs_diff": o.mean_abs_diff_tokens,
        "output_mean_diff": o.mean_diff_tokens, "output_examples": o_examples,
        "output_note": OUTPUT_NOT_KEPT if chats and not kept else None,
        "warnings": warnings,
        # outside the measured run: prompts counted before the clock starts, outputs after it stops
        "count_s": {"prompts_before_run": round(prompts.count_s, 4), "outputs_after_run": round(output_count_s, 4)},
    }


def summary_lines(x: dict[str, Any]) -> list[str]:
    """Plain lines for the CLI summary."""
    head = (f"tokenizer cross-check ({x['tokenizer']}): prompts {x['prompts_checked']} checked, "
            f"{x['prompt_mismatches']} mismatched")
    if x["prompts_checked"]:
        head += f" (max |diff| {x['max_abs_diff_tokens']}, mean |diff| {x['mean_abs_diff']:.2f} tokens)"
    if x["prompts_skipped"]:
        head += f", {x['prompts_skipped']} with images skipped"
    out = f"outputs {x['output_checked']} checked, {x['output_mismatches']} mismatched"
    if x["output_checked"]:
        out += f" (max |diff| {x['output_max_abs_diff_tokens']}, mean |diff| {x['output_mean_abs_diff']:.2f} tokens)"
    lines = [head + "; " + out]
    if x.get("output_note"):
        lines.append(f"  {x['output_note']}")
    lines += [f"  warning: {w}" for w in x["warnings"]]
    lines.append(f"  ({x['note']})")
    return lines


def for_run(scn: Any, flag: str | None) -> tuple[ClientTokenizer, str] | None:
    """The run's tokenizer (the ``--tokenizer`` flag wins over the scenario's ``tokenizer``) and
    where it was set; None when neither is. Raises before anything is sent."""
    if flag is not None and getattr(scn, "kind", None) != "chat":
        raise TokenizerCheckError(f"--tokenizer {flag!r}: the tokenizer cross-check applies to chat "
                                  f"scenarios; {scn.name!r} is a {scn.kind} scenario. Drop the flag.")
    if flag is not None:
        return load_tokenizer(flag, "--tokenizer"), "--tokenizer"
    name = getattr(scn, "tokenizer", None)
    if name is None:
        return None
    origin = f"scenario {scn.name!r} field tokenizer"
    return load_tokenizer(name, origin), "scenario"
