"""Monolithic mode's GPU figures, measured: the in-process transformers engine with a model of
MinerU2.5's shape (generated weights, nothing downloaded), on whatever GPU runs this.

What runs: ``Qwen2VLForConditionalGeneration`` (the class worker/inprocess.py loads for MinerU2.5)
in bf16 with MinerU2.5-2509-1.2B's architecture: a Qwen2-VL vision tower (NaViT, 32 blocks,
width 1280, 16 heads, patch 14, 2x2 merge) and a Qwen2-0.5B-shaped language model (24 layers,
width 896, 14 heads, 2 KV heads, MLP 4864, vocabulary 151,936, tied embeddings): ~1.2B
parameters, as the MinerU2.5 report describes. Per page it sends what MinerU's two-step
extraction sends (docs/capacity.md, the simulator's mineru25 profiles): one layout request with
the page at 1036 x 1036 px (1,369 image tokens) and an answer of ``LAYOUT_TOKENS``, then
``BLOCKS`` block requests, each a crop of ``BLOCK_IMAGE_TOKENS`` image tokens and an answer of
``BLOCK_TOKENS``, one request at a time (worker/inprocess.py gives MinerU's client batch_size 1).
Answer lengths are fixed (``min_new_tokens`` = ``max_new_tokens``): random weights answer
gibberish, so MinerU's own client would parse no layout and send no block requests; the
generate loop and the shapes it runs are MinerU's, its parsing is not.

Measured: load time (``from_pretrained`` of the saved weights onto the GPU, page cache warm),
GPU memory per worker (the process's peak allocated bytes, and the device's used bytes with the
CUDA context, after a run), pages/s after warm-up pages. Prints one JSON object; the numbers land
in docs/migration.md, labelled with the GPU and the date.

Run: ``python benchmarks/gpu_inprocess_engine.py --pages 10 --out result.json`` (needs torch with
CUDA and transformers >= 4.56).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

PAGE_IMAGE_TOKENS = (1036 // 28) ** 2  # 37 x 37 merged 28-px patches: the layout request's page
LAYOUT_TOKENS = 180  # ~10 blocks x ~18 tokens of box, type and rotation each
BLOCKS = 10  # blocks per page (the mineru25 profiles' mean)
BLOCK_IMAGE_TOKENS = 256  # a text-line crop at 200 DPI: ~16 x 16 merged patches
BLOCK_TOKENS = 70  # a text block's answer (the profiles' mean for text)
PROMPT_TOKENS = 24  # MinerU's instruction text around the image


def config():
    from transformers import Qwen2VLConfig

    cfg = Qwen2VLConfig(
        text_config={"vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864,
                     "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
                     "max_position_embeddings": 32768, "rms_norm_eps": 1e-6,
                     "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [8, 12, 12]},
                     "eos_token_id": 151645, "pad_token_id": 151643, "bos_token_id": 151643},
        vision_config={"depth": 32, "embed_dim": 1280, "hidden_size": 896, "num_heads": 16, "mlp_ratio": 4,
                       "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2},
        image_token_id=151655, video_token_id=151656, vision_start_token_id=151652,
        vision_end_token_id=151653, tie_word_embeddings=True, eos_token_id=151645, pad_token_id=151643)
    cfg.architectures = ["Qwen2VLForConditionalGeneration"]
    return cfg


def request(cfg, image_tokens: int, device):
    """input_ids, pixel_values and image_grid_thw of one chat request with one image."""
    import torch

    side = int(round(image_tokens ** 0.5)) * 2  # patches per side before the 2x2 merge
    grid = torch.tensor([[1, side, side]], device=device)
    pixels = torch.randn(side * side, 3 * 2 * 14 * 14, device=device, dtype=torch.bfloat16)
    ids = ([151644] + [100] * 8 + [151652] + [cfg.image_token_id] * (side * side // 4) + [151653]
           + [101] * PROMPT_TOKENS + [151645, 151644, 77091])
    return torch.tensor([ids], device=device), pixels, grid


def generate(model, cfg, image_tokens: int, answer_tokens: int, device) -> None:
    ids, pixels, grid = request(cfg, image_tokens, device)
    model.generate(input_ids=ids, attention_mask=ids.new_ones(ids.shape), pixel_values=pixels,
                   image_grid_thw=grid, max_new_tokens=answer_tokens, min_new_tokens=answer_tokens,
                   do_sample=False)


def page(model, cfg, device) -> None:
    generate(model, cfg, PAGE_IMAGE_TOKENS, LAYOUT_TOKENS, device)
    for _ in range(BLOCKS):
        generate(model, cfg, BLOCK_IMAGE_TOKENS, BLOCK_TOKENS, device)


def main() -> int:
    import torch
    import transformers
    from transformers import Qwen2VLForConditionalGeneration

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=10)
    ap.add_argument("--warmup-pages", type=int, default=2)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    device = torch.device("cuda")
    cfg = config()
    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(0)
        with torch.device(device):
            built = Qwen2VLForConditionalGeneration(cfg).to(torch.bfloat16)
        params = sum(p.numel() for p in built.parameters())
        built.save_pretrained(tmp)
        del built
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        for f in Path(tmp).glob("*.safetensors"):  # the page cache holds the weights, as on a warm node
            f.read_bytes()
        t0 = time.perf_counter()
        model = Qwen2VLForConditionalGeneration.from_pretrained(tmp, dtype=torch.bfloat16).to(device).eval()
        torch.cuda.synchronize()
        load_s = time.perf_counter() - t0
        weights_gib = torch.cuda.memory_allocated() / 2**30
    with torch.inference_mode():
        for _ in range(args.warmup_pages):
            page(model, cfg, device)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.pages):
            page(model, cfg, device)
        torch.cuda.synchronize()
        run_s = time.perf_counter() - t0
    free, total = torch.cuda.mem_get_info()
    result = {
        "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "transformers": transformers.__version__,
        "parameters": params, "dtype": "bfloat16", "load_s": round(load_s, 2),
        "weights_gib": round(weights_gib, 2),
        "peak_allocated_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
        "device_used_gib": round((total - free) / 2**30, 2),
        "pages": args.pages, "run_s": round(run_s, 2), "pages_per_s": round(args.pages / run_s, 3),
        "requests_per_page": 1 + BLOCKS,
        "output_tokens_per_s": round(args.pages * (LAYOUT_TOKENS + BLOCKS * BLOCK_TOKENS) / run_s, 1),
        "shape": {"page_image_tokens": PAGE_IMAGE_TOKENS, "layout_tokens": LAYOUT_TOKENS, "blocks": BLOCKS,
                  "block_image_tokens": BLOCK_IMAGE_TOKENS, "block_tokens": BLOCK_TOKENS, "batch_size": 1},
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
