"""How the simulator counts tokens: its own regex pieces, or the served model's tokenizer.

Without a tokenizer (the default), text splits into BPE-like pieces with one regex
(simulator/textgen.py): deterministic and cheap, but not what a model's tokenizer counts (a
128-token prompt of English words is about 60 regex pieces). With ``--tokenizer DIR`` (a Hugging
Face tokenizer directory: ``tokenizer.json`` and ``tokenizer_config.json`` with a
``chat_template``; the local stack passes the tiny model's own), every count is the model's,
as vLLM counts it:

* ``/tokenize`` and ``usage.prompt_tokens`` of a chat: the chat template rendered with the
  generation prompt, then encoded without extra special tokens (vLLM's /tokenize convention);
* a completion prompt: the text encoded without extra special tokens;
* an answer: its text is made of the tokenizer's own tokens, one per SSE event, so
  ``completion_tokens`` is the number of events with text and re-encoding the text gives it back.

The Rust ``tokenizers`` library encodes and Jinja renders the template (as transformers does:
trim_blocks, lstrip_blocks, a sandbox). When transformers is installed the tokenizer is the one
its AutoTokenizer builds, as vLLM's is (it can differ from tokenizer.json as saved: recent
transformers versions replace some pre-tokenizers); without it, tokenizer.json as it is. Rendered chat
prompts are cached by their messages (a benchmark reuses a pool of prompts).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import random
from collections import OrderedDict
from pathlib import Path
from typing import Any, Protocol

from contract.extras import MissingExtra, require

from .textgen import chat_prompt_tokens, count_tokens, filler_pieces, split_pieces

CHAT_CACHE_SIZE = 4096


class TokenizerError(ValueError):
    """The configured tokenizer cannot be loaded."""


class Tokens(Protocol):
    name: str

    def count(self, text: str) -> int: ...
    def chat_prompt(self, roles: list[str], texts: list[str]) -> int: ...
    def split(self, text: str) -> list[str]: ...
    def filler(self, rng: random.Random, n: int) -> list[str]: ...


class RegexTokens:
    """The simulator's own pieces (simulator/textgen.py)."""

    name = "regex"

    def count(self, text: str) -> int:
        return count_tokens(text)

    def chat_prompt(self, roles: list[str], texts: list[str]) -> int:
        return chat_prompt_tokens(texts)

    def split(self, text: str) -> list[str]:
        return split_pieces(text)

    def filler(self, rng: random.Random, n: int) -> list[str]:
        return filler_pieces(rng, n)


class ModelTokens:
    """The served model's tokenizer (see the module docstring)."""

    def __init__(self, directory: str | Path) -> None:
        d = Path(directory).expanduser()
        fix = "pass the served model's directory (tokenizer.json and tokenizer_config.json), or drop --tokenizer"
        if not (d / "tokenizer.json").is_file():
            raise TokenizerError(f"--tokenizer {str(directory)!r}: no tokenizer.json in that directory; {fix}")
        try:
            tokenizer_cls = require("tokenizers", "vllm", "--tokenizer").Tokenizer
        except MissingExtra as exc:
            raise TokenizerError(f"{exc}; or drop --tokenizer") from None
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        self.name = str(directory)
        self.tok = _backend(d) or tokenizer_cls.from_file(str(d / "tokenizer.json"))
        cfg_path = d / "tokenizer_config.json"
        cfg: dict[str, Any] = json.loads(cfg_path.read_text()) if cfg_path.is_file() else {}
        template = cfg.get("chat_template")
        if isinstance(template, list):  # named templates: the default one
            template = next((t.get("template") for t in template if t.get("name") == "default"), None)
        if not isinstance(template, str):
            raise TokenizerError(f"--tokenizer {str(directory)!r}: tokenizer_config.json has no chat_template, so "
                                 f"chat prompts cannot be counted as the model's server counts them; {fix}")

        def token(key: str) -> str:
            v = cfg.get(key)
            return v.get("content", "") if isinstance(v, dict) else (v or "")

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        self.template = env.from_string(template)
        self.specials = {k: token(k) for k in ("bos_token", "eos_token", "pad_token", "unk_token")}
        self._chats: OrderedDict[tuple[tuple[str, str], ...], int] = OrderedDict()

    def count(self, text: str) -> int:
        return len(self.tok.encode(text, add_special_tokens=False).ids)

    def chat_prompt(self, roles: list[str], texts: list[str]) -> int:
        key = tuple(zip(roles, texts))
        n = self._chats.get(key)
        if n is None:
            rendered = self.template.render(messages=[{"role": r, "content": t} for r, t in key],
                                            add_generation_prompt=True, **self.specials)
            n = self.count(rendered)
            self._chats[key] = n
            if len(self._chats) > CHAT_CACHE_SIZE:
                self._chats.popitem(last=False)
        return n

    def split(self, text: str) -> list[str]:
        """The text as the model's tokens (their decoded strings; they join back to the text)."""
        if not text:
            return []
        offsets = self.tok.encode(text, add_special_tokens=False).offsets
        pieces = [text[a:b] for a, b in offsets]
        # offsets can leave gaps (normalisers) or overlap (byte fallback): then the pieces would not
        # join back to the text; fall back to one piece per token id's decoded string
        if "".join(pieces) != text:
            ids = self.tok.encode(text, add_special_tokens=False).ids
            pieces = [self.tok.decode([i]) for i in ids]
        return pieces

    def filler(self, rng: random.Random, n: int) -> list[str]:
        """n of the model's tokens of English-looking text."""
        if n <= 0:
            return []
        words = n
        while True:
            pieces = self.split("".join(filler_pieces(rng, words)))
            if len(pieces) >= n:
                return pieces[:n]
            words *= 2


def _cache_file(d: Path) -> Path | None:
    """Where the tokenizer as transformers builds it is kept: keyed by the directory's tokenizer
    files and the transformers version; None when transformers is not installed."""
    try:
        version = importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        return None
    h = hashlib.sha256(version.encode())
    for name in ("tokenizer.json", "tokenizer_config.json", "config.json", "special_tokens_map.json"):
        f = d / name
        h.update(name.encode() + (f.read_bytes() if f.is_file() else b"-"))
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "splitstack-sim-tokenizers"
    return base / f"{h.hexdigest()[:32]}.json"


def _backend(d: Path) -> Any:
    """The tokenizer exactly as vLLM loads it (transformers' AutoTokenizer: it may adjust what
    tokenizer.json says, e.g. replace the pre-tokenizer by the model type's own), as the Rust
    tokenizer under it; None when transformers is not installed (then tokenizer.json as it is).
    Importing transformers takes seconds, so what it built is cached (``_cache_file``) and later
    starts load that with the Rust library alone."""
    from tokenizers import Tokenizer

    cache = _cache_file(d)
    if cache is None:
        return None
    if cache.is_file():
        with contextlib.suppress(Exception):  # a damaged cache file: rebuilt below
            return Tokenizer.from_str(cache.read_text())
    try:
        from transformers import AutoTokenizer

        backend = AutoTokenizer.from_pretrained(str(d), local_files_only=True).backend_tokenizer
    except (ImportError, OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    with contextlib.suppress(OSError):  # not writable (a read-only container): no cache, same answer
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(backend.to_str())
        os.replace(tmp, cache)
    return backend


def load_tokens(directory: str | None) -> Tokens:
    return ModelTokens(directory) if directory else RegexTokens()
