"""Attention: scaled dot-product attention as explicit math and as PyTorch's fused kernel, its
backward pass by hand, causal and sliding-window masks built from positions, and grouped-query
attention (multi-head attention when ``n_kv_heads == n_heads``, multi-query attention when
``n_kv_heads == 1``).

Conventions
-----------
* Shape letters (book/notation.md): B batch, T query length, S key length, D model width,
  H query heads, H_kv key/value heads, D_h head width. Queries are ``(..., T, D_h)``, keys
  ``(..., S, D_h)``, values ``(..., S, D_v)``; the leading dimensions (usually ``(B, H)``)
  are a batch of independent attentions and must be the same for q, k and v.
* Masks are **bool, True = may attend**, broadcastable to ``(..., T, S)``. They are built
  from positions: the query at position i may attend to the key at position j when i ≥ j.
  ``F.scaled_dot_product_attention`` uses the same convention; ``nn.MultiheadAttention``
  the opposite one (True = blocked). Additive float masks are refused, not guessed at.
* A query that may attend to no key at all gets output 0 rather than the NaN of a
  softmax over −∞. Recent releases of ``F.scaled_dot_product_attention`` return 0 too;
  older ones returned NaN, and what a release returns can depend on the kernel it
  picks, so ``implementation="sdpa"`` inherits whatever the installed torch does.
* ``scale`` defaults to 1/√D_h.
* ``implementation="reference"`` runs the explicit math; ``"sdpa"`` runs
  ``F.scaled_dot_product_attention``. They agree to rounding (tests/test_attention.py).
* Dropout on the attention weights (``dropout_p``; Srivastava et al., 2014) zeroes each
  weight with probability p after the softmax and scales the others by 1/(1 − p), as
  ``F.scaled_dot_product_attention(dropout_p=p)`` does; on the CPU, from the same random
  state, both implementations zero the same weights. The functions drop whenever p > 0;
  :class:`GroupedQueryAttention` passes its p in training mode only.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .positional import apply_rope

__all__ = [
    "IMPLEMENTATIONS",
    "causal_mask_from_positions",
    "causal_mask",
    "sliding_window_mask",
    "attention_reference",
    "attention_backward",
    "attention",
    "repeat_kv",
    "GroupedQueryAttention",
]

IMPLEMENTATIONS = ("reference", "sdpa")


# --- validation helpers --------------------------------------------------------------

def _check_int(value, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} ({value}) must be at least {minimum}")
    return value


def _check_dropout(p, name: str) -> float:
    if isinstance(p, bool) or not isinstance(p, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(p).__name__}")
    if not 0 <= p < 1:
        raise ValueError(f"{name} ({p}) must be in [0, 1): the probability of zeroing a "
                         f"weight (1 would zero every one)")
    return float(p)


def _check_implementation(implementation: str) -> str:
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(
            f"implementation must be one of {IMPLEMENTATIONS}, got {implementation!r}"
        )
    return implementation


def _check_qkv(q, k, v, grouped: bool = False) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")
        if t.dim() < 2:
            raise ValueError(
                f"{name} must have shape (..., length, width), got shape {tuple(t.shape)}"
            )
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(
            f"q, k and v must have the same dtype, got {q.dtype}, {k.dtype} and {v.dtype}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must have the same head width (last dimension), "
            f"got {q.shape[-1]} and {k.shape[-1]}"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must hold the same number of keys (dimension -2), "
            f"got {k.shape[-2]} and {v.shape[-2]}"
        )
    q_leading = q.shape[:-2]
    if grouped:  # H_kv heads for k and v; _check_grouped checked that they divide q's H
        q_leading = (*q.shape[:-3], k.shape[-3])
    if not (q_leading == k.shape[:-2] == v.shape[:-2]):
        raise ValueError(
            f"q, k and v must have the same leading (batch, head) dimensions, got "
            f"{tuple(q.shape[:-2])}, {tuple(k.shape[:-2])} and {tuple(v.shape[:-2])}; "
            f"for grouped-query attention, expand k and v with repeat_kv first"
        )


def _check_grouped(q, k, v) -> int:
    """enable_gqa: q (B, H, T, D_h), k and v (B, H_kv, S, D_h), H_kv dividing H; H // H_kv."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"with enable_gqa, {name} must have shape (B, heads, length, "
                             f"D_h), got {got}")
    if q.shape[1] % k.shape[1] != 0:
        raise ValueError(f"with enable_gqa, the query heads ({q.shape[1]}) must be a "
                         f"multiple of the key/value heads ({k.shape[1]})")
    return q.shape[1] // k.shape[1]


