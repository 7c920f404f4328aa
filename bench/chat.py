"""The ``chat`` workload: prepared OpenAI chat requests and the streaming sender.

Preparation (before the clock starts) draws prompt and output lengths from the scenario,
builds seeded prompts whose length is made exact through the server's ``/tokenize``, checks
every request against ``max_model_len`` (the context guard) and serialises each body once.
The sender then only writes prepared bytes and stamps times.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import orjson

from bench import promptlen
from bench.dataset import Entry, load_dataset
from bench.httpclient import Pool, Response, TransportError
from bench.images import data_url
from bench.promptlen import Counter
from bench.records import Phase, chat_row, pack_events
from bench.scenario import ChatScenario
from bench.sse import read_stream
from bench.target import Target, TargetError
from bench.tokcheck import ClientTokenizer

# Common short English words: a tiny BPE vocabulary splits them into 1-3 tokens each.
WORDS = ("the of and to in is that for it as was with be by on not he this are or his from at "
         "which but have an they you were her she there one all we their been has would when who "
         "will more if no out so said what up its about into than them can only other new some "
         "could time these two may then do first any my now such like our over man me even most "
         "made after also did many before must through back years where much your way well down "
         "should because each just those people how too little state good very make world still "
         "own see men work long get here between both life being under never day same another "
         "know while last might us great old year off come since against go came right used take "
         "three page table figure report data model server queue worker token latency").split()


class ContextGuardError(ValueError):
    """A prepared request cannot fit the server's context window."""


@dataclass(frozen=True)
class PreparedRequest:
    body: bytes
    prompt_tokens: int | None
    max_tokens: int


@dataclass
class Prepared:
    """The prepared requests and where their prompt lengths came from."""

    requests: list[PreparedRequest]
    prompt_source: str


def _messages(text: str, images: list[str]) -> list[dict]:
    if not images:
        return [{"role": "user", "content": text}]
    parts: list[dict] = [{"type": "image_url", "image_url": {"url": u}} for u in images]
    parts.append({"type": "text", "text": text})
    return [{"role": "user", "content": parts}]


def exact_prompt(tok: Counter, target_tokens: int, rng: np.random.Generator) -> tuple[str, int]:
    """A prompt of random words whose templated length is as close to the target as possible
    without exceeding it (binary search over the word count; exact in practice)."""
    words = [WORDS[i] for i in rng.integers(0, len(WORDS), size=max(4, target_tokens))]
    empty = tok.count("")
    lo, hi = 0, len(words)  # invariant: count(words[:lo]) <= target
    best = ("", empty)
    while lo <= hi:
        mid = (lo + hi) // 2
        text = " ".join(words[:mid])
        n = tok.count(text)
        if n == target_tokens:
            return text, n
        if n < target_tokens:
            best = (text, n)
            lo = mid + 1
        else:
            hi = mid - 1
    return best


def prepare(scn: ChatScenario, target: Target, client: httpx.Client | None = None,
            max_model_len: int | None = None,
            tokenizer: tuple[ClientTokenizer, str] | None = None) -> Prepared:
    """Build ``prompt_pool`` request bodies; raises ContextGuardError before anything is sent.
    ``tokenizer`` (and where it was named) counts prompts when the server has no /tokenize."""
    rng = np.random.default_rng(scn.load.seed)
    entries = None
    if scn.dataset is not None:
        d = scn.dataset
        entries = load_dataset(Path(d.path), d.format, d.order, d.limit, scn.load.seed)
    n = len(entries) if entries is not None else scn.prompt_pool
    prompt_lens = scn.prompt_tokens.sample(rng, n) if scn.prompt_tokens is not None else []
    output_lens = scn.output_tokens.sample(rng, n)
    own_client = client is None
    client = client or httpx.Client(timeout=30.0)
    try:
        source = promptlen.choose(target, client, tokenizer)
        tok = source.counter
        if entries is not None:
            return Prepared(_from_dataset(scn, target, entries, output_lens, tok, max_model_len), source.label)
        out: list[PreparedRequest] = []
        limit = max_model_len or target.max_model_len
        for i in range(n):
            # a fresh random prompt per pool entry: no two share a prefix the server could cache
            text, exact = exact_prompt(tok, prompt_lens[i], rng)
            limit = tok.max_model_len or limit
            if limit is not None and exact + output_lens[i] > limit:
                raise ContextGuardError(
                    f"scenario {scn.name!r}, request {i}: prompt {exact} tokens + max_tokens "
                    f"{output_lens[i]} = {exact + output_lens[i]} > max_model_len {limit} of "
                    f"{target.base_url}; lower prompt_tokens.max/output_tokens.max in the scenario "
                    f"or raise max_model_len in the deployment spec. Nothing was sent.")
            images = [data_url(scn.images.width_px, scn.images.height_px, scn.load.seed * 1000 + i * 16 + k)
                      for k in range(scn.images.count)]
            body = _body(scn, target, _messages(text, images), output_lens[i])
            out.append(PreparedRequest(orjson.dumps(body), None if images else exact, output_lens[i]))
        return Prepared(out, source.label)
    finally:
        if own_client:
            client.close()


