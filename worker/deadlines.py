"""How long one request to the inference server may take: a deadline sized from the request and
the server's measured speed, instead of one fixed 10-minute timeout.

    deadline = floor_s + slack * seconds_per_token * (prompt_tokens / PREFILL_SPEEDUP + output_tokens)

at most ``cap_s`` (``worker_pool.request_timeout_s``), doubled for each retry of the same request.

* ``prompt_tokens``: estimated from the body: text at ~4 characters per token, each image by its
  pixel size in 28x28 patches (the Qwen2-VL family MinerU 2.5 belongs to merges 2x2 patches of 14
  pixels into one token: https://huggingface.co/Qwen/Qwen2-VL-7B-Instruct#image-resolution).
* ``output_tokens``: the request's ``max_tokens`` when it sets one. MinerU sets none (the server
  then allows up to ``max_model_len`` minus the prompt), so the budget is twice the longest
  answer among the last ones, at least ``MIN_OUTPUT_BUDGET``, at most what the context leaves.
  An answer longer than that budget costs one retry, which gets twice the time.
* ``seconds_per_token``: measured from the worker's own answers (their ``usage`` and how long
  they took, server queueing included), the 90th percentile of the last ``WINDOW`` answers. A
  server that slows down under load moves the deadline with it; before the first answer a
  conservative prior is used.

Prefill costs far less per token than decoding (prompt tokens run in one parallel pass), hence
``PREFILL_SPEEDUP``; the value is deliberately low, which errs towards a longer deadline.
"""

from __future__ import annotations

import base64
import binascii
import io
import math
from collections import deque
from typing import Any

from PIL import Image, UnidentifiedImageError

WINDOW = 64  # answers the speed estimate looks back on
PRIOR_S_PER_TOKEN = 0.05  # before any answer: 20 tokens/s, a slow CPU server
PREFILL_SPEEDUP = 10.0  # prompt tokens cost this many times less than output tokens
MIN_OUTPUT_BUDGET = 256  # output tokens allowed before any long answer was seen
CHARS_PER_TOKEN = 4
IMAGE_PATCH_PX = 28
UNKNOWN_IMAGE_TOKENS = 1500  # an image whose size cannot be read (about a 1036x1036 page)
_HEADER_B64_CHARS = 65536  # enough base64 for PNG/JPEG headers written by PIL


def image_tokens(url: str) -> int:
    """Tokens of one ``data:image/...;base64,`` URL, from the size in its image header."""
    _, sep, payload = url.partition(",")
    if not sep:
        return UNKNOWN_IMAGE_TOKENS
    try:
        head = base64.b64decode(payload[:_HEADER_B64_CHARS - _HEADER_B64_CHARS % 4], validate=False)
        with Image.open(io.BytesIO(head)) as img:
            width, height = img.size
    except (binascii.Error, UnidentifiedImageError, OSError, ValueError):
        return UNKNOWN_IMAGE_TOKENS
    return max(1, math.ceil(width / IMAGE_PATCH_PX)) * max(1, math.ceil(height / IMAGE_PATCH_PX))


def prompt_tokens(body: dict[str, Any]) -> int:
    """An estimate of the prompt tokens of an OpenAI chat body (text and images)."""
    chars, tokens = 0, 0
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            chars += len(content)
            continue
        for part in content or []:
            if not isinstance(part, dict):
                continue
            if part.get("type") == "text":
                chars += len(str(part.get("text", "")))
            elif part.get("type") == "image_url":
                url = (part.get("image_url") or {}).get("url", "")
                tokens += image_tokens(url) if isinstance(url, str) else UNKNOWN_IMAGE_TOKENS
    return tokens + math.ceil(chars / CHARS_PER_TOKEN)


def requested_max_tokens(body: dict[str, Any]) -> int | None:
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if isinstance(value, int) and value > 0:
            return value
    return None


class DeadlinePolicy:
    """Deadlines for one worker's requests; learns the server's speed from the answers."""

    def __init__(self, floor_s: float, slack: float, cap_s: float, max_model_len: int,
                 window: int = WINDOW) -> None:
        self.floor_s = floor_s
        self.slack = slack
        self.cap_s = max(cap_s, floor_s)
        self.max_model_len = max_model_len
        self._s_per_token: deque[float] = deque(maxlen=window)
        self._outputs: deque[int] = deque(maxlen=window)

    # -- learning ---------------------------------------------------------------------------------
    def observe(self, prompt: int, completion: int, elapsed_s: float) -> None:
        """One answered request: its usage (tokens) and how long it took."""
        work = prompt / PREFILL_SPEEDUP + max(1, completion)
        self._s_per_token.append(elapsed_s / work)
        self._outputs.append(max(0, completion))

    @property
    def seconds_per_token(self) -> float:
        if not self._s_per_token:
            return PRIOR_S_PER_TOKEN
        ordered = sorted(self._s_per_token)
        return ordered[min(len(ordered) - 1, math.ceil(0.9 * len(ordered)) - 1)]

    def output_budget(self, body: dict[str, Any], prompt: int) -> int:
        room = max(1, self.max_model_len - prompt)
        asked = requested_max_tokens(body)
        if asked is not None:
            return min(asked, room)
        learned = max(MIN_OUTPUT_BUDGET, 2 * max(self._outputs, default=0))
        return min(learned, room)

    # -- the deadline -------------------------------------------------------------------------------
    def expected_s(self, body: dict[str, Any]) -> float:
        """What the request takes at the measured speed (p90) with its whole output budget: the
        deadline without its floor and slack."""
        prompt = prompt_tokens(body)
        return self.seconds_per_token * (prompt / PREFILL_SPEEDUP + self.output_budget(body, prompt))

    def deadline_s(self, body: dict[str, Any], attempt: int = 1) -> float:
        """Seconds the request may take in all (connection, queueing, prefill, decoding)."""
        base = self.floor_s + self.slack * self.expected_s(body)
        return min(self.cap_s, base * 2 ** max(0, attempt - 1))

    def describe(self) -> str:
        measured = (f"p90 of the last {len(self._s_per_token)} answers" if self._s_per_token
                    else "the prior: no answer measured yet")
        return (f"{self.seconds_per_token * 1000:.2f} ms per output token ({measured}), floor "
                f"{self.floor_s:g} s, slack x{self.slack:g}, cap {self.cap_s:g} s")
