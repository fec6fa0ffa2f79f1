"""Checkers for exercise 03 (attention): scaled dot-product attention with a mask, the causal mask
with an offset, and the grouped-query attention forward pass."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .. import attention as ref
from ._core import Case, Forbidden, GradingError, Mistake, check_function, describe

__all__ = ["check_scaled_dot_product_attention", "check_causal_mask", "check_gqa_forward"]

# float32 students must pass on float64 inputs too: the mistakes below differ by far more than this.
_RTOL, _ATOL = 1e-4, 1e-5

_REFERENCES = [
    Forbidden(ref.attention_reference, "course_lib.attention.attention_reference"),
    Forbidden(ref.attention, "course_lib.attention.attention"),
    Forbidden(F.scaled_dot_product_attention, "torch.nn.functional.scaled_dot_product_attention"),
    Forbidden(F.multi_head_attention_forward, "torch.nn.functional.multi_head_attention_forward"),
    Forbidden(nn.MultiheadAttention.forward, "torch.nn.MultiheadAttention"),
]

_MASK_REFERENCES = [
    Forbidden(ref.causal_mask, "course_lib.attention.causal_mask"),
    Forbidden(ref.causal_mask_from_positions, "course_lib.attention.causal_mask_from_positions"),
]

_GQA_REFERENCES = _REFERENCES + _MASK_REFERENCES + [
    Forbidden(ref.repeat_kv, "course_lib.attention.repeat_kv"),
    Forbidden(ref.GroupedQueryAttention.forward, "course_lib.attention.GroupedQueryAttention"),
    Forbidden(ref.GroupedQueryAttention.attend, "course_lib.attention.GroupedQueryAttention.attend"),
    Forbidden(ref.GroupedQueryAttention.project_qkv, "course_lib.attention.GroupedQueryAttention.project_qkv"),
]


def _random_mask(gen: torch.Generator, shape: tuple[int, ...]) -> torch.Tensor:
    """A random bool mask (True = may attend) in which every query may attend to at least one key."""
    mask = torch.rand(shape, generator=gen) > 0.4
    mask[..., 0] = True
    return mask


# --- Task 1: scaled dot-product attention -------------------------------------------------------------

def _sdpa_reference(q, k, v, mask=None):
    return ref.attention_reference(q, k, v, mask)


def _explicit(q, k, v, mask=None, *, scale=None, softmax_dim=-1, fill=float("-inf"), after=False):
    """Attention with one knob turned: what a solution with that mistake computes."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale  # (..., T, S)
    if mask is not None and not after:
        scores = scores.masked_fill(~mask, fill)
    weights = torch.softmax(scores, dim=softmax_dim)
    if mask is not None and after:
        weights = weights * mask  # zeroed after the softmax: rows no longer sum to 1
    return weights @ v


