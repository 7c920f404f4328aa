"""A user's own prompts as a ``chat`` scenario's requests: JSONL of prompts or chat messages, or
ShareGPT-style conversations, with images by path, data URL or http(s) URL.

Formats (``dataset.format``; ``auto`` tells them apart by each record's keys):

* ``prompts``: one JSON object per line, ``{"prompt": "...", "max_tokens": 128, "images": ["page.png"]}``
  (``max_tokens`` and ``images`` optional);
* ``chat``: one JSON object per line, ``{"messages": [{"role": "user", "content": ...}], "max_tokens": 128}``:
  OpenAI chat messages as sent, ``content`` a string or parts (``image_url`` parts may name a file);
* ``sharegpt``: a JSON array (or JSONL) of ``{"conversations": [{"from": "human", "value": "..."},
  {"from": "gpt", "value": "..."}]}``: the conversation up to its last human turn is the prompt, and
  the answer that follows sets ``max_tokens`` (its length in tokens, as `vllm bench serve` does).

Image files are read once, before the clock starts, and sent as data URLs; paths are relative to
the dataset file. Every error names the file, the line (or array index) and the fix.
"""

from __future__ import annotations

import base64
import mimetypes
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import orjson

ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "chatgpt": "assistant",
         "system": "system", "bing": "assistant", "bard": "assistant", "model": "assistant"}
IMAGE_BYTES_MAX = 20 * 1024 * 1024  # a page image larger than this is a mistake, not a page


class DatasetError(ValueError):
    """A dataset that cannot be read; raised before anything is sent."""


@dataclass(frozen=True)
class Entry:
    """One request of the dataset: the messages as sent, and where its output length comes from."""

    messages: list[dict[str, Any]]
    max_tokens: int | None  # from the record
    answer: str | None  # ShareGPT: the reply whose length in tokens becomes max_tokens
    has_images: bool


def load_dataset(path: Path, fmt: Literal["auto", "prompts", "chat", "sharegpt"] = "auto",
                 order: Literal["shuffle", "file"] = "shuffle", limit: int | None = None,
                 seed: int = 0) -> list[Entry]:
    """The dataset's entries, shuffled with ``seed`` (or in file order), at most ``limit``."""
    if not path.is_file():
        raise DatasetError(f"dataset {path}: no such file; give dataset.path relative to the scenario file "
                           "or as an absolute path")
    records = _records(path)
    if not records:
        raise DatasetError(f"dataset {path}: no records; one JSON object per line (or a ShareGPT JSON array)")
    entries = [e for where, rec in records if (e := _entry(path, where, rec, fmt)) is not None]
    if not entries:
        raise DatasetError(f"dataset {path}: no record has a prompt (ShareGPT conversations need a human turn)")
    if order == "shuffle":
        idx = np.random.default_rng(seed).permutation(len(entries))
        entries = [entries[i] for i in idx]
    return entries[:limit] if limit else entries


def _records(path: Path) -> list[tuple[str, Any]]:
    raw = path.read_bytes()
    stripped = raw.lstrip()
    if stripped.startswith(b"["):  # one JSON array (ShareGPT's own files)
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise DatasetError(f"dataset {path}: not valid JSON ({exc}); a JSON array of records or one record "
                               "per line (JSONL)") from None
        return [(f"record {i}", rec) for i, rec in enumerate(data)]
    out = []
    for n, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append((f"line {n}", orjson.loads(line)))
        except orjson.JSONDecodeError as exc:
            raise DatasetError(f"dataset {path} line {n}: not valid JSON ({exc}); one JSON object per line") from None
    return out


def _entry(path: Path, where: str, rec: Any, fmt: str) -> Entry | None:
    if not isinstance(rec, dict):
        raise DatasetError(f"dataset {path} {where}: a {type(rec).__name__}, not a JSON object")
    kind = fmt if fmt != "auto" else ("sharegpt" if "conversations" in rec else "chat" if "messages" in rec
                                      else "prompts" if "prompt" in rec else None)
    if kind is None:
        raise DatasetError(f"dataset {path} {where}: no 'prompt', 'messages' or 'conversations' field; give "
                           '{"prompt": "..."}, {"messages": [...]} or {"conversations": [...]}')
    max_tokens = rec.get("max_tokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool)
                                   or max_tokens < 1):
        raise DatasetError(f"dataset {path} {where}: max_tokens {max_tokens!r} is not a whole number >= 1")
    if kind == "prompts":
        prompt = rec.get("prompt")
        if not isinstance(prompt, str) or not prompt:
            raise DatasetError(f"dataset {path} {where}: 'prompt' must be a non-empty string")
        images = rec.get("images") or []
        if not isinstance(images, list) or not all(isinstance(i, str) for i in images):
            raise DatasetError(f"dataset {path} {where}: 'images' must be a list of paths or URLs")
        parts: list[dict] = [{"type": "image_url", "image_url": {"url": image_url(path, where, i)}} for i in images]
        content: Any = [*parts, {"type": "text", "text": prompt}] if parts else prompt
        return Entry([{"role": "user", "content": content}], max_tokens, None, bool(parts))
    if kind == "chat":
        messages = rec.get("messages")
        if not isinstance(messages, list) or not messages:
            raise DatasetError(f"dataset {path} {where}: 'messages' must be a non-empty list of chat messages")
        out, images = [], False
        for m in messages:
            if not isinstance(m, dict) or "role" not in m or "content" not in m:
                raise DatasetError(f"dataset {path} {where}: every message needs 'role' and 'content'")
            content = m["content"]
            if isinstance(content, list):
                content = [_part(path, where, p) for p in content]
                images = images or any(p.get("type") == "image_url" for p in content)
            out.append({"role": m["role"], "content": content})
        return Entry(out, max_tokens, None, images)
    return _sharegpt(path, where, rec, max_tokens)


