"""Where a run's prompt lengths come from: the server's ``/tokenize``, or a tokenizer on the client.

vLLM (and the simulator) count a chat prompt on ``POST /tokenize`` with the served model's own
tokenizer and chat template: the exact length, from the server itself. Many OpenAI-compatible
servers have no such endpoint (hosted APIs, proxies, TGI); for those the prompt is counted on
the client with the tokenizer the user names (``--tokenizer DIR`` or the scenario's
``tokenizer``), or else with the served model's tokenizer when it is in the local Hugging Face
cache under the served model name. The source is stated in the summary and the report
(``tokens.prompt_source``). With neither, the run stops before anything is sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import httpx
import orjson

from bench.target import Target
from bench.tokcheck import ClientTokenizer, TokenizerCheckError, load_tokenizer
from contract.extras import require

# Statuses meaning "no such endpoint here": 404, or 405 from servers that route POST /<anything>.
NO_ENDPOINT = (404, 405, 501)
SERVER_TOKENIZE = "server /tokenize"


class TokenizeError(RuntimeError):
    """Prompt lengths cannot be measured: raised before anything is sent."""


class Counter(Protocol):
    max_model_len: int | None

    def count(self, text: str) -> int: ...

    def count_messages(self, messages: list[dict]) -> int: ...

    def count_text(self, text: str) -> int: ...


def error_detail(body: bytes) -> str:
    try:
        obj = orjson.loads(body)
        err = obj.get("error", obj)
        return str(err.get("message", err) if isinstance(err, dict) else err)[:500]
    except (orjson.JSONDecodeError, AttributeError):
        return body[:500].decode(errors="replace")


class NoTokenizeEndpoint(TokenizeError):
    pass


class ServerCounter:
    """Exact prompt lengths from the server's own tokenizer and chat template (``/tokenize``)."""

    def __init__(self, target: Target, client: httpx.Client) -> None:
        self.target = target
        self.client = client
        self.max_model_len: int | None = None

    def count(self, text: str) -> int:
        return self.count_messages([{"role": "user", "content": text}])

    def count_messages(self, messages: list[dict]) -> int:
        """A chat prompt's length with the served model's chat template."""
        return self._tokenize({"model": self.target.model, "messages": messages})

    def count_text(self, text: str) -> int:
        """A text's own length (no template, no special tokens): an answer's length in tokens."""
        return self._tokenize({"model": self.target.model, "prompt": text, "add_special_tokens": False})

    def _tokenize(self, body: dict) -> int:
        url = f"{self.target.base_url}/tokenize"
        try:
            r = self.client.post(url, json=body, headers=self.target.headers)
        except httpx.HTTPError as exc:
            raise TokenizeError(f"POST {url} failed: {exc}; is the server up (`splitstack status`)?") from exc
        if r.status_code == 404 and "model" in r.text.lower():
            raise TokenizeError(f"POST /tokenize returned 404: {error_detail(r.content)}; is "
                                f"{self.target.model!r} the served model name (--model)?")
        if r.status_code in NO_ENDPOINT:
            raise NoTokenizeEndpoint(f"{self.target.base_url} has no /tokenize endpoint ({r.status_code})")
        if r.status_code != 200:
            raise TokenizeError(f"POST /tokenize returned {r.status_code}: {r.text[:300]}")
        data = r.json()
        if data.get("max_model_len"):
            self.max_model_len = int(data["max_model_len"])
        return int(data["count"])


class ClientCounter:
    """Prompt lengths counted here, the way vLLM's /tokenize counts chat messages
    (bench/tokcheck.py: chat template with the generation prompt, no extra special tokens)."""

    def __init__(self, tok: ClientTokenizer, max_model_len: int | None) -> None:
        self.tok = tok
        self.max_model_len = max_model_len

    def count(self, text: str) -> int:
        return self.count_messages([{"role": "user", "content": text}])

    def count_messages(self, messages: list[dict]) -> int:
        return self.tok.count_chats([messages])[0]

    def count_text(self, text: str) -> int:
        return self.tok.count_texts([text])[0]


@dataclass(frozen=True)
class PromptSource:
    counter: Counter
    label: str  # what the summary and the report say


def served_max_model_len(target: Target, client: httpx.Client) -> int | None:
    """``max_model_len`` of the served model from ``GET /v1/models`` (vLLM lists it); None when
    the server does not say."""
    try:
        r = client.get(f"{target.base_url}/v1/models", headers=target.headers)
        models = r.json().get("data", []) if r.status_code == 200 else []
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    for m in models if isinstance(models, list) else []:
        if isinstance(m, dict) and m.get("id") == target.model and isinstance(m.get("max_model_len"), int):
            return m["max_model_len"]
    return None


def _in_hf_cache(name: str) -> bool:
    """Whether the local Hugging Face cache holds a repository of that name."""
    constants = require("huggingface_hub.constants", "vllm", "counting prompts with the served model's tokenizer")
    return (Path(constants.HF_HUB_CACHE) / f"models--{name.replace('/', '--')}").is_dir()


def choose(target: Target, client: httpx.Client, local: tuple[ClientTokenizer, str] | None) -> PromptSource:
    """The server's /tokenize when it has one; else ``local`` (the tokenizer the user named, and
    where: ``--tokenizer`` or the scenario); else the served model's tokenizer from the local
    Hugging Face cache. Raises TokenizeError, saying what to pass, when none of them exists."""
    server = ServerCounter(target, client)
    try:
        server.count("")
        return PromptSource(server, SERVER_TOKENIZE)
    except NoTokenizeEndpoint as exc:
        missing = str(exc)
    max_len = served_max_model_len(target, client) or target.max_model_len
    if local is not None:
        tok, origin = local
        return PromptSource(ClientCounter(tok, max_len),
                            f"client tokenizer {tok.name} ({origin}; the server has no /tokenize)")
    try:
        if not _in_hf_cache(target.model):  # checked first: loading transformers to find nothing takes seconds
            raise TokenizerCheckError(target.model)
        tok = load_tokenizer(target.model, "the served model name")
    except TokenizerCheckError:
        raise TokenizeError(
            f"{missing}, so the server cannot measure prompt lengths, and the served model name "
            f"{target.model!r} is not a tokenizer in the local Hugging Face cache; name the served model's "
            "tokenizer with --tokenizer DIR (its directory, or a Hugging Face name in the local cache) or the "
            "scenario's tokenizer field. Nothing was sent."
        ) from None
    return PromptSource(ClientCounter(tok, max_len),
                        f"client tokenizer {tok.name} (the served model name, from the local Hugging Face cache; "
                        "the server has no /tokenize)")