def _check_mask(mask, scores_shape: tuple[int, ...]) -> None:
    if not isinstance(mask, torch.Tensor):
        raise TypeError(
            f"mask must be a bool torch.Tensor (True = may attend), got {type(mask).__name__}"
        )
    if mask.dtype != torch.bool:
        raise TypeError(
            f"mask must be a bool tensor with True = may attend, got dtype {mask.dtype}; "
            f"an additive float mask (0 = attend, -inf = blocked) converts with "
            f"`mask = additive == 0`"
        )
    # does the mask broadcast to the scores? (a plain loop: torch.broadcast_shapes is slow for
    # a check that runs in every layer at every generation step)
    fits = mask.dim() <= len(scores_shape) and all(
        m in (1, s) for m, s in zip(reversed(mask.shape), reversed(scores_shape)))
    if not fits:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to the scores' shape "
            f"{tuple(scores_shape)} (..., T, S)"
        )


# --- masks ---------------------------------------------------------------------------

def causal_mask_from_positions(q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    """Causal mask from positions: ``mask[..., i, j] = q_pos[..., i] >= k_pos[..., j]``.

    ``q_pos`` has shape (..., T) and ``k_pos`` (..., S), integer positions; the result is a
    bool (..., T, S), True = may attend. Comparing positions rather than indices, the same
    line serves a full sequence (q_pos = k_pos = 0 … T−1), a block of queries at an offset
    (the new tokens when decoding with a KV cache) and per-sequence positions in a batch.
    """
    for name, p in (("q_pos", q_pos), ("k_pos", k_pos)):
        if not isinstance(p, torch.Tensor):
            raise TypeError(
                f"{name} must be a torch.Tensor of integer positions, got {type(p).__name__}"
            )
        if p.is_floating_point() or p.is_complex() or p.dtype == torch.bool:
            raise TypeError(f"{name} must hold integer positions, got dtype {p.dtype}")
        if p.dim() < 1:
            raise ValueError(f"{name} must have at least one dimension, got a scalar")
    return q_pos[..., :, None] >= k_pos[..., None, :]  # (..., T, S): keys at or before i


def causal_mask(
    n_queries: int, n_keys: int | None = None, *, offset: int | None = None, device=None
) -> torch.Tensor:
    """The causal mask (T, S) of T queries at positions ``offset … offset + T − 1`` over
    S keys at positions ``0 … S − 1``: True where key position ≤ query position.

    ``n_keys`` defaults to ``n_queries`` and ``offset`` to ``S − T``: the queries are
    the *last* T of the S positions, as for a prompt (T = S, offset 0) and for decoding
    with a KV cache (T new tokens after S − T cached ones). ``torch.ones(T, S).tril()``
    puts the queries at the start (offset 0) instead — the alignment of
    ``F.scaled_dot_product_attention(is_causal=True)``, right only when T == S.
    """
    n_queries = _check_int(n_queries, "n_queries", 1)
    n_keys = n_queries if n_keys is None else _check_int(n_keys, "n_keys", 1)
    if offset is None:
        if n_keys < n_queries:
            raise ValueError(
                f"n_keys ({n_keys}) must be at least n_queries ({n_queries})"
            )
        offset = n_keys - n_queries
    offset = _check_int(offset, "offset", 0)
    if offset + n_queries > n_keys:
        raise ValueError(
            f"offset ({offset}) + n_queries ({n_queries}) must not exceed n_keys "
            f"({n_keys}): the keys must include every query's own position"
        )
    q_pos = torch.arange(offset, offset + n_queries, device=device)  # (T,)
    k_pos = torch.arange(n_keys, device=device)  # (S,)
    return causal_mask_from_positions(q_pos, k_pos)  # (T, S)


def sliding_window_mask(
    n_queries: int, n_keys: int | None = None, *, window: int, offset: int | None = None,
    device=None,
) -> torch.Tensor:
    """The causal sliding-window mask (T, S): the query at position i may attend to the key at
    position j when ``i − window < j ≤ i`` — its own position and the ``window − 1`` before it,
    at most ``window`` keys (Child et al., 2019; Beltagy et al., 2020; Mistral: Jiang et al.,
    2023, with Hugging Face's count of ``window`` keys).

    Positions as in :func:`causal_mask`: the T queries at ``offset … offset + T − 1`` (default
    offset S − T, the last T positions), the S keys at ``0 … S − 1``. ``window ≥ S`` gives the
    plain causal mask.
    """
    window = _check_int(window, "window", 1)
    mask = causal_mask(n_queries, n_keys, offset=offset, device=device)  # (T, S): j ≤ i
    n_keys = mask.shape[1]
    first = n_keys - n_queries if offset is None else offset
    q_pos = torch.arange(first, first + n_queries, device=device)  # (T,)
    k_pos = torch.arange(n_keys, device=device)  # (S,)
    recent = q_pos[:, None] - k_pos[None, :] < window  # (T, S): i − j < window
    return mask & recent  # (T, S)


# --- scaled dot-product attention ----------------------------------------------------

def attention_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    return_weights: bool = False,
    *,
    scale: float | None = None,
    dropout_p: float = 0.0,
):
    """Attention(Q, K, V) = softmax(Q Kᵀ / √D_h, masked) V  (Vaswani et al., 2017).

    The explicit math. q (..., T, D_h), k (..., S, D_h), v (..., S, D_v); ``mask``
    bool, True = may attend, broadcastable to (..., T, S). Returns the output
    (..., T, D_v) and, with ``return_weights=True``, the weights (..., T, S): each row a
    distribution over the keys (all zeros, like its output, for a query with no allowed
    key). The softmax runs in at least float32.

    ``dropout_p`` = p > 0 drops weights (training): W ← W ⊙ M / (1 − p), each entry of
    M ~ Bernoulli(1 − p), between the softmax and the product with V; the weights
    returned are those V was multiplied by, whose rows sum to 1 only on average.
    """
    _check_qkv(q, k, v)
    dropout_p = _check_dropout(dropout_p, "dropout_p")
    if mask is not None:
        _check_mask(mask, (*q.shape[:-1], k.shape[-2]))
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    scores = (q @ k.transpose(-2, -1)) * scale  # (..., T, S): one per (query, key)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))  # exp(−inf) = 0: weight 0
    dtype = torch.promote_types(scores.dtype, torch.float32)  # bf16 in: fp32 softmax
    weights = torch.softmax(scores.to(dtype), dim=-1)  # (..., T, S): over the keys
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)  # an all-−inf row is NaN: make it 0
    if dropout_p > 0:  # zero weights with probability p, scale the rest by 1/(1 − p)
        weights = F.dropout(weights, p=dropout_p)  # (..., T, S)
    weights = weights.to(v.dtype)
    out = weights @ v  # (..., T, D_v): weighted averages of the values
    return (out, weights) if return_weights else out


