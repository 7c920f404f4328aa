"""A tiny Qwen2-VL model for MinerU's in-process transformers backend (monolithic mode on a CPU).

MinerU2.5 is a Qwen2-VL model (``Qwen2VLForConditionalGeneration`` with Qwen2-VL's processor);
no weights can be downloaded here, so this generates one of the same architecture, small enough
to load in a second: a 1-block vision tower (patch 14, merge 2), a 2-layer 64-wide language
model, a byte-level BPE tokenizer with Qwen2-VL's special tokens and its chat template, and
Qwen2-VL's image-processor config with a small pixel budget.

Random weights answer gibberish, which MinerU's layout parser discards: the document would end
with no blocks and no extraction request. So the language model is *scripted*: every attention
and MLP output projection is zero (each position's hidden state is its own token's embedding),
and the embeddings and the output head make greedy decoding answer one fixed layout line
(``ANSWER``, one added token) after any prompt, then end-of-turn after it. The vision tower
still runs on every page image, and MinerU's pipeline runs unchanged: the layout request, the
parsed text block, its content-extraction request, the result.

Entry points: ``ensure_tiny_vlm(out_dir)`` and ``python -m localvllm.tinyvlm --out DIR``.
torch, transformers and tokenizers come with the ``vllm`` extra and are imported lazily.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from localvllm.tinymodel import REPO_ROOT, generate_corpus, generate_once, generator_main

GENERATOR_VERSION = 1
DEFAULT_VLM_DIR = REPO_ROOT / ".cache" / "models" / "tiny-vlm"
STAMP_FILE = "splitstack-tinyvlm.json"
SEED = 20261126
VOCAB = 2048
HIDDEN = 64
MAX_POSITIONS = 4096
# One text block over most of the page, in MinerU2.5's layout syntax (mineru_vl_utils' regex).
ANSWER = "<|box_start|>100 100 900 300<|box_end|><|ref_start|>text<|ref_end|><|rotate_up|>"
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>",
                  "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
EOS = "<|im_end|>"
PAD = "<|endoftext|>"
# Qwen2-VL's chat template, reduced to what MinerU sends: a system turn, images and text.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{%- endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{%- if message['content'] is string %}{{ message['content'] }}{%- else %}"
    "{%- for c in message['content'] %}"
    "{%- if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{%- elif c['type'] == 'text' %}{{ c['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}<|im_end|>\n"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
)
SCRIPT_GAIN = 4.0  # logit margin per unit of normalised hidden state: greedy and sampled alike


def digest() -> str:
    payload = json.dumps({"v": GENERATOR_VERSION, "seed": SEED, "vocab": VOCAB, "hidden": HIDDEN,
                          "answer": ANSWER, "max_positions": MAX_POSITIONS}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def _tokenizer():
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB - 1, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(generate_corpus(SEED, 5000), trainer)
    tok.add_special_tokens([AddedToken(ANSWER, special=True, normalized=False)])
    return tok


def write_tiny_vlm(out_dir: Path) -> None:
    import torch
    from transformers import PreTrainedTokenizerFast, Qwen2VLConfig, Qwen2VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    tok = _tokenizer()
    vocab = tok.get_vocab()
    ids = {t: vocab[t] for t in (*SPECIAL_TOKENS, ANSWER)}
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=EOS, pad_token=PAD, model_max_length=MAX_POSITIONS,
        extra_special_tokens={"image_token": "<|image_pad|>", "video_token": "<|video_pad|>",
                              "vision_start_token": "<|vision_start|>",
                              "vision_end_token": "<|vision_end|>"})
    fast.save_pretrained(out_dir)
    # 4..16 merged patches of 28x28 pixels per image: a page costs at most 16 image tokens.
    Qwen2VLImageProcessorPil(min_pixels=28 * 28 * 4, max_pixels=28 * 28 * 16).save_pretrained(out_dir)
    (out_dir / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    (out_dir / "processor_config.json").write_text(
        json.dumps({"processor_class": "Qwen2VLProcessor"}, indent=2) + "\n")
    size = len(vocab)
    cfg = Qwen2VLConfig(
        text_config={"vocab_size": size, "hidden_size": HIDDEN, "intermediate_size": 2 * HIDDEN,
                     "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
                     "max_position_embeddings": MAX_POSITIONS,
                     "rope_parameters": {"rope_type": "default", "rope_theta": 1e6,
                                         "mrope_section": [8, 4, 4]},
                     "eos_token_id": ids[EOS], "pad_token_id": ids[PAD], "bos_token_id": ids[PAD]},
        vision_config={"depth": 1, "embed_dim": 32, "hidden_size": HIDDEN, "num_heads": 2,
                       "mlp_ratio": 2, "patch_size": 14, "spatial_merge_size": 2,
                       "temporal_patch_size": 2},
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False, eos_token_id=ids[EOS], pad_token_id=ids[PAD])
    cfg.architectures = ["Qwen2VLForConditionalGeneration"]
    torch.manual_seed(SEED)
    model = Qwen2VLForConditionalGeneration(cfg).to(torch.float32).eval()
    gen = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.startswith("model.language_model.") and name.endswith(
                    ("self_attn.o_proj.weight", "mlp.down_proj.weight")):
                param.zero_()  # no mixing: the hidden state is the token's own embedding
        embed = model.get_input_embeddings().weight
        embed.copy_(torch.randn(embed.shape, generator=gen) * 0.02)
        embed[:, 0] = 1.0  # "answer next" direction
        embed[ids[ANSWER], 0] = 0.0
        embed[ids[ANSWER], 1] = 1.0  # "end the turn next" direction
        head = model.get_output_embeddings().weight
        head.copy_(torch.randn(head.shape, generator=gen) * 0.02)
        head[ids[ANSWER]] = 0.0
        head[ids[ANSWER], 0] = SCRIPT_GAIN
        head[ids[EOS]] = 0.0
        head[ids[EOS], 1] = SCRIPT_GAIN
    model.generation_config.eos_token_id = [ids[EOS], ids[PAD]]
    model.generation_config.pad_token_id = ids[PAD]
    model.save_pretrained(out_dir)
    # mineru-vl-utils 1.2 reads max_position_embeddings from the top of the config, where
    # Qwen2-VL configs written by transformers 4.x keep it (5.x nests it in text_config).
    config = json.loads((out_dir / "config.json").read_text())
    config["max_position_embeddings"] = MAX_POSITIONS
    (out_dir / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def ensure_tiny_vlm(out_dir: Path = DEFAULT_VLM_DIR) -> Path:
    """Generate the tiny VLM into ``out_dir`` unless its stamp says it is there; return it.
    Concurrent callers wait on a lock; generation happens in a sibling folder, then moves."""

    def up_to_date(folder: Path) -> bool:
        stamp = folder / STAMP_FILE
        return stamp.is_file() and json.loads(stamp.read_text()).get("digest") == digest()

    def write(tmp: Path) -> dict[str, str]:
        write_tiny_vlm(tmp)
        return {"generator": "localvllm.tinyvlm", "digest": digest()}

    return generate_once(Path(out_dir), "tiny VLM", up_to_date, write, STAMP_FILE, "localvllm.tinyvlm")


def main(argv: list[str] | None = None) -> int:
    return generator_main(argv, ensure_tiny_vlm, DEFAULT_VLM_DIR, "tiny VLM", __doc__ or "")


if __name__ == "__main__":
    sys.exit(main())
