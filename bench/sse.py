"""Server-sent events framing with a timestamp per event's first byte.

The hot path only keeps the body pieces and the stamps of their reads (bench/httpclient.py);
events are split and decoded once the request finished (``read_stream``), so parsing never
delays the next read and never skews a timestamp.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass, field
from itertools import accumulate, repeat
from operator import add, getitem, neg

import orjson


@dataclass
class SSESplitter:
    """Feed network reads (bytes, arrival ns); collect complete ``data:`` payloads.

    An event's time is the arrival of the read that carried its first byte: a read that ends
    mid-event makes the event's time the earlier read, as the first byte came then.
    """

    events: list[tuple[int, bytes]] = field(default_factory=list)
    _buf: bytes = b""
    _start_ns: int = 0

    def feed(self, data: bytes, t_ns: int) -> None:
        if not self._buf:
            self._start_ns = t_ns
        buf = self._buf + data
        start = 0
        while True:
            end = buf.find(b"\n\n", start)
            if end < 0:
                break
            self._emit(buf[start:end], self._start_ns)
            start = end + 2
            self._start_ns = t_ns  # the next event's first byte came in this read
        self._buf = buf[start:]
        if not self._buf:
            self._start_ns = 0

    def _emit(self, block: bytes, t_ns: int) -> None:
        if block.startswith(b"data: ") and b"\n" not in block:  # the usual one-line event
            self.events.append((t_ns, block[6:]))
            return
        for line in block.split(b"\n"):
            if line.startswith(b"data:"):
                self.events.append((t_ns, line[5:].strip()))

    def leftover(self) -> bytes:
        return self._buf


@dataclass
class ChatStreamResult:
    event_ns: list[int]
    event_tokens: list[int]
    event_content: list[bool]
    prompt_tokens: int | None
    output_tokens: int | None
    finish_reason: str | None
    text: str
    error: str | None = None
    response_id: str | None = None  # the server's id of the response (first event's "id")
    output_source: str | None = None  # "usage" (the server's count) or "events" (one per event with text)


_CT = re.compile(rb'"completion_tokens": ?(\d+)')
_PT = re.compile(rb'"prompt_tokens": ?(\d+)')
_FINISH = re.compile(rb'"finish_reason": ?"(\w+)"')


@dataclass(frozen=True)
class _Style:
    """The bytes the fast path looks for, in one JSON writer's spacing: vLLM (and orjson) write
    compact JSON; Python's ``json.dumps``, what many hand-written servers use, puts a space after
    every ``:`` and ``,``."""

    empty: bytes  # an empty content string: the role event's
    delta: bytes  # what precedes a token event's text
    role: bytes  # the role event's delta
    no_choices: bytes  # the usage-only event
    count: bytes  # the running completion count's key, up to its number


_COMPACT = _Style(b'"content":""', b'"delta":{"content":"', b'"delta":{"role":', b'"choices":[]',
                  b'"completion_tokens":')
_SPACED = _Style(b'"content": ""', b'"delta": {"content": "', b'"delta": {"role":', b'"choices": []',
                 b'"completion_tokens": ')


def response_id(payload: bytes) -> str | None:
    """The ``"id"`` of an OpenAI chunk/body (vLLM puts it first): joins a record with the server's
    per-request timings and logs. A find, not a JSON parse: it runs once per request."""
    i = payload.find(b'"id":')
    if i < 0:
        return None
    i += 6 if payload[i + 5:i + 6] == b" " else 5  # json.dumps writes '"id": "...'
    if payload[i:i + 1] != b'"':
        return None
    j = payload.find(b'"', i + 1)
    return payload[i + 1:j].decode("utf-8", "replace") if j >= 0 else None


def read_stream(parts: list[bytes], times: list[int], keep_text: bool = False) -> ChatStreamResult:
    """A streamed chat answer from its body pieces and their read stamps (bench/httpclient.py):
    the common shape without a JSON parse (:func:`fast_chat_stream`), anything else, or when the
    text is kept, through :class:`SSESplitter` and :func:`decode_chat_events`."""
    res = None if keep_text else fast_chat_stream(parts, times)
    if res is None:
        splitter = SSESplitter()
        for p, t in zip(parts, times):
            splitter.feed(p, t)
        res = decode_chat_events(splitter.events)
    return res


_TAILS: dict[bytes, list[bytes]] = {}  # what follows '"completion_tokens":' on the k-th token event, per server


def _count_tails(key: bytes, after: bytes, n: int) -> list[bytes]:
    """``b'"completion_tokens":1<after>'``, ``...:2<after>``, ...: a server writes the same bytes
    after the number on every event, so running counts 1..n are checked with ``endswith``."""
    tails = _TAILS.get(key + after)
    if tails is None or len(tails) < n:
        if len(_TAILS) > 16:
            _TAILS.clear()
        tails = _TAILS[key + after] = [b"%s%d%s" % (key, k, after) for k in range(1, max(n, 256) + 1)]
    return tails


def fast_chat_stream(parts: list[bytes], times: list[int]) -> ChatStreamResult | None:
    """The common stream shape, read with one pass over the body (the split into events) and a
    few bounded C-level checks per event instead of Python work or a JSON parse per event.

    The shape: one-line ``data: {...}`` events separated by ``\\n\\n``; an optional role event
    first; token events that all begin with the same bytes up to ``"delta":{"content":"`` (one
    choice, index 0, plain content: no tool calls, no reasoning text, no error); an optional
    usage-only event (``"choices":[]``); ``data: [DONE]`` last. With continuous usage the k-th
    token event must report ``completion_tokens`` k (one token each, checked on its last bytes);
    without it every token event counts one and the final usage gives the total, a difference
    going to the last event, as :func:`decode_chat_events` does. Anything else returns None and
    is decoded event by event; tests/unit/bench checks both agree.
    """
    blob = b"".join(parts)
    if b"\r" in blob:
        return None
    blocks = blob.split(b"\n\n")
    if blocks.pop() != b"" or len(blocks) < 2 or blocks[-1] != b"data: [DONE]":
        return None
    # the read stamp of each event's first byte, when every piece ends where an event ends
    event_ends = list(accumulate(map(add, map(len, blocks), repeat(2))))
    part_ends = list(accumulate(map(len, parts)))
    if part_ends == event_ends:  # one event per piece
        ns = times
    elif set(part_ends) <= set(event_ends):  # several events in some pieces
        ns = list(map(times.__getitem__, map(bisect_right, repeat(part_ends), [0, *event_ends[:-1]])))
    else:
        return None
    blocks.pop()  # [DONE]
    first = 0
    head = blocks[0]
    style = _SPACED if b'"choices": [' in head else _COMPACT
    if b'"role":' in head:  # the role event: no token, empty content
        if not head.startswith(b"data: {") or style.empty not in head or style.role not in head:
            return None
        first = 1
    last = len(blocks)
    usage_event = None
    if last > first and style.no_choices in blocks[-1]:
        usage_event = blocks[-1]
        last -= 1
    tok = blocks[first:last]
    if not tok:
        return None
    k = tok[0].find(style.delta)
    if k < 0:
        return None
    plen = k + len(style.delta)
    prefix = tok[0][:plen]
    if not prefix.startswith(b"data: {") or list(map(getitem, tok, repeat(slice(0, plen)))).count(prefix) != len(tok):
        return None  # tool calls, reasoning text, several choices, an error event, a changing id
    tok_ns = ns[first:last]
    last_tok = tok[-1]  # the finish reason's event (it may carry no text)
    n = len(tok)
    i = tok[0].rfind(style.count)
    if i >= 0:  # continuous usage: the k-th token event says k
        j = at = i + len(style.count)
        while j < len(tok[0]) and 48 <= tok[0][j] <= 57:
            j += 1
        if j == at:
            return None
        tails = _count_tails(style.count, tok[0][j:], n)[:n]
        if list(map(getitem, tok, map(slice, map(neg, map(len, tails)), repeat(None)))) != tails:
            return None
        output = n
        toks = [1] * n
        source = "usage"
        if usage_event is not None:
            um = _CT.search(usage_event)
            if um is None or int(um.group(1)) != n:
                return None  # the closing usage says otherwise: let the decoder credit it
    else:  # no per-event usage: an event with text is one token, an empty one none (as the decoder counts)
        firsts = bytes(map(getitem, tok, repeat(plen)))
        if 34 in firsts:
            keep = [c != 34 for c in firsts]
            tok_ns = [t for t, k_ in zip(tok_ns, keep) if k_]
            tok = [b for b, k_ in zip(tok, keep) if k_]
            n = len(tok)
            if not n:
                return None
        toks = [1] * n
        source = "events"
        output = n
        if usage_event is not None:
            um = _CT.search(usage_event)
            if um is None:
                return None
            output, source = int(um.group(1)), "usage"
            if output != n:
                toks[-1] += output - n
        if b'"completion_tokens"' in head and first:
            return None  # usage on the role event only: not a shape this path knows
    firsts = bytes(map(getitem, tok, repeat(plen)))
    content = [True] * n if 34 not in firsts else [c != 34 for c in firsts]  # 34: '"', an empty string
    pm = _PT.search(head) or (_PT.search(usage_event) if usage_event is not None else None)
    finish = None
    for b in (last_tok, usage_event):
        fm = _FINISH.search(b) if b is not None else None
        if fm:
            finish = fm.group(1).decode()
            break
    return ChatStreamResult(tok_ns, toks, content, int(pm.group(1)) if pm else None, output, finish, "",
                            response_id=response_id(head), output_source=source)


def decode_chat_events(events: list[tuple[int, bytes]]) -> ChatStreamResult:
    """Turn raw (t_ns, payload) events of a streamed chat completion into token events.

    Token counts per event come from ``continuous_usage_stats`` (running completion_tokens); an
    event whose count did not grow but that carries text (a server without continuous usage)
    counts as one token, which is what tools without usage stats assume.
    """
    ns: list[int] = []
    toks: list[int] = []
    content: list[bool] = []
    parts: list[str] = []
    last_completion = 0
    prompt = output = None
    finish = None
    saw_done = False
    rid = response_id(events[0][1]) if events else None
    for t_ns, payload in events:
        if payload == b"[DONE]":
            saw_done = True
            continue
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return ChatStreamResult(ns, toks, content, prompt, output, finish, "".join(parts),
                                    error="bad_sse_json", response_id=rid)
        if "error" in obj and not obj.get("choices"):
            return ChatStreamResult(ns, toks, content, prompt, output, finish, "".join(parts),
                                    error="stream_error", response_id=rid)
        usage = obj.get("usage") or {}
        text = ""
        for choice in obj.get("choices") or ():
            delta = choice.get("delta") or {}
            text += (delta.get("content") or "") + (delta.get("reasoning_content") or "")
            if choice.get("finish_reason"):
                finish = choice["finish_reason"]
        has_content = any(bool((c.get("delta") or {}).get("content")) for c in obj.get("choices") or ())
        completion = usage.get("completion_tokens")
        if usage.get("prompt_tokens") is not None:
            prompt = usage["prompt_tokens"]
        if completion is not None:
            output = completion
            added = completion - last_completion
            last_completion = completion
        else:
            added = 1 if text else 0
            last_completion += added  # what is counted so far: a closing usage adds only the rest
        if added > 0 and obj.get("choices"):
            ns.append(t_ns)
            toks.append(added)
            content.append(has_content)
        elif added > 0 and toks:  # a usage-only event added tokens: credit the last event
            toks[-1] += added
        parts.append(text)
    source = "usage" if output is not None else None
    if output is None and toks:
        output, source = sum(toks), "events"
    err = None if saw_done else "stream_truncated"
    return ChatStreamResult(ns, toks, content, prompt, output, finish, "".join(parts), error=err,
                            response_id=rid, output_source=source)