def attention_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    grad_out: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The backward pass of O = softmax(S) V, S = Q Kᵀ · scale (masked), given dO = ∂L/∂O:

        P = softmax(S),    dV = Pᵀ dO,    dP = dO Vᵀ,
        dS = P ⊙ (dP − rowsum(dP ⊙ P)),    dQ = dS K · scale,    dK = dSᵀ Q · scale.

    Shapes as in :func:`attention_reference`; ``grad_out`` has the output's shape. Grouped
    heads: k and v may have H_kv heads (dimension −3) for q's H, query head h reading kv head
    h // (H / H_kv) as in :func:`repeat_kv`; then each kv head's dK and dV sum the
    contributions of the H / H_kv query heads that share it. Returns (dQ, dK, dV) with the
    shapes and dtypes of q, k and v; computed in at least float32. Blocked keys get weight 0
    and so no gradient; a query with no allowed key gets none either.
    """
    for name, t in (("q", q), ("k", k), ("v", v), ("grad_out", grad_out)):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.dim() < 2:
            raise TypeError(f"{name} must be a floating-point tensor of shape (..., length, "
                            f"width)")
    n_rep = 1
    if q.dim() >= 3 and k.dim() == q.dim() and k.shape[-3] != q.shape[-3]:
        if q.shape[-3] % k.shape[-3] != 0:
            raise ValueError(f"the query heads ({q.shape[-3]}) must be a multiple of the "
                             f"key/value heads ({k.shape[-3]})")
        n_rep = q.shape[-3] // k.shape[-3]
    k_full = k.repeat_interleave(n_rep, dim=-3) if n_rep > 1 else k  # (..., H, S, D_h)
    v_full = v.repeat_interleave(n_rep, dim=-3) if n_rep > 1 else v  # (..., H, S, D_v)
    _check_qkv(q, k_full, v_full)
    if grad_out.shape != (*q.shape[:-1], v.shape[-1]):
        raise ValueError(f"grad_out must have the output's shape "
                         f"{(*q.shape[:-1], v.shape[-1])}, got {tuple(grad_out.shape)}")
    if mask is not None:
        _check_mask(mask, (*q.shape[:-1], k.shape[-2]))
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    dtype = torch.promote_types(q.dtype, torch.float32)
    q32, k32, v32, g32 = (t.to(dtype) for t in (q, k_full, v_full, grad_out))
    _, p = attention_reference(q32, k32, v32, mask, return_weights=True, scale=scale)
    grad_v = p.transpose(-2, -1) @ g32  # (..., S, D_v): Pᵀ dO
    grad_p = g32 @ v32.transpose(-2, -1)  # (..., T, S): dO Vᵀ
    grad_s = p * (grad_p - (grad_p * p).sum(-1, keepdim=True))  # (..., T, S): softmax'
    grad_q = grad_s @ k32 * scale  # (..., T, D_h)
    grad_k = grad_s.transpose(-2, -1) @ q32 * scale  # (..., S, D_h)
    if n_rep > 1:  # kv head g serves query heads g·n_rep … g·n_rep + n_rep − 1: sum them
        grad_k = grad_k.unflatten(-3, (k.shape[-3], n_rep)).sum(-3)  # (..., H_kv, S, D_h)
        grad_v = grad_v.unflatten(-3, (v.shape[-3], n_rep)).sum(-3)  # (..., H_kv, S, D_v)
    return grad_q.to(q.dtype), grad_k.to(k.dtype), grad_v.to(v.dtype)


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    causal: bool = False,
    scale: float | None = None,
    implementation: str = "sdpa",
    enable_gqa: bool = False,
    dropout_p: float = 0.0,
) -> torch.Tensor:
    """Scaled dot-product attention, either implementation: ``"sdpa"`` calls PyTorch's
    fused ``F.scaled_dot_product_attention``, ``"reference"`` :func:`attention_reference`.

    Give a bool ``mask`` (True = may attend) or ``causal=True``, not both. ``causal=True``
    puts the T queries at the last T of the S key positions (:func:`causal_mask`); it
    becomes the kernel's ``is_causal=True`` only when T == S, because that flag aligns the
    queries with the *first* keys.

    ``enable_gqa=True`` takes k and v with H_kv heads for q's H (grouped-query attention),
    query head h reading kv head h // (H / H_kv): the reference expands them with
    :func:`repeat_kv`; the fused kernel groups the heads itself, without that copy.

    ``dropout_p`` = p > 0 zeroes each attention weight with probability p after the
    softmax, scaling the others by 1/(1 − p): pass it in training only (the function
    drops whenever p > 0, like ``F.scaled_dot_product_attention``).
    """
    _check_implementation(implementation)
    dropout_p = _check_dropout(dropout_p, "dropout_p")
    if enable_gqa:
        n_rep = _check_grouped(q, k, v)
        if implementation == "reference":
            k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)  # (B, H, S, D_h): h // n_rep
            enable_gqa = False
    _check_qkv(q, k, v, grouped=enable_gqa)
    if causal and mask is not None:
        raise ValueError(
            "give either mask or causal=True, not both: a mask must already include causality"
        )
    n_queries, n_keys = q.shape[-2], k.shape[-2]
    is_causal = False
    if causal:
        if n_queries == 1:
            pass  # one query, at the last position (a decoding step): it sees every key
        elif implementation == "sdpa" and n_queries == n_keys:
            is_causal = True  # the fused kernel skips the blocked half, no mask to read
        else:
            mask = causal_mask(n_queries, n_keys, device=q.device)  # (T, S), offset S − T
    if implementation == "reference":
        return attention_reference(q, k, v, mask, scale=scale, dropout_p=dropout_p)
    if mask is not None:
        _check_mask(mask, (*q.shape[:-1], n_keys))
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=is_causal, dropout_p=dropout_p, scale=scale,
        enable_gqa=enable_gqa,
    )


# --- grouped-query attention ---------------------------------------------------------

def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """Share each key/value head with ``n_rep`` consecutive query heads (Ainslie et al.,
    2023): (B, H_kv, S, D_h) → (B, H_kv · n_rep, S, D_h), **query head h reading kv head
    h // n_rep**.

    The grouping of Hugging Face's ``repeat_kv`` and of ``enable_gqa=True`` in
    ``F.scaled_dot_product_attention``. ``x.repeat(1, n_rep, 1, 1)`` would tile the
    heads instead (head h reading kv head h % H_kv), which does not match pretrained
    weights.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 4:
        raise ValueError(f"x must have shape (B, H_kv, S, D_h), got {tuple(x.shape)}")
    n_rep = _check_int(n_rep, "n_rep", 1)
    if n_rep == 1:
        return x
    return x.repeat_interleave(n_rep, dim=1)  # (B, H, S, D_h): head h reads h // n_rep