def check_scaled_dot_product_attention(scaled_dot_product_attention) -> None:
    """Check ``scaled_dot_product_attention(q, k, v, mask=None)``: softmax(q kᵀ / √d_k, masked) v."""
    gen = torch.Generator().manual_seed(303)
    t = lambda *shape: torch.randn(shape, generator=gen, dtype=torch.float64)  # noqa: E731
    cases = [Case("a single query (1, 2) over three keys (3, 2) and values (3, 2), no mask",
                  (torch.tensor([[1.0, 0.0]], dtype=torch.float64),
                   torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]], dtype=torch.float64),
                   torch.tensor([[1.0, 0.0], [2.0, 1.0], [3.0, 0.0]], dtype=torch.float64), None))]
    q, k, v = t(4, 8), t(6, 8), t(6, 8)
    cases.append(Case(f"q {describe(q)}, k and v {describe(k)}, no mask", (q, k, v, None)))
    q, k, v = t(2, 5, 16), t(2, 7, 16), t(2, 7, 4)
    cases.append(Case(f"q {describe(q)}, k {describe(k)}, v {describe(v)} (value width differs from key "
                      f"width), no mask", (q, k, v, None)))
    q, k, v = t(2, 3, 6, 8), t(2, 3, 6, 8), t(2, 3, 6, 8)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    cases.append(Case(f"q, k and v {describe(q)} with a causal mask of shape (6, 6)", (q, k, v, causal)))
    q, k, v = t(2, 2, 5, 16), t(2, 2, 9, 16), t(2, 2, 9, 16)
    mask = _random_mask(gen, (2, 1, 5, 9))
    cases.append(Case(f"q {describe(q)}, k and v {describe(k)} with a random mask of shape (2, 1, 5, 9)",
                      (q, k, v, mask)))
    q, k, v = 3 * t(1, 4, 7, 64), 3 * t(1, 4, 7, 64), t(1, 4, 7, 32)
    causal = torch.ones(7, 7, dtype=torch.bool).tril()
    cases.append(Case(f"large scores: q and k {describe(q)}, v {describe(v)}, causal mask (7, 7)",
                      (q, k, v, causal)))
    q, k, v = t(3, 4, 8).float(), t(3, 5, 8).float(), t(3, 5, 8).float()
    mask = _random_mask(gen, (3, 4, 5))
    cases.append(Case(f"float32 q {describe(q)}, k and v {describe(k)} with a random mask (3, 4, 5)",
                      (q, k, v, mask)))

    mistakes = [
        Mistake("the scores are not scaled: divide q·k by √d_k, with d_k the width of the queries and keys.",
                lambda q, k, v, mask=None: _explicit(q, k, v, mask, scale=1.0)),
        Mistake("you divided the scores by d_k; the scale is 1/√d_k.",
                lambda q, k, v, mask=None: _explicit(q, k, v, mask, scale=1.0 / q.shape[-1])),
        Mistake("you scaled by the width of the values; d_k is the width of the queries and keys "
                "(q.shape[-1]).", lambda q, k, v, mask=None: _explicit(q, k, v, mask, scale=v.shape[-1] ** -0.5)),
        Mistake("the softmax normalises over the wrong dimension: each query's weights over the keys (the "
                "last dimension of the scores) must sum to 1.",
                lambda q, k, v, mask=None: _explicit(q, k, v, mask, softmax_dim=-2)),
        Mistake("the mask is inverted: True means the query MAY attend to that key, so block where the mask "
                "is False (masked_fill(~mask, ...)).",
                lambda q, k, v, mask=None: _explicit(q, k, v, None if mask is None else ~mask)),
        Mistake("the mask is ignored: blocked keys still receive weight.",
                lambda q, k, v, mask=None: _explicit(q, k, v, None)),
        Mistake("blocked scores were set to 0, but exp(0) = 1 still gives those keys weight. Set them to "
                "-inf (float('-inf')) so that softmax gives them exactly 0.",
                lambda q, k, v, mask=None: _explicit(q, k, v, mask, fill=0.0)),
        Mistake("the mask is applied after the softmax, so the remaining weights no longer sum to 1. Mask "
                "the scores (with -inf) before the softmax.",
                lambda q, k, v, mask=None: _explicit(q, k, v, mask, after=True)),
        Mistake("you returned the attention weights; return the weighted sum of the values, weights @ v.",
                lambda q, k, v, mask=None: ref.attention_reference(q, k, v, mask, return_weights=True)[1]),
    ]
    check_function(scaled_dot_product_attention, _sdpa_reference, cases, task="scaled_dot_product_attention",
                   mistakes=mistakes, forbidden=_REFERENCES, rtol=_RTOL, atol=_ATOL)


# --- Task 2: the causal mask with an offset ----------------------------------------------------------

def _mask_reference(n_queries, n_keys, offset):
    return ref.causal_mask(n_queries, n_keys, offset=offset)


def _positions_mask(n_queries, n_keys, first_query, strict=False):
    q_pos = torch.arange(first_query, first_query + n_queries)  # (T,)
    k_pos = torch.arange(n_keys)  # (S,)
    return q_pos[:, None] > k_pos[None, :] if strict else q_pos[:, None] >= k_pos[None, :]


def _bool_mask_only(causal_mask):
    """Wrap the student's function: its result must be a bool (T, S) tensor before values are compared."""

    def wrapped(n_queries, n_keys, offset):
        out = causal_mask(n_queries, n_keys, offset)
        if isinstance(out, torch.Tensor):
            if out.dtype != torch.bool:
                raise GradingError(
                    f"causal_mask returned a {str(out.dtype).replace('torch.', '')} tensor; it must return a "
                    f"bool tensor (True = may attend), e.g. the result of a comparison such as >=."
                )
            if out.shape == (n_keys, n_queries) and n_keys != n_queries:
                raise GradingError(
                    f"causal_mask returned shape (n_keys, n_queries) for {n_queries} queries over {n_keys} keys; "
                    f"rows are queries and columns are keys: (n_queries, n_keys)."
                )
        return out

    return wrapped


