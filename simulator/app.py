"""The simulator's ASGI application (served by uvicorn, like vLLM).

A plain ASGI callable, not a framework: routing is one dict lookup and streaming writes pre-built
bytes straight to uvicorn, which keeps the per-token cost low enough for the simulator never to be
a benchmark's bottleneck (see benchmarks/sim_throughput.py). Endpoints, status codes and bodies
copy vLLM 0.32 (``wire.py``); ``/sim/*`` is the simulator's own admin API.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from . import wire
from .admin import AdminAPI, crash
from .answers import Answer, Answerer
from .asgi import JSON, SSE, HTTPError, InjectedReset, bad_request, header, read_body, respond, wait_disconnect
from .capacity import image_tokens
from .config import SimConfig
from .engine import Clock, Engine, LoopClock
from .faults import Action, FaultInjector
from .metrics import EngineMetrics, Footprint, HttpMetrics, build_registry
from .profile import Profile
from .scheduler import Scheduler, SimRequest
from .schemas import BadImage, ChatRequest, CompletionRequest, TokenizeRequest, decode_image, split_messages
from .timings import TIMED_PATHS, TIMING_KEY, RequestTiming, TimingLog, stamp_tokens
from .tokens import load_tokens
from .validation import RequestChecks, max_tokens_of

log = logging.getLogger("simulator")

METRICS_CT = [(b"content-type", CONTENT_TYPE_LATEST.encode()), (b"vary", b"Origin")]
# vLLM's instrumentator leaves these out of http_* metrics.
UNINSTRUMENTED = {"/metrics", "/health", "/load", "/ping", "/version", "/server_info"}
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

# Answered 503 while a private engine loads (the health probe, and everything that needs the model).
LOADING_GATED = ("/health", "/ping", "/v1/", "/tokenize")

Handler = Callable[[dict, Callable, Callable], Awaitable[tuple[int, int]]]


class SimApp:
    """One simulated engine. The shared server is one of these; the monolithic twin
    (``private.py``) runs N, each with its ``engine_id``, its KV budget (``kv_cache_tokens``), its
    load time (``load_s``: /health answers 503 until it has passed) and one ``gpu`` lock they share."""

    def __init__(self, config: SimConfig, profile: Profile, *, registry: CollectorRegistry | None = None,
                 clock: Clock | None = None, engine_id: str = "0", load_s: float = 0.0,
                 gpu: asyncio.Lock | None = None, kv_cache_tokens: int | None = None) -> None:
        self.config = config
        overrides = {k: v for k, v in (("max_num_seqs", config.max_num_seqs),
                                       ("max_model_len", config.max_model_len),
                                       ("kv_cache_tokens", kv_cache_tokens)) if v is not None}
        self.limits = profile.engine.model_copy(update=overrides)
        self.profile = profile
        self.model = config.model_name
        self.scheduler = Scheduler(self.limits, profile.latency, config.faults.kv_capacity_factor)
        self.faults = FaultInjector(config.faults, config.seed)
        self.tokens = load_tokens(config.tokenizer)  # the served model's, or the simulator's regex pieces
        self.answerer = Answerer(profile, config.seed, config.plan_log_size, self.tokens)
        self.http_metrics = HttpMetrics()
        self.engine = Engine(self.scheduler, None, clock or LoopClock(), gpu)
        self.engine_metrics = EngineMetrics(self.model, self.limits.max_model_len, self._cache_info(),
                                            self.engine.gauges, engine_id)
        self.engine.metrics = self.engine_metrics
        self.load_s = load_s
        self.ready_at = 0.0  # time.monotonic() from which /health answers 200 (set at start)
        fp = profile.footprint
        self.footprint = Footprint(dict(self.engine_metrics.labels), fp.weights_bytes,
                                   fp.kv_bytes_per_token * self.limits.kv_cache_tokens, load_s, self.ready,
                                   lambda: self.engine.busy_s)
        self.registry = build_registry(self.engine_metrics, self.http_metrics, registry, self.footprint)
        self.created = int(time.time())
        self.checks = RequestChecks(self.model, self.limits.max_model_len)
        self.timings = TimingLog(config.timings_max_entries)
        admin = AdminAPI(self)
        self.routes: dict[str, dict[str, Handler]] = {
            "/health": {"GET": self.health},
            "/ping": {"GET": self.health, "POST": self.health},
            "/version": {"GET": self.version},
            "/metrics": {"GET": self.metrics},
            "/v1/models": {"GET": self.models},
            "/v1/chat/completions": {"POST": self.chat},
            "/v1/completions": {"POST": self.completions},
            "/tokenize": {"POST": self.tokenize},
            "/sim/faults": {"GET": admin.get_faults, "PUT": admin.put_faults, "POST": admin.put_faults},
            "/sim/plans": {"GET": admin.get_plans, "DELETE": admin.delete_plans},
            "/sim/state": {"GET": admin.state},
            "/sim/timings": {"GET": admin.get_timings, "DELETE": admin.delete_timings},
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

    def start(self) -> None:
        """Start the engine loop; the engine counts as loaded ``load_s`` from now."""
        self.footprint.started = time.monotonic()
        self.ready_at = self.footprint.started + self.load_s
        self.engine.start()

    def ready(self) -> bool:
        return time.monotonic() >= self.ready_at

    async def _lifespan(self, receive: Callable, send: Callable) -> None:
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                self.start()
                await send({"type": "lifespan.startup.complete"})
            elif msg["type"] == "lifespan.shutdown":
                await self.engine.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: dict, receive: Callable, send: Callable) -> None:
        started = time.perf_counter()
        path, method = scope["path"], scope["method"]
        timing = self.timings.start(scope) if path in TIMED_PATHS and self.timings.enabled else None
        if timing is not None:
            scope[TIMING_KEY] = timing
        methods = self.routes.get(path)
        try:
            if methods is None:
                raise HTTPError(404, b'{"detail":"Not Found"}', [(b"content-type", b"application/json")])
            handler = methods.get(method)
            if handler is None:
                raise HTTPError(405, b'{"detail":"Method Not Allowed"}', [(b"content-type", b"application/json")])
            if self._auth is not None and (path.startswith("/v1") or path.startswith("/sim")) and method != "OPTIONS":
                if header(scope, b"authorization") != self._auth:
                    raise HTTPError(401, wire.UNAUTHORIZED, [(b"content-type", b"application/json")])
            if path.startswith(LOADING_GATED) and not self.ready():
                raise HTTPError(503, wire.error_body(
                    f"engine {self.engine_metrics.labels['engine']} is loading the model "
                    f"({self.ready_at - time.monotonic():.1f} s left)", "ServiceUnavailableError", 503), JSON)
            status, size = await handler(scope, receive, send)
        except HTTPError as err:
            status, size = err.status, len(err.body)
            await respond(send, err.status, err.body, err.headers)
        except InjectedReset:
            # Return with the response unfinished: uvicorn logs one line and closes the connection
            # (the client sees a truncated body), without an application traceback in the log.
            log.warning("injected connection reset on %s", path)
            if timing is not None:
                self.timings.finish(timing, 0)
            return
        if timing is not None:
            self.timings.finish(timing, status)
        if methods is not None and path not in UNINSTRUMENTED and not path.startswith("/sim"):
            req_size = int(header(scope, b"content-length") or 0)
            self.http_metrics.observe(path, method, status, req_size, size, time.perf_counter() - started)

    # -- simple endpoints ------------------------------------------------------------------
    async def health(self, scope, receive, send):
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", b"0"), (b"vary", b"Origin")]})
        await send({"type": "http.response.body", "body": b""})
        return 200, 0

    async def version(self, scope, receive, send):
        return await respond(send, 200, b'{"version":"0.32.0"}')

    async def metrics(self, scope, receive, send):
        # Query parameters are ignored, as on vLLM 0.32: its /metrics is answered by
        # prometheus-fastapi-instrumentator's route (registered before the prometheus_client
        # mount), which does not honour ?name[]= (contract-tested).
        return await respond(send, 200, generate_latest(self.registry), METRICS_CT)

    async def models(self, scope, receive, send):
        root = self.config.model_root or f"/models/{self.model}"
        return await respond(send, 200, wire.models_response(self.model, root, self.limits.max_model_len, self.created))

    async def tokenize(self, scope, receive, send):
        req = self.checks.parse(await read_body(receive), TokenizeRequest)
        self.checks.check_model(req.model)
        if req.messages is not None:
            content = split_messages(req.messages)
            count = self.tokens.chat_prompt(content.roles, content.texts)
        elif req.prompt is not None:
            count = self.tokens.count(req.prompt)
        else:
            raise bad_request("Either 'prompt' or 'messages' is required")
        return await respond(send, 200, wire.tokenize_response(count, self.limits.max_model_len))

    # -- inference -------------------------------------------------------------------------
    async def chat(self, scope, receive, send):
        req = self.checks.parse(await read_body(receive), ChatRequest)
        self.checks.check_common(req)
        content = split_messages(req.messages)
        images = []
        if content.image_urls:
            if not self.config.multimodal:
                raise bad_request(f"{self.model} is not a multimodal model")
            try:
                images = [decode_image(url) for url in content.image_urls]
            except BadImage as exc:
                raise bad_request(str(exc)) from exc
        prompt = self.tokens.chat_prompt(content.roles, content.texts) + sum(
            image_tokens(i.width, i.height, self.profile.latency) for i in images)
        max_tokens = max_tokens_of(req)
        self.checks.check_length(prompt, max_tokens)
        answer = self.answerer.answer(content.last_user_text, images[0].data if images else None,
                                      self.checks.output_cap(prompt, max_tokens),
                                      req.deterministic_key(content.texts), bool(req.ignore_eos))
        opts = req.stream_options
        stream = wire.ChatStream(self.model, prompt, bool(opts and opts.include_usage),
                                 bool(opts and opts.continuous_usage_stats)) if req.stream else None
        return await self._generate(receive, send, answer, prompt, len(images), max_tokens, stream,
                                    wire.chat_response, "chatcmpl", scope.get(TIMING_KEY))

    async def completions(self, scope, receive, send):
        req = self.checks.parse(await read_body(receive), CompletionRequest)
        self.checks.check_common(req)
        p = req.prompt
        if not p:
            raise bad_request("Either prompt or prompt_embeds must be provided and non-empty. (parameter=prompt)",
                              "prompt")
        if isinstance(p, list) and isinstance(p[0], str):
            if len(p) != 1:
                raise bad_request("the simulator serves one prompt per request", "prompt")
            p = p[0]
        prompt = self.tokens.count(p) if isinstance(p, str) else len(p)
        if prompt == 0:
            raise bad_request("The decoder prompt cannot be empty")
        self.checks.check_length(prompt, req.max_tokens)
        answer = self.answerer.answer("", None, self.checks.output_cap(prompt, req.max_tokens),
                                      req.deterministic_key(p), bool(req.ignore_eos))
        opts = req.stream_options
        stream = wire.CompletionStream(self.model, prompt, bool(opts and opts.include_usage),
                                       bool(opts and opts.continuous_usage_stats)) if req.stream else None
        return await self._generate(receive, send, answer, prompt, 0, req.max_tokens, stream,
                                    wire.completion_response, "cmpl", scope.get(TIMING_KEY))

    async def _generate(self, receive, send, answer: Answer, prompt: int, num_images: int,
                        max_tokens_param: int | None, stream, build_body, id_prefix: str,
                        timing: RequestTiming | None) -> tuple[int, int]:
        action = self.faults.decide()
        if self.faults.should_crash():
            crash()
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
                rid = wire.new_id(id_prefix)
                body = build_body(self.model, answer.text, prompt, req.generated, answer.finish_reason, rid=rid)
                if timing is not None:
                    timing.response_id = rid
                    stamp_tokens(timing, bool(answer.text))
                if action is Action.RESET:
                    await send({"type": "http.response.start", "status": 200,
                                "headers": [(b"content-length", str(len(body)).encode())] + JSON})
                    await send({"type": "http.response.body", "body": body[: len(body) // 2], "more_body": True})
                    raise InjectedReset()
                return await respond(send, 200, body)
            return await self._stream(send, req, handle, answer, stream, action, timing)
        finally:
            watcher.cancel()

    async def _stream(self, send, req: SimRequest, handle, answer: Answer, stream, action: Action,
                      timing: RequestTiming | None):
        if timing is not None:
            timing.response_id = stream.rid
        await send({"type": "http.response.start", "status": 200, "headers": SSE})
        first = stream.role()
        size = len(first)
        if first:
            if timing is not None:
                timing.first_chunk_ns = time.monotonic_ns()
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
            if chunks and timing is not None and not timing.first_content_ns:  # until the first text
                stamp_tokens(timing, any(pieces[sent:ready]))
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


