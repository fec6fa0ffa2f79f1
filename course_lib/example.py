"""The running example: one short sentence followed through the book — its tokens and embeddings
(chapter 2), its attention (3), its FFN (4), its norms (5), its residual stream (6), one block (7), its
logits (9) and its KV cache (10) — and, in chapter 12, continued by the model trained on Tiny
Shakespeare (which does not contain *Hamlet*, the play the sentence comes from).

The sentence is tokenised by character with the vocabulary of the course's corpus (Tiny Shakespeare,
65 characters), so the same ids mean the same characters everywhere in the book. The model is small
enough that its tensors can be printed and read: width D = 8, two query heads sharing one key/value
head of width 4, a SwiGLU FFN of width 24 (8/3 · D rounded up to a multiple of 8), two blocks.
"""

from __future__ import annotations

import functools

import torch

from .config import ModelConfig
from .data import CharTokenizer, load_corpus

__all__ = ["SENTENCE", "tokenizer", "sentence_ids", "tiny_config", "tiny_model"]

SENTENCE = "To be, or not to be"


@functools.lru_cache(maxsize=1)
def tokenizer() -> CharTokenizer:
    """The character tokenizer of the course's corpus (65 characters)."""
    return CharTokenizer.from_text(load_corpus())


def sentence_ids(device: torch.device | str | None = None) -> torch.Tensor:
    """The running example's token ids, shape (1, T) with T = len(SENTENCE): a batch of one."""
    return tokenizer().encode(SENTENCE).unsqueeze(0).to(device)  # (1, T)


def tiny_config(**changes) -> ModelConfig:
    """The printable model: V = 65, D = 8, H = 2, H_kv = 1, D_h = 4, F = 24, N = 2 (fields can be
    changed, e.g. ``tiny_config(n_layers=1)``)."""
    base = dict(vocab_size=tokenizer().vocab_size, d_model=8, n_layers=2, n_heads=2, n_kv_heads=1, d_ff=24,
                max_seq_len=64)
    return ModelConfig(**{**base, **changes})


def tiny_model(seed: int = 0, device: torch.device | str | None = None, **changes):
    """A ``DecoderLM`` of :func:`tiny_config` with weights drawn from ``seed`` (the same on every run and
    device: they are drawn on the CPU, then moved)."""
    from .training.step import build_model  # the CPU's generator alone, put back afterwards

    return build_model(tiny_config(**changes), seed=seed, device=device).eval()
