"""Token embeddings: the lookup table from token ids to vectors, the √D scaling of the
original Transformer, and weight tying with the language-model head.

Conventions
-----------
* Shapes: ``ids`` is an integer tensor of any shape, usually (B, T); the table W_E is
  (V, D); an embedded batch is (B, T, D). Letters as on the book's notation page.
* A lookup is the matrix product one_hot(ids) · W_E: :func:`embedding_lookup_one_hot`
  computes it that way (the explicit math) and :class:`TokenEmbedding` by indexing (the
  fast path). They agree bit for bit.
* Tying makes the LM head's weight *the same* ``Parameter`` as W_E: the logits are
  h · W_Eᵀ and both uses add into one gradient.

Invalid input raises ``ValueError``/``TypeError`` naming the argument and the rule.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["TokenEmbedding", "embedding_lookup_one_hot", "tie_weights"]


def _check_positive_int(value: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} ({value}) must be at least 1")
    return value


def _check_ids(ids: torch.Tensor, vocab_size: int) -> None:
    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"ids must be a tensor of token ids, got {type(ids).__name__}")
    if ids.dtype.is_floating_point or ids.dtype == torch.bool or ids.is_complex():
        raise TypeError(f"ids must hold integer token indices, got dtype {ids.dtype}")
    # not while torch.compile traces: a check on the values would split its graph in two (the
    # table lookup still refuses an id outside it)
    if ids.numel() and not torch.compiler.is_compiling() and (ids.min() < 0 or ids.max() >= vocab_size):
        raise ValueError(f"ids must lie in [0, {vocab_size - 1}] (V = {vocab_size})")


class TokenEmbedding(nn.Module):
    """x = W_E[ids] · s, with s = √D if ``scale_by_sqrt_d`` else 1
    (Vaswani et al., 2017, §3.4).

    ``weight`` is the (V, D) table W_E, drawn from N(0, init_std²). The original
    Transformer shares W_E with the output layer, initialises it with std D^(−1/2)
    (tensor2tensor), and multiplies by √D on the way in: token vectors then have entries
    of size ~1, like the sinusoidal encoding added to them. Scaling a table drawn with
    std 1 (``nn.Embedding``'s default) makes tokens √D times larger than the positions
    instead. Llama does not scale (std 0.02, no added positions); Gemma does.
    """

    def __init__(self, vocab_size: int, d_model: int, *, scale_by_sqrt_d: bool = False,
                 init_std: float = 0.02):
        super().__init__()
        self.vocab_size = _check_positive_int(vocab_size, "vocab_size")
        self.d_model = _check_positive_int(d_model, "d_model")
        if not isinstance(scale_by_sqrt_d, bool):
            raise TypeError("scale_by_sqrt_d must be a bool, "
                            f"got {type(scale_by_sqrt_d).__name__}")
        ok = isinstance(init_std, (int, float)) and not isinstance(init_std, bool)
        if not (ok and init_std > 0 and math.isfinite(init_std)):
            raise ValueError(f"init_std ({init_std}) must be a positive finite number")
        self.scale_by_sqrt_d = scale_by_sqrt_d
        self.scale = math.sqrt(d_model) if scale_by_sqrt_d else 1.0
        self.weight = nn.Parameter(torch.randn(vocab_size, d_model) * init_std)  # V, D

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        _check_ids(ids, self.vocab_size)
        x = F.embedding(ids, self.weight)  # (..., D): row ids[...] of W_E
        return x * self.scale if self.scale_by_sqrt_d else x

    def extra_repr(self) -> str:
        return f"{self.vocab_size}, {self.d_model}, scale={self.scale:g}"


def embedding_lookup_one_hot(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """W_E[ids] written as the matrix product one_hot(ids) · W_E: the explicit math.

    Each one-hot row holds a single 1, so the product copies one row of W_E and adds
    exact zeros: it equals ``F.embedding(ids, weight)`` bit for bit, at V times the
    arithmetic — which is why every library indexes instead.
    """
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        raise ValueError("weight must be the (V, D) embedding table, a 2-D tensor")
    _check_ids(ids, weight.shape[0])
    one_hot = F.one_hot(ids, weight.shape[0]).to(weight.dtype)  # (..., V): a single 1
    return one_hot @ weight  # (..., V) @ (V, D) -> (..., D)


def tie_weights(lm_head: nn.Linear, embedding: nn.Module) -> nn.Linear:
    """Make ``lm_head.weight`` the very same Parameter as ``embedding.weight``
    (Press & Wolf, 2017).

    The head computes logits = h · W_Eᵀ, (B, T, D) -> (B, T, V). ``nn.Linear(D, V)``
    stores its weight as (V, D), the table's shape, so tying is an assignment, not a
    transpose. The model then holds V·D fewer parameters, and the shared table receives
    the sum of both uses' gradients. Returns ``lm_head``.
    """
    if not isinstance(lm_head, nn.Linear):
        raise TypeError(f"lm_head must be an nn.Linear, got {type(lm_head).__name__}")
    table = getattr(embedding, "weight", None)
    if not isinstance(table, nn.Parameter) or table.dim() != 2:
        raise TypeError("embedding must be a module with a (V, D) Parameter `weight`")
    if lm_head.weight.shape != table.shape:
        raise ValueError(
            f"lm_head.weight {tuple(lm_head.weight.shape)} must have the embedding "
            f"table's shape {tuple(table.shape)} (V, D): make the head nn.Linear(D, V)")
    if lm_head.bias is not None:
        raise ValueError("lm_head must have no bias (bias=False): logits are h·W_Eᵀ")
    lm_head.weight = table
    return lm_head