class GroupedQueryAttention(nn.Module):
    """Grouped-query attention (Ainslie et al., 2023): H query heads share H_kv
    key/value heads, query head h reading kv head h // n_rep with n_rep = H / H_kv.
    ``n_kv_heads == n_heads`` is multi-head attention (Vaswani et al., 2017),
    ``n_kv_heads == 1`` multi-query attention (Shazeer, 2019).

        q_h = x W_q,h     k_g = x W_k,g     v_g = x W_v,g     (h < H, g < H_kv)
        out = concat_h( softmax(q_h k_{h // n_rep}ᵀ / √D_h, causal) v_{h // n_rep} ) W_o

    ``w_qkv`` (D → (H + 2·H_kv)·D_h) holds the three input projections stacked by rows:
    the H·D_h rows of W_q, then the H_kv·D_h rows of W_k and those of W_v
    (:attr:`qkv_sizes`). One product computes q, k and v together, as GPT-2's ``c_attn``
    and ``nn.MultiheadAttention``'s ``in_proj_weight`` do: the same arithmetic as three
    products, in one wider matrix product, and one gradient for x in the backward pass
    instead of three to add up. ``w_qkv.weight.split(qkv_sizes)`` gives W_q, W_k and W_v
    (views), shaped like Hugging Face Llama's q_proj, k_proj and v_proj. ``w_o``
    (H·D_h → D) is o_proj. ``head_dim`` defaults to D / H. Given RoPE tables ``cos``,
    ``sin`` from :func:`course_lib.positional.rope_cos_sin`, q and k are rotated after
    the projection, with the half-split pairing of Hugging Face checkpoints. ``dropout``
    p: in training mode each attention weight is zeroed with probability p after the
    softmax (the others scaled by 1/(1 − p)); in eval mode, or with p = 0 (the default),
    none is. ``qk_norm``: each query and key vector is RMS-normalised over its D_h
    features (no gain, ε = ``norm_eps``) before RoPE (Dehghani et al., 2023): every
    |q|, |k| is then √D_h and a score q·k/√D_h lies in [−√D_h, √D_h]. RoPE's rotation
    keeps a vector's length, so normalising before or after it gives the same q and k.
    """

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int,
                 head_dim: int | None = None, bias: bool = False, dropout: float = 0.0,
                 qk_norm: bool = False, norm_eps: float = 1e-5):
        super().__init__()
        d_model = _check_int(d_model, "d_model", 1)
        n_heads = _check_int(n_heads, "n_heads", 1)
        n_kv_heads = _check_int(n_kv_heads, "n_kv_heads", 1)
        if n_heads % n_kv_heads != 0:
            raise ValueError(
                f"n_heads ({n_heads}) must be divisible by n_kv_heads ({n_kv_heads})"
            )
        if head_dim is None:
            if d_model % n_heads != 0:
                raise ValueError(
                    f"d_model ({d_model}) must be divisible by n_heads ({n_heads}) "
                    f"unless head_dim is given"
                )
            head_dim = d_model // n_heads
        head_dim = _check_int(head_dim, "head_dim", 1)
        for name, flag in (("bias", bias), ("qk_norm", qk_norm)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be a bool, got {type(flag).__name__}")
        if isinstance(norm_eps, bool) or not isinstance(norm_eps, (int, float)) or not norm_eps > 0:
            raise ValueError(f"norm_eps ({norm_eps!r}) must be a positive number")
        self.qk_norm, self.norm_eps = qk_norm, float(norm_eps)
        self.d_model, self.head_dim = d_model, head_dim
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads
        self.n_rep = n_heads // n_kv_heads  # query heads per key/value head
        self.dropout = _check_dropout(dropout, "dropout")  # on the weights, in training
        # W_q, W_k, W_v stacked by rows: D → H·D_h + H_kv·D_h + H_kv·D_h
        self.w_qkv = nn.Linear(d_model, sum(self.qkv_sizes), bias=bias)
        self.w_o = nn.Linear(n_heads * head_dim, d_model, bias=bias)

    @property
    def qkv_sizes(self) -> tuple[int, int, int]:
        """(H·D_h, H_kv·D_h, H_kv·D_h): the rows of W_q, W_k and W_v in ``w_qkv``,
        and the features of q, k and v in its output."""
        q_width = self.n_heads * self.head_dim  # H·D_h
        kv_width = self.n_kv_heads * self.head_dim  # H_kv·D_h
        return q_width, kv_width, kv_width

    def extra_repr(self) -> str:
        text = (f"d_model={self.d_model}, n_heads={self.n_heads}, "
                f"n_kv_heads={self.n_kv_heads}, head_dim={self.head_dim}")
        text += ", qk_norm=True" if self.qk_norm else ""
        return text + (f", dropout={self.dropout}" if self.dropout else "")

    def project_qkv(self, x: torch.Tensor, cos: torch.Tensor | None = None,
                    sin: torch.Tensor | None = None):
        """x (B, T, D) → q (B, H, T, D_h), k and v (B, H_kv, T, D_h); RoPE on q, k."""
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(
                f"x must have shape (B, T, D) with D = d_model ({self.d_model}), "
                f"got {tuple(x.shape)}"
            )
        if (cos is None) != (sin is None):
            raise ValueError("give both cos and sin (RoPE tables) or neither")
        B, T, _ = x.shape
        H, H_kv, D_h = self.n_heads, self.n_kv_heads, self.head_dim
        # one product: the H query heads, then the H_kv key heads and H_kv value heads
        qkv = self.w_qkv(x).view(B, T, H + 2 * H_kv, D_h)  # (B, T, H + 2·H_kv, D_h)
        q, k, v = qkv.split((H, H_kv, H_kv), dim=2)  # (B, T, H | H_kv, D_h)
        q = q.transpose(1, 2)  # (B, H, T, D_h)
        k = k.transpose(1, 2)  # (B, H_kv, T, D_h)
        v = v.transpose(1, 2)  # (B, H_kv, T, D_h)
        if self.qk_norm:  # each head's vector to RMS 1 (norms.rms_norm with γ = 1)
            q = F.rms_norm(q, (D_h,), eps=self.norm_eps)  # (B, H, T, D_h)
            k = F.rms_norm(k, (D_h,), eps=self.norm_eps)  # (B, H_kv, T, D_h)
        if cos is not None:
            q = apply_rope(q, cos, sin, pairing="half")  # (B, H, T, D_h): a new tensor
            k = apply_rope(k, cos, sin, pairing="half")  # (B, H_kv, T, D_h): a new one
            if v.requires_grad:
                # attention keeps v for its backward pass; as a view of qkv, v would
                # keep q's and k's unrotated features alive too: keep a copy instead
                v = v.clone(memory_format=torch.contiguous_format)  # (B, H_kv, T, D_h)
        return q, k, v

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               mask: torch.Tensor | None = None, *,
               implementation: str = "sdpa") -> torch.Tensor:
        """q (B, H, T, D_h), k and v (B, H_kv, S, D_h) → output (B, T, D).

        ``mask=None`` is causal, the T queries sitting at the last T of the S positions
        (S > T when the keys come from a cache); a bool ``mask`` (True = may attend,
        broadcastable to (B, H, T, S)) is used exactly as given. In training mode the
        weights are dropped with probability ``dropout``; in eval mode never.
        """
        _check_implementation(implementation)
        H, H_kv, D_h = self.n_heads, self.n_kv_heads, self.head_dim
        if q.dim() != 4 or q.shape[1] != H or q.shape[-1] != D_h:
            raise ValueError(
                f"q must have shape (B, H={H}, T, D_h={D_h}), got {tuple(q.shape)}"
            )
        for name, t in (("k", k), ("v", v)):
            if t.dim() != 4 or t.shape[1] != H_kv or t.shape[-1] != D_h:
                raise ValueError(
                    f"{name} must have shape (B, H_kv={H_kv}, S, D_h={D_h}), "
                    f"got {tuple(t.shape)}"
                )
        B, _, T, _ = q.shape
        if implementation == "reference":
            # head h reads kv head h // n_rep
            k = repeat_kv(k, self.n_rep)  # (B, H, S, D_h)
            v = repeat_kv(v, self.n_rep)  # (B, H, S, D_h)
        # "sdpa": the kernel does the same grouping itself (enable_gqa) without copying
        # K and V to H heads, a copy of the whole KV cache at every decoding step
        p = self.dropout if self.training else 0.0  # dropout: in training only
        out = attention(q, k, v, mask, causal=mask is None,  # no mask: causal
                        implementation=implementation,
                        enable_gqa=implementation == "sdpa",
                        dropout_p=p)  # (B, H, T, D_h)
        out = out.transpose(1, 2).reshape(B, T, H * D_h)  # (B, T, H·D_h): concat heads
        return self.w_o(out)  # (B, T, D)

    def forward(self, x: torch.Tensor, cos: torch.Tensor | None = None,
                sin: torch.Tensor | None = None, mask: torch.Tensor | None = None, *,
                implementation: str = "sdpa") -> torch.Tensor:
        """x (B, T, D) → (B, T, D).

        ``cos``, ``sin``: optional RoPE tables from ``rope_cos_sin``, (T, D_h/2) or
        (B, 1, T, D_h/2). ``mask=None`` is causal self-attention; a bool mask (True =
        may attend) broadcastable to (B, H, T, T) is used exactly (all True:
        bidirectional). ``implementation``: ``"sdpa"`` (fused) or ``"reference"``.
        """
        q, k, v = self.project_qkv(x, cos, sin)  # (B, H, T, D_h), (B, H_kv, T, D_h) ×2
        return self.attend(q, k, v, mask, implementation=implementation)  # (B, T, D)
