"""Token counting and filler text.

The simulator has no tokenizer model. It splits text into BPE-like pieces with one regex (special
tokens, single digits as Qwen2 does, words with their leading space, punctuation), so token counts
are deterministic, plausible, and consistent: a streamed answer is exactly its pieces, one per
SSE event, and ``completion_tokens`` equals the number of pieces.
"""

from __future__ import annotations

import random
import re

_PIECE = re.compile(r"<\|[a-z_]+\|>|<[a-z]{2,5}>|\d| ?[A-Za-z]+| ?[^\sA-Za-z\d]|\s+")

# Qwen2 chat template: "<|im_start|>role\n" ... "<|im_end|>\n" per message, plus the assistant header.
TEMPLATE_TOKENS_PER_MESSAGE = 5
TEMPLATE_TOKENS_ASSISTANT = 3

WORDS = (
    "the of and to in a is that for it as was with be by on not he this are or his from at which but "
    "have an they you were her she there one all we their been has when who will more no if out so "
    "said what up its about into than them can only other new some could time these two may then do "
    "first any my now such like our over man me even most made after also did many before must "
    "through back years where much your way well down should because each just those people how too "
    "little state good very make world still own see men work long get here between both life being "
    "under never day same another know while last might us great old year off come since against go "
    "came right used take three model layout page table document parser inference server batch token"
).split()


def split_pieces(text: str) -> list[str]:
    pieces = _PIECE.findall(text)
    # findall drops nothing for printable text; guard against exotic input so counts never go to 0
    return pieces if pieces or not text else [text]


def count_tokens(text: str) -> int:
    return len(_PIECE.findall(text)) or (1 if text else 0)


def filler_pieces(rng: random.Random, n: int) -> list[str]:
    """n pieces of English-looking text (a sentence break every ~12 words)."""
    out: list[str] = []
    for i in range(n):
        word = rng.choice(WORDS)
        if i == 0:
            out.append(word.capitalize())
        elif out[-1] == ".":
            out.append(" " + word.capitalize())
        elif i % 12 == 11:
            out.append(".")
        else:
            out.append(" " + word)
    return out


def chat_prompt_tokens(texts_per_message: list[str]) -> int:
    return sum(count_tokens(t) + TEMPLATE_TOKENS_PER_MESSAGE for t in texts_per_message) + TEMPLATE_TOKENS_ASSISTANT
