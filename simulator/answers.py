"""What the simulated model answers: MinerU formats for MinerU prompts, filler text otherwise."""

from __future__ import annotations

import hashlib
import random
from collections import Counter, deque
from dataclasses import dataclass

from .mineru import KIND_OF_BLOCK, detect_kind, layout_answer, plan_layout, recognition_pieces, request_rng
from .profile import Profile
from .tokens import RegexTokens, Tokens


@dataclass
class Answer:
    pieces: list[str]  # one per output token with text
    finish_reason: str  # "stop": one more (text-less) EOS token follows the pieces; "length": capped

    @property
    def output_tokens(self) -> int:
        return len(self.pieces) + (1 if self.finish_reason == "stop" else 0)

    @property
    def text(self) -> str:
        return "".join(self.pieces)


class Answerer:
    def __init__(self, profile: Profile, seed: int, plan_log_size: int, tokens: Tokens | None = None) -> None:
        self.profile = profile
        self.tokens = tokens or RegexTokens()  # what one piece (one output token) is
        self.seed = seed
        self.rng = random.Random(seed)  # non-MinerU prompts: drawn in arrival order
        self.plans: deque[dict] = deque(maxlen=plan_log_size)
        self.kind_counts: Counter[str] = Counter()

    def answer(self, prompt_text: str, image: bytes | None, max_tokens: int | None,
               key: str | None = None, ignore_eos: bool = False) -> Answer:
        """``key`` (see ``_Common.deterministic_key``) makes a chat answer a function of it."""
        kind = detect_kind(prompt_text) if image is not None else None
        rng_chat = self.rng
        if key is not None:
            digest = hashlib.sha256(f"{self.seed}|{key}".encode()).digest()
            rng_chat = random.Random(int.from_bytes(digest[:8], "big"))
        if kind is not None and image is not None:  # a kind is only detected with an image
            self.kind_counts[kind] += 1
            rng = request_rng(self.seed, kind, image)
            if kind == "layout":
                blocks = plan_layout(rng, self.profile.mineru)
                self.plans.append({
                    "image_sha256": hashlib.sha256(image).hexdigest(),
                    "blocks": [b.to_json() for b in blocks],
                    "requests_expected": [KIND_OF_BLOCK.get(b.type, "text") for b in blocks],
                })
                pieces = self.tokens.split(layout_answer(blocks))
            else:
                pieces = recognition_pieces(kind, rng, self.profile.mineru)
                if not isinstance(self.tokens, RegexTokens):  # the same text, as the model's tokens
                    pieces = self.tokens.split("".join(pieces))
            wanted = len(pieces) + 1
        else:
            self.kind_counts["chat"] += 1
            wanted = max(1, round(self.profile.chat_output_tokens.sample(rng_chat)))
            pieces = None
        if ignore_eos and max_tokens is not None:  # as vLLM: no EOS, so the cap is reached
            wanted = max(wanted, max_tokens + 1)
        if max_tokens is not None and wanted > max_tokens:
            pieces = pieces[:max_tokens] if pieces is not None else self.tokens.filler(rng_chat, max_tokens)
            if len(pieces) < max_tokens:
                pieces += ["."] * (max_tokens - len(pieces))
            return Answer(pieces, "length")
        if pieces is None:
            pieces = self.tokens.filler(rng_chat, wanted - 1) if wanted > 1 else []
        return Answer(pieces, "stop")