def check_causal_mask(causal_mask) -> None:
    """Check ``causal_mask(n_queries, n_keys, offset)``: True where key position ≤ query position, the
    queries sitting at positions offset … offset + n_queries − 1 and the keys at 0 … n_keys − 1."""
    if not callable(causal_mask):
        raise GradingError(f"causal_mask should be a function, but it is a {type(causal_mask).__name__}.")
    cases = []
    for n_queries, n_keys, offset, what in [
        (4, 4, 0, "a full sequence"),
        (1, 1, 0, "a single token"),
        (1, 8, 7, "one new token after 7 cached ones"),
        (3, 8, 5, "3 new tokens after 5 cached ones"),
        (3, 8, 2, "3 queries in the middle of 8 keys"),
        (2, 6, 0, "2 queries at the start of 6 keys"),
        (5, 12, 7, "5 new tokens after 7 cached ones"),
        (6, 9, 1, "6 queries starting at position 1 of 9 keys"),
    ]:
        cases.append(Case(f"{what} (n_queries={n_queries}, n_keys={n_keys}, offset={offset})",
                          (n_queries, n_keys, offset)))

    mistakes = [
        Mistake("the offset is ignored: your queries sit at positions 0 … n_queries − 1, the alignment of "
                "torch.ones(T, S).tril() and of is_causal=True. With a cache the queries come after the "
                "cached keys: query i is at position offset + i.",
                lambda T, S, offset: torch.ones(T, S, dtype=torch.bool).tril()),
        Mistake("a query must be allowed to attend to its own position: compare with >=, not >.",
                lambda T, S, offset: _positions_mask(T, S, offset, strict=True)),
        Mistake("the offset has the wrong sign: the diagonal moves right (to later keys) by offset.",
                lambda T, S, offset: torch.ones(T, S, dtype=torch.bool).tril(diagonal=-offset)),
        Mistake("the convention is inverted: True must mean the query MAY attend to the key.",
                lambda T, S, offset: ~_mask_reference(T, S, offset)),
        Mistake("off by one: the first query is at position offset exactly.",
                lambda T, S, offset: _positions_mask(T, S, offset + 1)),
        Mistake("rows are queries and columns are keys: your mask is transposed.",
                lambda T, S, offset: _mask_reference(T, S, offset).T),
        Mistake("you placed the queries at the last n_queries positions whatever the offset; use the offset "
                "you are given (queries can also sit in the middle of the keys).",
                lambda T, S, offset: _mask_reference(T, S, S - T)),
    ]
    check_function(_bool_mask_only(causal_mask), _mask_reference, cases, task="causal_mask", mistakes=mistakes,
                   forbidden=_MASK_REFERENCES)


# --- Task 3: grouped-query attention forward -----------------------------------------------------------

def _gqa_reference(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads):
    d_model = x.shape[-1]
    head_dim = w_q.shape[0] // n_heads
    module = ref.GroupedQueryAttention(d_model, n_heads, n_kv_heads, head_dim=head_dim)
    module = module.to(device=x.device, dtype=x.dtype)
    with torch.no_grad():
        for linear, weight in ((module.w_q, w_q), (module.w_k, w_k), (module.w_v, w_v), (module.w_o, w_o)):
            linear.weight.copy_(weight)
        return module(x, implementation="reference")


def _gqa_variant(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads, *, tile=False, causal=True, split="view",
                 merge="transpose", scale="head", project_out=True):
    """GQA with one mistake switched on."""
    B, T, D = x.shape
    D_h = w_q.shape[0] // n_heads
    n_rep = n_heads // n_kv_heads

    def heads(y, n):
        if split == "view":
            return y.view(B, T, n, D_h).transpose(1, 2)  # (B, n, T, D_h)
        return y.reshape(B, n, T, D_h)  # wrong: mixes positions and heads

    q, k, v = heads(x @ w_q.T, n_heads), heads(x @ w_k.T, n_kv_heads), heads(x @ w_v.T, n_kv_heads)
    if tile:
        k, v = k.repeat(1, n_rep, 1, 1), v.repeat(1, n_rep, 1, 1)  # head h reads kv head h % H_kv
    else:
        k, v = k.repeat_interleave(n_rep, 1), v.repeat_interleave(n_rep, 1)
    factor = {"head": D_h ** -0.5, "model": D ** -0.5, "none": 1.0}[scale]
    scores = (q @ k.transpose(-2, -1)) * factor  # (B, H, T, T)
    if causal:
        scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool, device=x.device).tril(), float("-inf"))
    out = scores.softmax(-1) @ v  # (B, H, T, D_h)
    if merge == "transpose":
        out = out.transpose(1, 2).reshape(B, T, n_heads * D_h)
    else:
        out = out.reshape(B, T, n_heads * D_h)  # wrong: heads and positions interleaved
    return out @ w_o.T if project_out else out


