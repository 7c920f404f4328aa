"""Settings of one simulator process (what ``serve`` takes on its command line)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from .faults import FaultSpec


class SimConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str = Field(default="127.0.0.1", description="address to listen on")
    port: int = Field(default=8000, ge=0, le=65535, description="TCP port (0: any free port, printed on stderr)")
    api_key: str | None = Field(default=None, description="Bearer token required on /v1/* and /sim/* (vLLM --api-key)")
    profile: str = Field(default="instant", description="calibration profile name or path to a profile YAML")
    seed: int = Field(default=0, description="seed of every random draw (answers, faults)")
    model_name: str = Field(default="tiny", description="served model name (vLLM --served-model-name)")
    model_root: str | None = Field(
        default=None, description="'root' in /v1/models (vLLM: the model path); default /models/<name>")
    tokenizer: str | None = Field(
        default=None, description="served model's tokenizer directory (tokenizer.json, tokenizer_config.json): "
        "count tokens with it in /tokenize, usage and metrics; default: the simulator's own regex pieces")
    max_num_seqs: int | None = Field(default=None, ge=1, description="override the profile's max_num_seqs")
    max_model_len: int | None = Field(default=None, ge=16, description="override the profile's max_model_len (tokens)")
    multimodal: bool = Field(
        default=True, description="accept images (MinerU's VLM); False answers like a text-only model")
    plan_log_size: int = Field(default=10_000, ge=0, description="MinerU layout plans kept for GET /sim/plans")
    timings_max_entries: int = Field(default=50_000, ge=0,
                                     description="per-request timestamps kept for GET /sim/timings "
                                                 "(a ring: the newest; 0 = record none)")
    faults: FaultSpec = Field(default_factory=FaultSpec, description="faults active from start")
    private_engines: int | None = Field(
        default=None, ge=1, le=64,
        description="the monolithic twin: serve this many independent engines, engine i on port + i (port 0: any "
                    "free ports), each with its own batcher, KV budget and weights, all time-sharing one simulated "
                    "GPU; default: one shared engine")
    engine_load_scale: float = Field(
        default=1.0, ge=0, description="private engines: multiply the profile's footprint.engine_load_s by this "
                                       "(tests: 0.01 loads in 0.6 s instead of 60 s)")
    private_kv_cache_tokens: int | None = Field(
        default=None, ge=16, description="private engines: KV budget of each (default: the profile's "
                                         "kv_cache_tokens split evenly, the engines sharing one GPU's memory)")
