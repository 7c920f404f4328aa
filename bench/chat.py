"""The ``chat`` workload: prepared OpenAI chat requests and the streaming sender.

Preparation (before the clock starts) draws prompt and output lengths from the scenario,
builds seeded prompts whose length is made exact through the server's ``/tokenize``, checks
every request against ``max_model_len`` (the context guard) and serialises each body once.
The sender then only writes prepared bytes and stamps times.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import httpx
import numpy as np
import orjson

from bench.httpclient import Pool, TransportError
from bench.images import data_url
from bench.records import Phase, RequestRecord
from bench.scenario import ChatScenario
from bench.sse import SSESplitter, decode_chat_events, fast_chat_events
from bench.target import Target, TargetError

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


class TokenizeError(RuntimeError):
    pass


@dataclass(frozen=True)
class PreparedRequest:
    body: bytes
    prompt_tokens: int | None
    max_tokens: int


def _messages(text: str, images: list[str]) -> list[dict]:
    if not images:
        return [{"role": "user", "content": text}]
    parts: list[dict] = [{"type": "image_url", "image_url": {"url": u}} for u in images]
    parts.append({"type": "text", "text": text})
    return [{"role": "user", "content": parts}]


class Tokenizer:
    """Exact prompt lengths from the server's own tokenizer and chat template (/tokenize)."""

    def __init__(self, target: Target, client: httpx.Client) -> None:
        self.target = target
        self.client = client
        self.max_model_len: int | None = None

    def count(self, text: str) -> int:
        body = {"model": self.target.model, "messages": [{"role": "user", "content": text}]}
        try:
            r = self.client.post(f"{self.target.base_url}/tokenize", json=body,
                                 headers=self.target.headers)
        except httpx.HTTPError as exc:
            raise TokenizeError(f"POST {self.target.base_url}/tokenize failed: {exc}; is the "
                                "server up (`splitstack status`)?") from exc
        if r.status_code == 404 and "model" in r.text.lower():
            raise TokenizeError(f"POST /tokenize returned 404: {_error_detail(r.content)}; is "
                                f"{self.target.model!r} the served model name (--model)?")
        if r.status_code == 404:
            raise TokenizeError(f"{self.target.base_url} has no /tokenize endpoint (404): prompt "
                                "lengths cannot be made exact; use a vLLM-compatible server")
        if r.status_code != 200:
            raise TokenizeError(f"POST /tokenize returned {r.status_code}: {r.text[:300]}")
        data = r.json()
        if data.get("max_model_len"):
            self.max_model_len = int(data["max_model_len"])
        return int(data["count"])


def exact_prompt(tok: Tokenizer, target_tokens: int, rng: np.random.Generator) -> tuple[str, int]:
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
            max_model_len: int | None = None) -> list[PreparedRequest]:
    """Build ``prompt_pool`` request bodies; raises ContextGuardError before anything is sent."""
    rng = np.random.default_rng(scn.load.seed)
    n = scn.prompt_pool
    prompt_lens = scn.prompt_tokens.sample(rng, n)
    output_lens = scn.output_tokens.sample(rng, n)
    own_client = client is None
    client = client or httpx.Client(timeout=30.0)
    try:
        tok = Tokenizer(target, client)
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
            body: dict = {"model": target.model, "messages": _messages(text, images),
                          "max_tokens": output_lens[i], "temperature": scn.temperature,
                          "seed": scn.load.seed, "stream": scn.stream}
            if scn.ignore_eos:
                body["ignore_eos"] = True
            if scn.stream:
                body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
            out.append(PreparedRequest(orjson.dumps(body), None if images else exact, output_lens[i]))
        return out
    finally:
        if own_client:
            client.close()


def _error_detail(body: bytes) -> str:
    try:
        obj = orjson.loads(body)
        err = obj.get("error", obj)
        return str(err.get("message", err) if isinstance(err, dict) else err)[:500]
    except (orjson.JSONDecodeError, AttributeError):
        return body[:500].decode(errors="replace")