def _sharegpt(path: Path, where: str, rec: dict, max_tokens: int | None) -> Entry | None:
    turns = rec.get("conversations")
    if not isinstance(turns, list):
        raise DatasetError(f"dataset {path} {where}: 'conversations' must be a list of {{from, value}} turns")
    messages: list[dict] = []
    for t in turns:
        if not isinstance(t, dict) or not isinstance(t.get("value"), str):
            raise DatasetError(f"dataset {path} {where}: every turn needs 'from' and a string 'value'")
        role = ROLES.get(str(t.get("from", "")).lower())
        if role is None:
            raise DatasetError(f"dataset {path} {where}: turn from {t.get('from')!r}: give human, gpt or system")
        messages.append({"role": role, "content": t["value"]})
    last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=None)
    if last_user is None:
        return None  # a conversation without a question: skipped, as vllm bench serve skips it
    answer = next((m["content"] for m in messages[last_user + 1:] if m["role"] == "assistant"), None)
    return Entry(messages[: last_user + 1], max_tokens, answer, False)


def _part(path: Path, where: str, part: Any) -> dict:
    if not isinstance(part, dict) or "type" not in part:
        raise DatasetError(f"dataset {path} {where}: a content part needs a 'type' (text or image_url)")
    if part["type"] != "image_url":
        return part
    ref = (part.get("image_url") or {}).get("url") if isinstance(part.get("image_url"), dict) else None
    if not isinstance(ref, str):
        raise DatasetError(f"dataset {path} {where}: an image_url part needs image_url.url")
    return {"type": "image_url", "image_url": {"url": image_url(path, where, ref)}}


def image_url(path: Path, where: str, ref: str) -> str:
    """A data URL or http(s) URL as given; a file path (relative to the dataset) read into a data URL."""
    if ref.startswith(("data:", "http://", "https://")):
        return ref
    file = (path.parent / ref) if not Path(ref).is_absolute() else Path(ref)
    if not file.is_file():
        raise DatasetError(f"dataset {path} {where}: image {ref!r}: no such file (paths are relative to the "
                           "dataset file)")
    size = file.stat().st_size
    if size > IMAGE_BYTES_MAX:
        raise DatasetError(f"dataset {path} {where}: image {ref!r} is {size} bytes, over {IMAGE_BYTES_MAX}: "
                           "downscale it")
    mime = mimetypes.guess_type(file.name)[0] or "application/octet-stream"
    if not mime.startswith("image/"):
        raise DatasetError(f"dataset {path} {where}: {ref!r} is not an image file (PNG, JPEG, WebP)")
    return f"data:{mime};base64,{base64.b64encode(file.read_bytes()).decode()}"


def read_trace(path: Path) -> list[float]:
    """Arrival offsets in seconds from a trace: JSONL with ``offset_s`` (seconds after the run's
    start, as given) or ``timestamp`` (Unix seconds, e.g. from a request log: taken from the first
    one) per line, returned in time order. Errors name the line."""
    if not path.is_file():
        raise DatasetError(f"trace {path}: no such file (load.trace_path)")
    offsets: list[float] = []
    stamps: list[float] = []
    for n, line in enumerate(path.read_bytes().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = orjson.loads(line)
            (offsets if "offset_s" in rec else stamps).append(float(rec["offset_s"] if "offset_s" in rec
                                                                    else rec["timestamp"]))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            raise DatasetError(f"trace {path} line {n}: expected {{\"offset_s\": SECONDS}} or "
                               '{"timestamp": UNIX_SECONDS}, one per line') from None
    if offsets and stamps:
        raise DatasetError(f"trace {path}: mixes offset_s and timestamp lines; use one of them")
    if stamps:
        first = min(stamps)
        offsets = [t - first for t in stamps]
    if not offsets:
        raise DatasetError(f"trace {path}: no arrivals")
    if min(offsets) < 0:
        raise DatasetError(f"trace {path}: a negative offset_s; offsets are seconds after the run's start")
    return sorted(offsets)