def _body(scn: ChatScenario, target: Target, messages: list[dict], max_tokens: int) -> dict:
    body: dict = {"model": target.model, "messages": messages, "max_tokens": max_tokens,
                  "temperature": scn.temperature, "seed": scn.load.seed, "stream": scn.stream}
    if scn.ignore_eos:
        body["ignore_eos"] = True
    if scn.stream:
        body["stream_options"] = ({"include_usage": True, "continuous_usage_stats": True}
                                  if scn.continuous_usage_stats else {"include_usage": True})
    return body


def _from_dataset(scn: ChatScenario, target: Target, entries: list[Entry], output_lens: list[int], tok: Counter,
                  max_model_len: int | None) -> list[PreparedRequest]:
    """The dataset's records as prepared requests: prompt lengths counted as generated prompts are
    (the server's /tokenize or the run's tokenizer; a record with images is not counted: the
    server's usage says), max_tokens from the record, its answer's length or the scenario, and
    the context guard over each."""
    out = []
    use_dataset = scn.dataset is not None and scn.dataset.output_tokens == "dataset"
    for i, e in enumerate(entries):
        prompt = None if e.has_images else tok.count_messages(e.messages)
        max_tokens = output_lens[i]
        if use_dataset and e.max_tokens is not None:
            max_tokens = e.max_tokens
        elif use_dataset and e.answer:
            max_tokens = max(1, tok.count_text(e.answer))
        limit = tok.max_model_len or max_model_len or target.max_model_len
        if limit is not None and prompt is not None and prompt + max_tokens > limit:
            raise ContextGuardError(
                f"scenario {scn.name!r}, dataset record {i} (after ordering): prompt {prompt} tokens + max_tokens "
                f"{max_tokens} = {prompt + max_tokens} > max_model_len {limit} of {target.base_url}; drop or "
                "shorten that record, or set the dataset's output_tokens: scenario. Nothing was sent.")
        body = _body(scn, target, e.messages, max_tokens)
        out.append(PreparedRequest(orjson.dumps(body), prompt, max_tokens))
    return out