def check_gqa_forward(gqa_forward) -> None:
    """Check ``gqa_forward(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads)``: causal grouped-query attention,
    weights in nn.Linear's (out_features, in_features) layout, query head h reading kv head h // n_rep."""
    gen = torch.Generator().manual_seed(404)
    cases = []
    for B, T, D, H, H_kv, D_h, dtype, what in [
        (2, 5, 32, 4, 2, 8, torch.float64, "2 query heads per kv head"),
        (1, 7, 48, 8, 2, 6, torch.float64, "4 query heads per kv head"),
        (2, 6, 24, 6, 3, 4, torch.float64, "3 kv heads shared by pairs of query heads"),
        (2, 4, 16, 4, 4, 4, torch.float64, "multi-head attention (n_kv_heads = n_heads)"),
        (2, 5, 16, 4, 1, 4, torch.float64, "multi-query attention (n_kv_heads = 1)"),
        (1, 6, 24, 4, 2, 8, torch.float64, "a head width that is not d_model / n_heads"),
        (1, 1, 16, 4, 2, 4, torch.float64, "a single position"),
        (2, 6, 32, 4, 2, 8, torch.float32, "float32"),
    ]:
        x = torch.randn(B, T, D, generator=gen, dtype=torch.float64)
        weights = [torch.randn(rows, cols, generator=gen, dtype=torch.float64) * cols ** -0.5 * 2
                   for rows, cols in ((H * D_h, D), (H_kv * D_h, D), (H_kv * D_h, D), (D, H * D_h))]
        x, weights = x.to(dtype), [w.to(dtype) for w in weights]
        label = (f"{what}: x {describe(x)}, n_heads={H}, n_kv_heads={H_kv}, w_q {tuple(weights[0].shape)}, "
                 f"w_k and w_v {tuple(weights[1].shape)}, w_o {tuple(weights[3].shape)}")
        cases.append(Case(label, (x, *weights, H, H_kv)))

    mistakes = [
        Mistake("the grouping is tiled: with .repeat, query head h reads kv head h % n_kv_heads. Each kv head "
                "serves n_rep = n_heads // n_kv_heads CONSECUTIVE query heads (query head h reads kv head "
                "h // n_rep): use repeat_interleave on the head dimension.",
                lambda *a: _gqa_variant(*a, tile=True)),
        Mistake("the causal mask is missing: position t must not attend to positions after t.",
                lambda *a: _gqa_variant(*a, causal=False)),
        Mistake("the heads are split wrongly: reshaping (B, T, H·D_h) straight to (B, H, T, D_h) mixes "
                "positions and heads. View as (B, T, H, D_h), then transpose to (B, H, T, D_h).",
                lambda *a: _gqa_variant(*a, split="reshape")),
        Mistake("the heads are merged wrongly: reshaping (B, H, T, D_h) straight to (B, T, H·D_h) mixes "
                "positions and heads. Transpose back to (B, T, H, D_h) first, then reshape.",
                lambda *a: _gqa_variant(*a, merge="reshape")),
        Mistake("the scores are not scaled: divide by √D_h, the head width.",
                lambda *a: _gqa_variant(*a, scale="none")),
        Mistake("the scores are scaled by 1/√d_model; the scale uses the head width D_h, the length of the "
                "vectors in each dot product.", lambda *a: _gqa_variant(*a, scale="model")),
        Mistake("the output projection w_o is missing.", lambda *a: _gqa_variant(*a, project_out=False)),
    ]
    check_function(gqa_forward, _gqa_reference, cases, task="gqa_forward", mistakes=mistakes,
                   forbidden=_GQA_REFERENCES, rtol=_RTOL, atol=_ATOL)
