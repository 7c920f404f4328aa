"""The simulator's ASGI application (served by uvicorn, like vLLM).

A plain ASGI callable, not a framework: routing is one dict lookup and streaming writes pre-built
bytes straight to uvicorn, which keeps the per-token cost low enough for the simulator never to be
a benchmark's bottleneck (see benchmarks/sim_throughput.py). Endpoints, status codes and bodies
copy vLLM 0.32 (``wire.py``); ``/sim/*`` is the simulator's own admin API.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from pydantic import ValidationError

from . import wire
from .answers import Answer, Answerer
from .capacity import image_tokens
from .config import SimConfig
from .engine import Clock, Engine, LoopClock
from .faults import Action, FaultError, FaultInjector
from .metrics import EngineMetrics, HttpMetrics, build_registry
from .profile import Profile
from .scheduler import Scheduler, SimRequest
from .schemas import (BadImage, ChatRequest, CompletionRequest, TokenizeRequest, decode_image, format_errors,
                      split_messages, validation_message)
from .textgen import chat_prompt_tokens, count_tokens

log = logging.getLogger("stack.sim")

JSON = [(b"content-type", b"application/json"), (b"vary", b"Origin")]
SSE = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"vary", b"Origin")]
METRICS_CT = [(b"content-type", CONTENT_TYPE_LATEST.encode()), (b"vary", b"Origin")]
# vLLM's instrumentator leaves these out of http_* metrics.
UNINSTRUMENTED = {"/metrics", "/health", "/load", "/ping", "/version", "/server_info"}
CRASH_EXIT_CODE = 70
# Labels of vllm:cache_config_info as vLLM 0.32 exports them (tests/unit/sim/data/metrics.txt).
CACHE_INFO_DEFAULTS = {
    "_block_size_resolved": "True", "cache_dtype": "auto", "cache_hit_alignment_tokens": "None",
    "enable_mamba_shared_prefix_checkpoint": "False", "enable_prefix_caching": "True",
    "gpu_memory_utilization": "0.92", "hash_block_size": "None", "is_attention_free": "False",
    "kv_cache_dtype_skip_layers": "[]", "kv_cache_layout": "None", "kv_cache_memory_bytes": "1073741824",
    "kv_offloading_backend": "native", "kv_offloading_size": "None", "kv_sharing_fast_prefill": "False",
    "mamba_block_size": "None", "mamba_cache_dtype": "auto", "mamba_cache_mode": "none",
    "mamba_page_size_padded": "None", "mamba_ssm_cache_dtype": "float32", "num_cpu_blocks": "None",
    "num_gpu_blocks_override": "None", "prefix_cache_retention_interval": "0", "prefix_caching_hash_algo": "sha256",
    "prefix_match_unit": "None", "replayssm_buffer_len": "16", "skip_page_size_padded": "None",
    "sliding_window": "None", "swa_bounded_replay": "True", "use_kda_recoverssm": "False", "use_replayssm": "False",
    "user_specified_block_size": "False",
}


class HTTPError(Exception):
    def __init__(self, status: int, body: bytes, headers: list | None = None) -> None:
        self.status, self.body, self.headers = status, body, headers or JSON


def bad_request(message: str, param: str | None = None) -> HTTPError:
    return HTTPError(400, wire.error_body(message, "BadRequestError", 400, param))


class InjectedReset(Exception):
    """Raised after a partial response: uvicorn then drops the connection (the client sees a reset)."""


Handler = Callable[[dict, Callable, Callable], Awaitable[tuple[int, int]]]


class SimApp:
    def __init__(self, config: SimConfig, profile: Profile, *, registry: CollectorRegistry | None = None,
                 clock: Clock | None = None) -> None:
        self.config = config
        overrides = {k: v for k, v in (("max_num_seqs", config.max_num_seqs),
                                       ("max_model_len", config.max_model_len)) if v is not None}
        self.limits = profile.engine.model_copy(update=overrides)
        self.profile = profile
        self.model = config.model_name
        self.scheduler = Scheduler(self.limits, profile.latency, config.faults.kv_capacity_factor)
        self.faults = FaultInjector(config.faults, config.seed)
        self.answerer = Answerer(profile, config.seed, config.plan_log_size)
        self.http_metrics = HttpMetrics()
        self.engine = Engine(self.scheduler, None, clock or LoopClock())
        self.engine_metrics = EngineMetrics(self.model, self.limits.max_model_len, self._cache_info(),
                                            self.engine.gauges)
        self.engine.metrics = self.engine_metrics
        self.registry = build_registry(self.engine_metrics, self.http_metrics, registry)
        self.created = int(time.time())
        self.routes: dict[str, dict[str, Handler]] = {
            "/health": {"GET": self.health},
            "/ping": {"GET": self.health, "POST": self.health},
            "/version": {"GET": self.version},
            "/metrics": {"GET": self.metrics},
            "/v1/models": {"GET": self.models},
            "/v1/chat/completions": {"POST": self.chat},
            "/v1/completions": {"POST": self.completions},
            "/tokenize": {"POST": self.tokenize},
            "/sim/faults": {"GET": self.get_faults, "PUT": self.put_faults, "POST": self.put_faults},
            "/sim/plans": {"GET": self.get_plans, "DELETE": self.delete_plans},
            "/sim/state": {"GET": self.state},
        }
        self._auth = f"Bearer {config.api_key}".encode() if config.api_key else None

    def _cache_info(self) -> dict[str, str]:
        """vllm:cache_config_info labels: the captured set, with the simulated cache's sizes."""
        lim = self.limits
        return CACHE_INFO_DEFAULTS | {
            "block_size": str(lim.block_size_tokens), "effective_attention_block_size": str(lim.block_size_tokens),
            "kv_cache_size_tokens": str(lim.kv_cache_tokens),
            "num_gpu_blocks": str(lim.kv_cache_tokens // lim.block_size_tokens),
            "kv_cache_max_concurrency": str(float(lim.kv_cache_tokens / lim.max_model_len)),
        }

    # -- ASGI entry ------------------------------------------------------------------------
    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: Callable, send: Callable) -> None:
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                self.engine.start()
                await send({"type": "lifespan.startup.complete"})
            elif msg["type"] == "lifespan.shutdown":
                await self.engine.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: dict, receive: Callable, send: Callable) -> None:
        started = time.perf_counter()
        path, method = scope["path"], scope["method"]
        methods = self.routes.get(path)
        try:
            if methods is None:
                raise HTTPError(404, b'{"detail":"Not Found"}', [(b"content-type", b"application/json")])
            handler = methods.get(method)
            if handler is None:
                raise HTTPError(405, b'{"detail":"Method Not Allowed"}', [(b"content-type", b"application/json")])
            if self._auth is not None and (path.startswith("/v1") or path.startswith("/sim")) and method != "OPTIONS":
                if self._header(scope, b"authorization") != self._auth:
                    raise HTTPError(401, wire.UNAUTHORIZED, [(b"content-type", b"application/json")])
            status, size = await handler(scope, receive, send)
        except HTTPError as err:
            status, size = err.status, len(err.body)
            await respond(send, err.status, err.body, err.headers)
        if methods is not None and path not in UNINSTRUMENTED and not path.startswith("/sim"):
            req_size = int(self._header(scope, b"content-length") or 0)
            self.http_metrics.observe(path, method, status, req_size, size, time.perf_counter() - started)

    @staticmethod
    def _header(scope: dict, name: bytes) -> bytes | None:
        for k, v in scope["headers"]:
            if k == name:
                return v
        return None

    # -- simple endpoints ------------------------------------------------------------------
    async def health(self, scope, receive, send):
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", b"0"), (b"vary", b"Origin")]})
        await send({"type": "http.response.body", "body": b""})
        return 200, 0

    async def version(self, scope, receive, send):
        return await respond(send, 200, b'{"version":"0.32.0"}')

    async def metrics(self, scope, receive, send):
        return await respond(send, 200, generate_latest(self.registry), METRICS_CT)

    async def models(self, scope, receive, send):
        root = self.config.model_root or f"/models/{self.model}"
        return await respond(send, 200, wire.models_response(self.model, root, self.limits.max_model_len, self.created))

    async def tokenize(self, scope, receive, send):
        req = self._parse(await read_body(receive), TokenizeRequest)
        self._check_model(req.model)
        if req.messages is not None:
            count = chat_prompt_tokens(split_messages(req.messages).texts)
        elif req.prompt is not None:
            count = count_tokens(req.prompt)
        else:
            raise bad_request("Either 'prompt' or 'messages' is required")
        return await respond(send, 200, wire.tokenize_response(count, self.limits.max_model_len))

    # -- admin -----------------------------------------------------------------------------
    async def get_faults(self, scope, receive, send):
        return await respond(send, 200, self.faults.spec.model_dump_json().encode())

    async def put_faults(self, scope, receive, send):
        try:
            changes = orjson.loads(await read_body(receive))
            if not isinstance(changes, dict):
                raise FaultError("body must be a JSON object of FaultSpec fields")
            spec = self.faults.update(changes)
        except (orjson.JSONDecodeError, FaultError) as exc:
            raise bad_request(f"invalid fault settings: {exc}") from exc
        self.scheduler.kv_capacity_factor = spec.kv_capacity_factor
        self.engine._wakeup.set()  # a larger KV cache may unblock the queue
        log.warning("faults now: %s", spec.model_dump_json())
        status = await respond(send, 200, spec.model_dump_json().encode())
        if self.faults.should_crash():
            self._crash()
        return status

    async def get_plans(self, scope, receive, send):
        body = {"layouts": list(self.answerer.plans), "requests_by_kind": dict(self.answerer.kind_counts)}
        return await respond(send, 200, orjson.dumps(body))

    async def delete_plans(self, scope, receive, send):
        self.answerer.plans.clear()
        self.answerer.kind_counts.clear()
        return await respond(send, 200, b"{}")

    async def state(self, scope, receive, send):
        s = self.scheduler
        body = {"profile": self.profile.name, "running": len(s.running), "waiting": len(s.waiting),
                "kv_usage": s.kv_usage, "kv_blocks_total": s.total_blocks, "preemptions": s.num_preemptions,
                "limits": self.limits.model_dump(), "requests_seen": self.faults.requests}
        return await respond(send, 200, orjson.dumps(body))

    def _crash(self) -> None:
        log.error("injected crash: exiting with status %d", CRASH_EXIT_CODE)
        logging.shutdown()
        os._exit(CRASH_EXIT_CODE)

    # -- inference -------------------------------------------------------------------------
    def _parse(self, body: bytes, model_cls):
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

    def _check_model(self, model: str | None) -> None:
        if model is not None and model != self.model:
            raise HTTPError(404, wire.error_body(
                f"The model `{model}` does not exist. Valid aliases: {self.model}.", "NotFoundError", 404, "model"))

    def _check_common(self, req) -> None:
        self._check_model(req.model)
        # vLLM tests the raw value's truthiness: an empty stream_options object is accepted
        if req.stream_options is not None and req.stream_options.model_dump(exclude_unset=True) and not req.stream:
            raise bad_request("Stream options can only be defined when `stream=True`. (parameter=stream_options)",
                              "stream_options")
        value = _max_tokens(req)  # vLLM reports max_completion_tokens as max_tokens too
        if value is not None and value < 1:
            raise bad_request(f"max_tokens must be at least 1, got {value}. (parameter=max_tokens, value={value})",
                              "max_tokens")
        if req.n is not None and req.n < 1:
            raise bad_request(f"n must be at least 1, got {req.n}.")
        if (req.n or 1) > 1:
            raise bad_request("the simulator supports n=1 only", "n")

    def _check_length(self, prompt_tokens: int, max_tokens: int | None) -> None:
        limit = self.limits.max_model_len
        if prompt_tokens > limit:
            raise bad_request(
                f"This model's maximum context length is {limit} tokens. However, your prompt contains at least "
                f"{prompt_tokens} input tokens, which exceeds this limit even without any output tokens. Please "
                f"reduce the length of the input prompt. (parameter=input_tokens, value={prompt_tokens})",
                "input_tokens")
        if max_tokens is not None and max_tokens > limit:
            raise bad_request(f"max_tokens={max_tokens} cannot be greater than max_model_len={limit}. Please request "
                              f"fewer output tokens. (parameter=max_tokens, value={max_tokens})", "max_tokens")

    def _output_cap(self, prompt_tokens: int, max_tokens: int | None) -> int:
        """Tokens the request may generate: vLLM caps max_tokens at the context left after the prompt."""
        room = self.limits.max_model_len - prompt_tokens
        return room if max_tokens is None else min(max_tokens, room)

    async def chat(self, scope, receive, send):
        req = self._parse(await read_body(receive), ChatRequest)
        self._check_common(req)
        content = split_messages(req.messages)
        images = []
        if content.image_urls:
            if not self.config.multimodal:
                raise bad_request(f"{self.model} is not a multimodal model")
            try:
                images = [decode_image(url) for url in content.image_urls]
            except BadImage as exc:
                raise bad_request(str(exc)) from exc
        prompt = chat_prompt_tokens(content.texts) + sum(
            image_tokens(i.width, i.height, self.profile.latency) for i in images)
        max_tokens = _max_tokens(req)
        self._check_length(prompt, max_tokens)
        answer = self.answerer.answer(content.last_user_text, images[0].data if images else None,
                                      self._output_cap(prompt, max_tokens))
        opts = req.stream_options
        stream = wire.ChatStream(self.model, prompt, bool(opts and opts.include_usage),
                                 bool(opts and opts.continuous_usage_stats)) if req.stream else None
        return await self._generate(receive, send, answer, prompt, len(images), max_tokens, stream,
                                    wire.chat_response)

    async def completions(self, scope, receive, send):
        req = self._parse(await read_body(receive), CompletionRequest)
        self._check_common(req)
        p = req.prompt
        if not p:
            raise bad_request("Either prompt or prompt_embeds must be provided and non-empty. (parameter=prompt)",
                              "prompt")
        if isinstance(p, list) and isinstance(p[0], str):
            if len(p) != 1:
                raise bad_request("the simulator serves one prompt per request", "prompt")
            p = p[0]
        prompt = count_tokens(p) if isinstance(p, str) else len(p)
        if prompt == 0:
            raise bad_request("The decoder prompt cannot be empty")
        self._check_length(prompt, req.max_tokens)
        answer = self.answerer.answer("", None, self._output_cap(prompt, req.max_tokens))
        opts = req.stream_options
        stream = wire.CompletionStream(self.model, prompt, bool(opts and opts.include_usage),
                                       bool(opts and opts.continuous_usage_stats)) if req.stream else None
        return await self._generate(receive, send, answer, prompt, 0, req.max_tokens, stream,
                                    wire.completion_response)

    async def _generate(self, receive, send, answer: Answer, prompt: int, num_images: int,
                        max_tokens_param: int | None, stream, build_body) -> tuple[int, int]:
        action = self.faults.decide()
        if self.faults.should_crash():
            self._crash()
        spec = self.faults.spec
        if action is Action.ERROR:
            status = spec.error_status
            headers = JSON + ([(b"retry-after", str(spec.retry_after_s).encode())] if status == 503 else [])
            err_type = "ServiceUnavailableError" if status == 503 else "InternalServerError"
            raise HTTPError(status, wire.error_body(f"injected fault: HTTP {status}", err_type, status), headers)
        clock = self.engine.clock
        req = SimRequest("", prompt, answer.output_tokens, clock.now(), num_images=num_images,
                         max_tokens_param=max_tokens_param, finish_reason=answer.finish_reason)
        if action is Action.HANG:
            await wait_disconnect(receive)
            return 499, 0
        if spec.added_latency_ms:
            await asyncio.sleep(spec.added_latency_ms / 1000.0)
        handle = self.engine.submit(req)
        watcher = asyncio.get_running_loop().create_task(self._watch(receive, req))
        try:
            if stream is None:
                while not handle.done:
                    await handle.event.wait()
                    handle.event.clear()
                    if handle.aborted:
                        return 499, 0
                body = build_body(self.model, answer.text, prompt, req.generated, answer.finish_reason)
                if action is Action.RESET:
                    await send({"type": "http.response.start", "status": 200,
                                "headers": [(b"content-length", str(len(body)).encode())] + JSON})
                    await send({"type": "http.response.body", "body": body[: len(body) // 2], "more_body": True})
                    raise InjectedReset()
                return await respond(send, 200, body)
            return await self._stream(send, req, handle, answer, stream, action)
        finally:
            watcher.cancel()

    async def _stream(self, send, req: SimRequest, handle, answer: Answer, stream, action: Action):
        await send({"type": "http.response.start", "status": 200, "headers": SSE})
        first = stream.role()
        size = len(first)
        if first:
            await send({"type": "http.response.body", "body": first, "more_body": True})
        pieces, total, sent = answer.pieces, req.output_tokens, 0
        while True:
            await handle.event.wait()
            handle.event.clear()
            if handle.aborted:
                return 499, size
            ready = req.generated
            chunks = []
            for i in range(sent, ready):
                text = pieces[i] if i < len(pieces) else ""
                chunks.append(stream.last(text, i + 1, answer.finish_reason) if i == total - 1
                              else stream.token(text, i + 1))
            sent = ready
            if action is Action.RESET and sent * 2 >= total:
                await send({"type": "http.response.body", "body": b"".join(chunks), "more_body": True})
                raise InjectedReset()
            if handle.done:
                chunks.append(stream.final(sent))
                body = b"".join(chunks)
                await send({"type": "http.response.body", "body": body})
                return 200, size + len(body)
            body = b"".join(chunks)
            size += len(body)
            await send({"type": "http.response.body", "body": body, "more_body": True})

    async def _watch(self, receive, req: SimRequest) -> None:
        await wait_disconnect(receive)
        self.engine.abort(req)
        req.handle.event.set()


def _max_tokens(req) -> int | None:
    # only chat has max_completion_tokens (extra fields are attributes too: look at the schema)
    value = req.max_completion_tokens if "max_completion_tokens" in type(req).model_fields else None
    return req.max_tokens if value is None else value


async def read_body(receive: Callable) -> bytes:
    msg = await receive()
    body = msg.get("body", b"")
    if not msg.get("more_body"):
        return body
    parts = [body]
    while msg.get("more_body"):
        msg = await receive()
        parts.append(msg.get("body", b""))
    return b"".join(parts)


async def wait_disconnect(receive: Callable) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def respond(send: Callable, status: int, body: bytes, headers: list = JSON) -> tuple[int, int]:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-length", str(len(body)).encode()), *headers]})
    await send({"type": "http.response.body", "body": body})
    return status, len(body)