class ChatSender:
    """Sends prepared requests; each finished request becomes a compact row (bench/records.py)."""

    def __init__(self, target: Target, prepared: list[PreparedRequest], process: int,
                 timeout_s: float, keep_output: bool, pool: Pool, keep_text_without_usage: bool = False) -> None:
        self.pool = pool
        self.requests = [pool.request_head("POST", "/v1/chat/completions", target.headers, len(r.body)) + r.body
                         for r in prepared]
        self.prepared = prepared
        self.n = len(prepared)
        self.process = process
        self.keep_output = keep_output
        self.keep_text_without_usage = keep_text_without_usage  # for counting with a tokenizer after the run
        self.timeout_s = timeout_s

    async def send(self, index: int, intended_ns: int, phase: Phase, t0: int) -> tuple:
        k = index % self.n
        req = self.prepared[k]
        rid = f"p{self.process}-{index}"
        wall = time.time()
        sent = time.monotonic_ns() - t0
        try:
            resp = await self.pool.send(self.requests[k], t0, self.timeout_s, True)
        except TransportError as exc:
            return chat_row(request_id=rid, phase=phase, process=self.process, intended_ns=intended_ns, sent_ns=sent,
                            wall_sent_s=wall, headers_ns=None, event_ns=[], event_tokens=None, event_content=None,
                            end_ns=time.monotonic_ns() - t0, error=exc.reason, error_detail=str(exc),
                            prompt_tokens=req.prompt_tokens, max_tokens=req.max_tokens)
        status = resp.status
        if status != 200:
            return chat_row(request_id=rid, phase=phase, process=self.process, intended_ns=intended_ns, sent_ns=sent,
                            wall_sent_s=wall, headers_ns=resp.headers_ns, event_ns=[], event_tokens=None,
                            event_content=None, end_ns=resp.end_ns, status=status, error=f"http_{status}",
                            error_detail=promptlen.error_detail(bytes(resp.body)), prompt_tokens=req.prompt_tokens,
                            max_tokens=req.max_tokens)
        if not resp.content_type.startswith("text/event-stream"):
            return self._non_stream(resp, rid, phase, intended_ns, sent, wall, req)
        res = read_stream(resp.parts, resp.times, self.keep_output)
        if res.error is None and res.output_source != "usage" and self.keep_text_without_usage and not res.text:
            res = read_stream(resp.parts, resp.times, True)  # the text, to count it with the tokenizer
        text = res.text if self.keep_output or (res.output_source != "usage" and self.keep_text_without_usage) else None
        error = res.error
        detail = "stream ended without data: [DONE]" if error == "stream_truncated" else None
        ns, toks, content = pack_events(res.event_ns, res.event_tokens, res.event_content)
        return chat_row(request_id=rid, phase=phase, process=self.process, intended_ns=intended_ns, sent_ns=sent,
                        wall_sent_s=wall, headers_ns=resp.headers_ns, event_ns=ns, event_tokens=toks,
                        event_content=content, end_ns=resp.end_ns, status=status, error=error, error_detail=detail,
                        prompt_tokens=req.prompt_tokens, server_prompt_tokens=res.prompt_tokens,
                        output_tokens=res.output_tokens, output_tokens_source=res.output_source,
                        max_tokens=req.max_tokens, output_text=text, finish_reason=res.finish_reason,
                        response_id=res.response_id)

    def _non_stream(self, resp: Response, rid: str, phase: Phase, intended_ns: int, sent: int, wall: float,
                    req: PreparedRequest) -> tuple:
        body = bytes(resp.body) or b"".join(resp.parts)
        try:
            obj = orjson.loads(body)
        except orjson.JSONDecodeError:
            return chat_row(request_id=rid, phase=phase, process=self.process, intended_ns=intended_ns, sent_ns=sent,
                            wall_sent_s=wall, headers_ns=resp.headers_ns, event_ns=[], event_tokens=None,
                            event_content=None, end_ns=resp.end_ns, status=resp.status, error="bad_json",
                            error_detail=body[:200].decode(errors="replace"), prompt_tokens=req.prompt_tokens,
                            max_tokens=req.max_tokens)
        usage = obj.get("usage") or {}
        output = usage.get("completion_tokens")
        choice = (obj.get("choices") or [{}])[0]
        text = (choice.get("message") or {}).get("content")
        # The whole answer arrives at once: its first byte is the first token.
        ns, toks, content = pack_events(*(([resp.headers_ns], [output], [True]) if output else ([], [], [])))
        keep = self.keep_output or (output is None and self.keep_text_without_usage)
        return chat_row(request_id=rid, phase=phase, process=self.process, intended_ns=intended_ns, sent_ns=sent,
                        wall_sent_s=wall, headers_ns=resp.headers_ns, event_ns=ns, event_tokens=toks,
                        event_content=content, end_ns=resp.end_ns, status=resp.status,
                        prompt_tokens=req.prompt_tokens, server_prompt_tokens=usage.get("prompt_tokens"),
                        output_tokens=output, output_tokens_source="usage" if output is not None else None,
                        max_tokens=req.max_tokens, output_text=text if keep else None,
                        finish_reason=choice.get("finish_reason"), response_id=obj.get("id"))

    async def aclose(self) -> None:
        self.pool.close()


@dataclass
class ChatWorkload:
    """Picklable: the prepared bodies travel to each client process."""

    target: Target
    prepared: list[PreparedRequest]
    keep_output: bool = False
    keep_text_without_usage: bool = False  # the run counts outputs with a tokenizer when the server sends no usage
    name: str = "chat"

    async def sender(self, process: int, timeout_s: float) -> ChatSender:
        if self.target.base_url is None:  # bench.runner.preflight refuses this before anything is prepared
            raise TargetError("the chat workload sends to the inference server: pass its URL with --url")
        return ChatSender(self.target, self.prepared, process, timeout_s, self.keep_output,
                          Pool(self.target.base_url), self.keep_text_without_usage)