class ChatSender:
    def __init__(self, target: Target, prepared: list[PreparedRequest], process: int,
                 timeout_s: float, keep_output: bool, pool: Pool) -> None:
        self.pool = pool
        self.heads = [pool.request_head("POST", "/v1/chat/completions", target.headers, len(r.body))
                      for r in prepared]
        self.prepared = prepared
        self.process = process
        self.keep_output = keep_output
        self.timeout_s = timeout_s

    async def send(self, index: int, intended_ns: int, phase: Phase, t0: int) -> RequestRecord:
        k = index % len(self.prepared)
        req = self.prepared[k]
        rec = RequestRecord.model_construct(
            kind="chat", request_id=f"p{self.process}-{index}", phase=phase, process=self.process,
            intended_ns=intended_ns, sent_ns=0, wall_sent_s=time.time(), headers_ns=None,
            event_ns=[], event_tokens=[], event_content=[], end_ns=None, status=None, error=None,
            error_detail=None, prompt_tokens=req.prompt_tokens, server_prompt_tokens=None,
            output_tokens=None, max_tokens=req.max_tokens, output_text=None, finish_reason=None,
            response_id=None)
        splitter = SSESplitter()
        rec.sent_ns = time.monotonic_ns() - t0
        try:
            resp = await self.pool.send(self.heads[k], req.body, t0, self.timeout_s, splitter.feed)
        except TransportError as exc:
            rec.end_ns = time.monotonic_ns() - t0
            rec.error, rec.error_detail = exc.reason, str(exc)
            return rec
        rec.headers_ns, rec.end_ns, rec.status = resp.headers_ns, resp.end_ns, resp.status
        if resp.status != 200:
            rec.error, rec.error_detail = f"http_{resp.status}", _error_detail(bytes(resp.body))
            return rec
        if not resp.content_type.startswith("text/event-stream"):
            self._non_stream(rec, bytes(resp.body) or splitter.leftover())
            return rec
        res = None if self.keep_output else fast_chat_events(splitter.events)
        if res is None:
            res = decode_chat_events(splitter.events)
        rec.event_ns, rec.event_tokens, rec.event_content = res.event_ns, res.event_tokens, res.event_content
        rec.server_prompt_tokens, rec.output_tokens = res.prompt_tokens, res.output_tokens
        rec.finish_reason, rec.response_id = res.finish_reason, res.response_id
        if self.keep_output:
            rec.output_text = res.text
        if res.error:
            rec.error = res.error
            rec.error_detail = "stream ended without data: [DONE]" if res.error == "stream_truncated" else None
        return rec

    def _non_stream(self, rec: RequestRecord, body: bytes) -> None:
        try:
            obj = orjson.loads(body)
        except orjson.JSONDecodeError:
            rec.error, rec.error_detail = "bad_json", body[:200].decode(errors="replace")
            return
        usage = obj.get("usage") or {}
        rec.response_id = obj.get("id")
        rec.server_prompt_tokens = usage.get("prompt_tokens")
        rec.output_tokens = usage.get("completion_tokens")
        choice = (obj.get("choices") or [{}])[0]
        rec.finish_reason = choice.get("finish_reason")
        # The whole answer arrives at once: its first byte is the first token. (headers_ns is set by
        # the time a body is read; the test only narrows the type.)
        if rec.output_tokens and rec.headers_ns is not None:
            rec.event_ns, rec.event_tokens, rec.event_content = [rec.headers_ns], [rec.output_tokens], [True]
        if self.keep_output:
            rec.output_text = (choice.get("message") or {}).get("content")

    async def aclose(self) -> None:
        self.pool.close()


@dataclass
class ChatWorkload:
    """Picklable: the prepared bodies travel to each client process."""

    target: Target
    prepared: list[PreparedRequest]
    keep_output: bool = False
    name: str = "chat"

    async def sender(self, process: int, timeout_s: float) -> ChatSender:
        if self.target.base_url is None:  # bench.runner.preflight refuses this before anything is prepared
            raise TargetError("the chat workload sends to the inference server: pass its URL with --url")
        return ChatSender(self.target, self.prepared, process, timeout_s, self.keep_output,
                          Pool(self.target.base_url))
