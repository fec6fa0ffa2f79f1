"""What attention heads attend to: the attention weights of every head of a :class:`DecoderLM`, and
scores that say which pattern a head implements (Elhage et al., 2021; Olsson et al., 2022).

Weights
-------
:func:`attention_weights` runs the model once and returns, for every block ℓ and head h,

    A[ℓ, b, h] = softmax(q_h k_{h // n_rep}ᵀ / √D_h, causal)        (T, T), each row sums to 1

computed with the explicit math (``attention.attention_reference``) from the very queries and keys the
block computes — RoPE applied, the block's own norm in front — so that ``A v`` reproduces the block's
attention output. Nothing in the model changes: a forward pre-hook on each block reads its input
for the duration of the call and is removed afterwards.

Scores
------
A head's pattern is read off a diagonal of A: the weight query t puts on key t − k.

    diagonal_score(A, k)          = mean over queries t ≥ k of A[t, t − k]
    previous_token_score(A)       = diagonal_score(A, 1)           attend to the previous token
    prefix_matching_score(A, L)   = mean over t ≥ L of A[t, t − L + 1]

For a sequence r ‖ r (L random tokens, then the same L again; ``data.induction_batch``), the token at
position t ≥ L occurred before at t − L, and the token that followed it sits at t − L + 1: a head
that attends there has *matched the prefix* — the first half of an induction head, which then copies
what it finds (Olsson et al., 2022). Scores lie in [0, 1]; a head that spreads its attention uniformly
over the t + 1 visible keys scores about the mean of 1 / (t + 1). Scores average over the batch and the
queries and keep the layer and head: shape (N, H).
"""

from __future__ import annotations

import torch

from .attention import attention_reference, causal_mask, repeat_kv

__all__ = ["attention_weights", "diagonal_score", "previous_token_score", "prefix_matching_score"]


@torch.no_grad()
def attention_weights(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """The attention weights of every block and head of ``model`` (a ``DecoderLM``) on ``ids`` (B, T):
    a tensor (N, B, H, T, T), ``[ℓ, b, h, t, s]`` the weight query t of head h in block ℓ puts on key s.

    Each block's queries and keys are recomputed from the block's input exactly as the block computes
    them (its attention norm for a pre-norm block, RoPE tables from the model), and the weights with
    the explicit softmax(QKᵀ/√D_h) under the block's mask (causal by default). The model's output and
    parameters are not changed.
    """
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2:
        raise ValueError(f"ids must be a (B, T) tensor of token ids, got {getattr(ids, 'shape', type(ids))}")
    blocks = getattr(model, "blocks", None)
    if blocks is None:
        raise TypeError("model must be a course_lib DecoderLM (with .blocks)")
    captured: list[torch.Tensor] = []

    def capture(block, args, kwargs):
        x = args[0]  # (B, T, D): the block's input
        cos = args[1] if len(args) > 1 else kwargs.get("cos")
        sin = args[2] if len(args) > 2 else kwargs.get("sin")
        mask = kwargs.get("mask")  # None: causal
        attn_in = block.attn_norm(x) if block.placement == "pre" else x  # (B, T, D)
        q, k, v = block.attn.project_qkv(attn_in, cos, sin)  # (B, H, T, D_h), (B, H_kv, T, D_h) ×2
        k = repeat_kv(k, block.attn.n_rep)  # (B, H, T, D_h): head h reads kv head h // n_rep
        v = repeat_kv(v, block.attn.n_rep)  # (B, H, T, D_h)
        if mask is None:
            mask = causal_mask(q.shape[-2], k.shape[-2], device=q.device)  # (T, T)
        _, weights = attention_reference(q, k, v, mask, return_weights=True)  # (B, H, T, T)
        captured.append(weights.float())

    handles = [block.register_forward_pre_hook(capture, with_kwargs=True) for block in blocks]
    try:
        model(ids)
    finally:
        for handle in handles:
            handle.remove()
    return torch.stack(captured)  # (N, B, H, T, T)


def _check_weights(weights: torch.Tensor) -> None:
    if not isinstance(weights, torch.Tensor) or weights.dim() < 2 or weights.shape[-1] != weights.shape[-2]:
        raise ValueError(f"weights must be attention weights (..., T, T), got "
                         f"{getattr(weights, 'shape', type(weights))}")


def diagonal_score(weights: torch.Tensor, offset: int, first_query: int | None = None) -> torch.Tensor:
    """The mean weight that queries put on the key ``offset`` positions back: A[t, t − offset],
    averaged over the queries t = ``first_query`` … T − 1 (default: every query that has such a key,
    t ≥ offset) and over the batch.

    ``weights`` (N, B, H, T, T) → (N, H); any shape (..., B, H, T, T) → (..., H).
    """
    _check_weights(weights)
    T = weights.shape[-1]
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset < T:
        raise ValueError(f"offset ({offset}) must be an int in [0, T − 1] = [0, {T - 1}]")
    first = offset if first_query is None else first_query
    if isinstance(first, bool) or not isinstance(first, int) or not offset <= first < T:
        raise ValueError(f"first_query ({first_query}) must be an int in [offset, T − 1] = [{offset}, {T - 1}]")
    queries = torch.arange(first, T, device=weights.device)  # (Q,)
    diagonal = weights[..., queries, queries - offset]  # (..., B, H, Q): A[t, t − offset]
    return diagonal.mean(dim=-1).mean(dim=-2)  # (..., B, H) → (..., H): the queries, then the batch


def previous_token_score(weights: torch.Tensor) -> torch.Tensor:
    """How much each head attends to the previous token: mean of A[t, t − 1] over t ≥ 1 and the
    batch. (N, B, H, T, T) → (N, H)."""
    return diagonal_score(weights, 1)


def prefix_matching_score(weights: torch.Tensor, half_len: int) -> torch.Tensor:
    """On sequences r ‖ r of two copies of ``half_len`` = L tokens: the mean weight each query of the
    second copy (t ≥ L) puts on the token that followed its token's first occurrence, A[t, t − L + 1].
    (N, B, H, T, T) → (N, H)."""
    _check_weights(weights)
    T = weights.shape[-1]
    if isinstance(half_len, bool) or not isinstance(half_len, int) or not 2 <= half_len < T:
        raise ValueError(f"half_len ({half_len}) must be an int in [2, T − 1] = [2, {T - 1}]: the "
                         f"sequence must reach into its second copy")
    return diagonal_score(weights, half_len - 1, first_query=half_len)
