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
over the t + 1 visible keys scores the mean of 1 / (t + 1) over the queries the score averages
(:func:`uniform_baseline`). Scores average over the batch and the queries and keep the layer and
head: shape (N, H).

On natural text there is no r ‖ r, but words recur: :func:`repeat_targets` finds, for each query t,
the earlier occurrences of the n characters ending at t, and ``induction_score`` is the weight
query t puts on the characters that followed them, averaged over the queries that have one.

Interventions
-------------
A score says where a head looks, not what the model needs it for. :func:`ablate_heads` switches
heads off: inside the ``with`` block, each chosen head's output (its D_h features of the
concatenated heads, before W_o) is replaced by zero (``"zero"``) or by its mean over the batch
and positions (``"mean"``, which keeps the average signal the rest of the model is used to). If
the loss on the characters a head is thought to predict rises when it is ablated, and rises less
when as many other heads are, the head does that job (Olsson et al., 2022).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

import torch

from .attention import attention_reference, causal_mask, repeat_kv

__all__ = ["attention_weights", "diagonal_score", "previous_token_score", "prefix_matching_score",
           "uniform_baseline", "repeat_targets", "induction_score", "ablate_heads"]


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


def uniform_baseline(T: int, first_query: int) -> float:
    """What a head that spreads its weight evenly over the t + 1 keys it can see scores on a
    one-key diagonal score averaged over queries t = ``first_query`` … T − 1: the mean of
    1 / (t + 1) over those queries (not over all T)."""
    if not 0 <= first_query < T:
        raise ValueError(f"first_query ({first_query}) must lie in [0, T − 1] = [0, {T - 1}]")
    return sum(1.0 / (t + 1) for t in range(first_query, T)) / (T - first_query)


def repeat_targets(ids: torch.Tensor, n: int = 3) -> torch.Tensor:
    """Where an induction head should look, on natural text: a bool (B, T, T), entry [b, t, s]
    True when the n tokens ending at s − 1 equal the n tokens ending at t (s − 1 < t): the token
    at s followed an earlier occurrence of what the query has just read, so copying it predicts
    the token after t. ``n`` ≥ 2 keeps the chance repeats of single characters out."""
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2:
        raise ValueError(f"ids must be a (B, T) tensor of token ids, got {getattr(ids, 'shape', type(ids))}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n ({n}) must be a positive int")
    B, T = ids.shape
    same = torch.ones(B, T, T, dtype=torch.bool, device=ids.device)  # [b, t, u]: n tokens end alike
    for back in range(n):  # tokens t − back and u − back agree
        shifted = torch.full((B, T), -1, dtype=ids.dtype, device=ids.device)
        shifted[:, back:] = ids[:, :T - back]  # (B, T): token `back` places earlier, −1 before 0
        valid = shifted >= 0
        same &= (shifted[:, :, None] == shifted[:, None, :]) & valid[:, :, None] & valid[:, None, :]
    earlier = torch.ones(T, T, dtype=torch.bool, device=ids.device).tril(-1)  # u < t
    match = same & earlier  # (B, T, T): [b, t, u] an earlier u ends like t
    targets = torch.zeros_like(match)
    targets[:, :, 1:] = match[:, :, :-1]  # s = u + 1: the token that followed
    return targets


def induction_score(weights: torch.Tensor, ids: torch.Tensor, n: int = 3) -> tuple[torch.Tensor, float]:
    """On natural text: the mean weight a query puts on the tokens that followed earlier
    occurrences of its last ``n`` tokens (:func:`repeat_targets`), over the queries that have
    any. ``weights`` (N, B, H, T, T) from :func:`attention_weights` on ``ids`` (B, T) →
    ``(scores (N, H), baseline)``: the baseline is what an even spread over the visible keys
    scores on the same queries."""
    _check_weights(weights)
    targets = repeat_targets(ids, n).to(weights.device)  # (B, T, T)
    has = targets.any(dim=-1)  # (B, T): queries with a repeat
    if not has.any():
        raise ValueError(f"no query in ids repeats {n} earlier tokens: nothing to score")
    mass = (weights * targets[None, :, None]).sum(dim=-1)  # (N, B, H, T)
    scores = (mass * has[None, :, None]).sum(dim=(1, 3)) / has.sum()  # (N, H)
    visible = torch.arange(1, ids.shape[1] + 1, device=weights.device)  # (T,): t + 1 keys
    baseline = ((targets.sum(dim=-1) / visible) * has).sum() / has.sum()
    return scores, float(baseline)


@contextlib.contextmanager
def ablate_heads(model: torch.nn.Module, heads: Iterable[tuple[int, int]],
                 mode: str = "zero") -> Iterator[None]:
    """Inside the ``with`` block, the given heads (pairs (block ℓ, head h)) of ``model`` (a
    ``DecoderLM``) contribute nothing: the D_h features of head h in the concatenated heads, the
    input of block ℓ's W_o, are set to zero (``mode="zero"``) or to their mean over the batch and
    the positions (``"mean"``). Forward pre-hooks on W_o, removed on exit, however the block ends."""
    blocks = getattr(model, "blocks", None)
    if blocks is None:
        raise TypeError("model must be a course_lib DecoderLM (with .blocks)")
    if mode not in ("zero", "mean"):
        raise ValueError(f"mode must be 'zero' or 'mean', got {mode!r}")
    by_block: dict[int, list[int]] = {}
    for pair in heads:
        layer, head = pair
        if not 0 <= layer < len(blocks):
            raise ValueError(f"head {pair} does not exist: blocks 0 … {len(blocks) - 1}")
        if not 0 <= head < blocks[layer].attn.n_heads:
            raise ValueError(f"head {pair} does not exist: block {layer} has heads "
                             f"0 … {blocks[layer].attn.n_heads - 1}")
        by_block.setdefault(layer, []).append(head)

    def hook_for(chosen: list[int], head_dim: int):
        def hook(module, args):
            out = args[0].clone()  # (B, T, H·D_h): the heads side by side
            for h in chosen:
                part = out[..., h * head_dim:(h + 1) * head_dim]  # (B, T, D_h): head h
                part.copy_(part.mean(dim=(0, 1)).expand_as(part) if mode == "mean" else torch.zeros_like(part))
            return (out, *args[1:])
        return hook

    handles = [blocks[layer].attn.w_o.register_forward_pre_hook(hook_for(chosen, blocks[layer].attn.head_dim))
               for layer, chosen in by_block.items()]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
