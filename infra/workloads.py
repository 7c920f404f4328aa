"""What the inference-server containers run: the `vllm serve` arguments and the simulator's
command, from the spec. No pulumi import: Compose and the Pulumi program both use them."""

from __future__ import annotations

from contract.spec import Engine, InferenceServer


def server_image(server: InferenceServer) -> str:
    """The image a server runs: splitstack's inference-server image (vLLM + mineru-vl-utils) or,
    for engine 'sim', the simulator image (images/)."""
    if server.engine is Engine.vllm:
        return f"{server.image}:{server.image_tag}"
    return f"{server.sim_image}:{server.sim_image_tag}"


def vllm_args(server: InferenceServer) -> list[str]:
    """`vllm serve` arguments (the image's entrypoint is `vllm serve`)."""
    return [
        server.model.source,
        "--served-model-name", server.model.name,
        "--host", "0.0.0.0",
        "--port", str(server.port),
        "--tensor-parallel-size", str(server.tensor_parallel_size),
        "--gpu-memory-utilization", f"{server.gpu_memory_utilization:g}",
        "--max-model-len", str(server.max_model_len),
        "--max-num-seqs", str(server.max_num_seqs),
        "--max-num-batched-tokens", str(server.max_num_batched_tokens),
        "--shutdown-timeout", str(server.shutdown_timeout_s),
        # As MinerU's own server passes them; the inference-server image carries the module.
        *(["--logits-processors", *server.logits_processors] if server.logits_processors else []),
        *server.extra_args,
    ]


def sim_command(server: InferenceServer) -> list[str]:
    cmd = [
        "python", "-m", "splitstack.cli.sim", "serve", "--host", "0.0.0.0", "--port", str(server.port),
        "--profile", server.sim_profile, "--seed", "0", "--model-name", server.model.name,
        "--max-num-seqs", str(server.max_num_seqs), "--max-model-len", str(server.max_model_len),
    ]
    if server.api_key:
        cmd += ["--api-key", "$(VLLM_API_KEY)"]  # expanded by the kubelet from the secretKeyRef env
    return cmd
