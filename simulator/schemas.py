"""Request bodies of the OpenAI-compatible endpoints, validated like vLLM does.

Unknown fields are accepted (vLLM logs and ignores them); wrong types are 400 with pydantic's
error list in the message, as vLLM's validation handler reports them.
"""

from __future__ import annotations

import base64
import binascii
import io
from dataclasses import dataclass

from PIL import Image, UnidentifiedImageError
from pydantic import BaseModel, ConfigDict


class _Allow(BaseModel):
    model_config = ConfigDict(extra="allow")


class StreamOptions(_Allow):
    include_usage: bool | None = True
    continuous_usage_stats: bool | None = False


class ImageURL(_Allow):
    url: str


class ContentPart(_Allow):
    type: str
    text: str | None = None
    image_url: ImageURL | None = None


class Message(_Allow):
    role: str
    content: str | list[ContentPart] | None = None


class _Common(_Allow):
    model: str | None = None
    max_tokens: int | None = None  # range checked by the app with vLLM's own message
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    n: int | None = 1
    temperature: float | None = None
    seed: int | None = None
    ignore_eos: bool | None = False  # vLLM's extension: generate exactly max_tokens tokens

    def deterministic_key(self, prompt: object) -> str | None:
        """Greedy (temperature 0) or seeded sampling gives the same text for the same prompt on
        vLLM; the simulator then draws from a generator keyed by prompt and seed, not by
        arrival order. None: sampled text, different per request."""
        if self.temperature == 0 or self.seed is not None:
            return f"{self.seed}|{self.temperature}|{prompt!r}"
        return None


class ChatRequest(_Common):
    messages: list[Message]
    max_completion_tokens: int | None = None


class CompletionRequest(_Common):
    prompt: str | list[str] | list[int] | None = None
    max_tokens: int | None = 16  # OpenAI's and vLLM's default for /v1/completions


class TokenizeRequest(_Allow):
    model: str | None = None
    prompt: str | None = None
    messages: list[Message] | None = None


class BadImage(ValueError):
    pass


@dataclass
class DecodedImage:
    data: bytes
    width: int
    height: int


def decode_image(url: str) -> DecodedImage:
    """A data: URL image (what MinerU sends). Remote URLs cannot be fetched by the simulator."""
    if not url.startswith("data:"):
        raise BadImage(f"the simulator only accepts data: image URLs, got '{url[:40]}'")
    header, sep, payload = url.partition(",")
    if not sep or ";base64" not in header:
        raise BadImage("image data URL must be base64-encoded ('data:image/png;base64,...')")
    try:
        data = base64.b64decode(payload, validate=False)
        with Image.open(io.BytesIO(data)) as img:  # reads the header only
            width, height = img.size
    except (binascii.Error, UnidentifiedImageError, OSError, ValueError) as exc:
        raise BadImage(f"Failed to load image: {exc}") from exc
    return DecodedImage(data, width, height)


@dataclass
class ChatContent:
    texts: list[str]  # one per message (its text parts joined)
    image_urls: list[str]
    last_user_text: str
    roles: list[str]  # one per message


def split_messages(messages: list[Message]) -> ChatContent:
    texts: list[str] = []
    roles: list[str] = []
    urls: list[str] = []
    last_user = ""
    for m in messages:
        if isinstance(m.content, str) or m.content is None:
            text = m.content or ""
        else:
            parts = []
            for p in m.content:
                if p.type == "text" and p.text is not None:
                    parts.append(p.text)
                elif p.type == "image_url" and p.image_url is not None:
                    urls.append(p.image_url.url)
            text = "".join(parts)
        texts.append(text)
        roles.append(m.role)
        if m.role == "user":
            last_user = text
    return ChatContent(texts, urls, last_user, roles)


def _summarise(value) -> str:
    if isinstance(value, dict):
        return f"<dict of {len(value)} items>"
    if isinstance(value, list):
        return f"<list of {len(value)} items>"
    return str(value)


def format_errors(errors: list[dict]) -> tuple[str, str]:
    """vLLM 0.32's message for request validation errors, and its ``param`` (the first loc)."""
    lines = []
    for e in errors:
        item = {"type": e["type"], "loc": ".".join(map(str, ("body", *e["loc"]))), "msg": e["msg"],
                "input": _summarise(e.get("input"))}
        if e.get("ctx"):
            item["ctx"] = {k: str(v) for k, v in e["ctx"].items()}
        lines.append(str(item))
    n = len(lines)
    message = f"{n} validation error{'s' if n != 1 else ''}:\n  " + "\n  ".join(lines)
    return message, lines and ".".join(map(str, ("body", *errors[0]["loc"]))) or "body"


def validation_message(exc) -> tuple[str, str]:
    return format_errors(exc.errors(include_url=False))
