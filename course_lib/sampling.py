"""From logits to the next token: temperature, top-k and top-p (nucleus) sampling.

Given the logits z (B, V) at the last position, the sampling distribution is built in three steps,
in this order (the order of Hugging Face's ``generate`` and of nanoGPT):

1. temperature τ:  p = softmax(z / τ). τ < 1 sharpens, τ > 1 flattens; τ → 0 puts all the mass on
   the argmax, which is what ``temperature=0`` means here (greedy decoding).
2. top-k:  keep the k most probable tokens, renormalise (Fan et al., 2018).
3. top-p:  keep the smallest set of most probable tokens whose total probability reaches p,
   renormalise (Holtzman et al., 2020, "nucleus sampling").

Ties: tokens are ranked by probability, equal probabilities by token id (lower first) — the order of
a stable descending sort, in which ``torch.argmax`` also picks the first maximum. So top-k keeps exactly
min(k, V) tokens, top-p exactly the shortest prefix of that order, and ``top_k=1`` is greedy decoding.
"""

from __future__ import annotations

import math

import torch

__all__ = ["check_sampling_args", "top_k_mask", "top_p_mask", "sampling_probs", "sample_next"]


def check_sampling_args(temperature: float = 1.0, top_k: int | None = None,
                        top_p: float | None = None) -> None:
    """Raise a ValueError/TypeError naming the argument unless temperature ≥ 0 is finite, top_k is a
    positive int (or None) and 0 < top_p ≤ 1 (or None)."""
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise TypeError(f"temperature must be a number, got {type(temperature).__name__}")
    if not (temperature >= 0 and math.isfinite(temperature)):
        raise ValueError(f"temperature ({temperature}) must be a finite number ≥ 0 (0 = greedy)")
    if top_k is not None:
        if isinstance(top_k, bool) or not isinstance(top_k, int):
            raise TypeError(f"top_k must be an int or None, got {type(top_k).__name__}")
        if top_k < 1:
            raise ValueError(f"top_k ({top_k}) must be at least 1 (or None to keep every token)")
    if top_p is not None:
        if isinstance(top_p, bool) or not isinstance(top_p, (int, float)):
            raise TypeError(f"top_p must be a number or None, got {type(top_p).__name__}")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p ({top_p}) must lie in (0, 1] (or None to keep every token)")


def _ranked(probs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Probabilities sorted from most to least probable, equal ones by token id; and the ids."""
    return torch.sort(probs, dim=-1, descending=True, stable=True)  # (B, V) each


def _mask_from_ranks(keep_sorted: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """A mask in sorted order → the same mask in token order."""
    return torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)  # (B, V)


def top_k_mask(probs: torch.Tensor, k: int) -> torch.Tensor:
    """True for the k most probable tokens of each row of ``probs`` (..., V): exactly min(k, V)."""
    sorted_probs, order = _ranked(probs)  # (..., V) each
    rank = torch.arange(probs.shape[-1], device=probs.device)  # (V,): 0 = most probable
    return _mask_from_ranks((rank < k).expand_as(order), order)  # (..., V)


def top_p_mask(probs: torch.Tensor, p: float) -> torch.Tensor:
    """True for the nucleus of each row of ``probs`` (..., V): the smallest set of most probable
    tokens whose total probability reaches p.

    In ranked order, token r is kept when the tokens ranked above it hold less than p:
    Σ_{r' < r} p_(r') < p. The most probable token is always kept; p = 1 keeps every token.
    The running sum is taken in float64, so that p = 0.75 over (0.5, 0.25, 0.25) keeps two tokens.
    """
    if p >= 1:
        return torch.ones_like(probs, dtype=torch.bool)
    sorted_probs, order = _ranked(probs)  # (..., V) each
    mass_above = torch.cumsum(sorted_probs.double(), dim=-1) - sorted_probs.double()  # (..., V)
    return _mask_from_ranks(mass_above < p, order)  # (..., V)


def sampling_probs(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                   top_p: float | None = None) -> torch.Tensor:
    """The distribution the next token is drawn from, (..., V) from logits (..., V):

        p = softmax(z / τ);   p ← p · [token in top-k] / Z;   p ← p · [token in nucleus(p)] / Z'

    ``temperature`` τ = 0 gives the limit τ → 0: all the mass on the argmax (one-hot). ``top_k``,
    ``top_p``: None keeps every token. Computed in at least float32; each row sums to 1.
    """
    check_sampling_args(temperature, top_k, top_p)
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point() or logits.dim() < 1:
        raise TypeError("logits must be a floating-point tensor (..., V)")
    z = logits.to(torch.promote_types(logits.dtype, torch.float32))  # (..., V)
    if temperature == 0:
        greedy = z.argmax(dim=-1, keepdim=True)  # (..., 1): the first maximum
        return torch.zeros_like(z).scatter(-1, greedy, 1.0)  # (..., V): one-hot
    probs = torch.softmax(z / temperature, dim=-1)  # (..., V)
    if top_k is not None and top_k < probs.shape[-1]:
        probs = probs * top_k_mask(probs, top_k)  # (..., V): zero outside the top k
        probs = probs / probs.sum(dim=-1, keepdim=True)  # renormalise
    if top_p is not None and top_p < 1:
        probs = probs * top_p_mask(probs, top_p)  # (..., V): zero outside the nucleus
        probs = probs / probs.sum(dim=-1, keepdim=True)  # renormalise
    return probs


def sample_next(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                top_p: float | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw the next token of each row: logits (B, V) → ids (B, 1).

    ``temperature=0`` is greedy (argmax; no randomness, ``generator`` unused). Otherwise one draw
    from :func:`sampling_probs` per row with ``generator`` (on the logits' device), so the same
    generator state gives the same tokens.
    """
    check_sampling_args(temperature, top_k, top_p)
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)  # (B, 1): greedy
    probs = sampling_probs(logits, temperature, top_k, top_p)  # (B, V)
    return torch.multinomial(probs, 1, generator=generator)  # (B, 1)
