"""Checkers for exercise 03 (attention).

1. ``sliding_window_attention`` — extend causal attention to a sliding window (queries after a cache).
2. ``gqa_forward`` — find and fix the bug in a given grouped-query attention that groups the query heads.
3. ``attention_backward`` — derive the backward pass of (grouped-query) attention and check it.
4. ``predictions`` — predict four numbers before computing them (a function returning a dict).
"""

from __future__ import annotations

import math

import torch

from .. import attention as ref
from ._predictions import predictions_task
from ._core import Case, Forbid, Mistake, Task, TensorOutput, TupleOutput, describe

__all__ = ["check_sliding_window_attention", "check_gqa_forward", "check_attention_backward",
           "check_attention_predictions"]

_INF = float("-inf")


def _randn(gen, *shape, dtype=torch.float64, scale=1.0):
    return (scale * torch.randn(shape, generator=gen, dtype=torch.float64)).to(dtype)


def _softmax_attention(q, k, v, allowed, *, scale=None, fill=_INF, dim=-1, after=False):
    """softmax(q kᵀ · scale, masked) v with one knob turned (``allowed``: bool, True = may attend)."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale  # (..., T, S)
    if allowed is not None and not after:
        scores = scores.masked_fill(~allowed, fill)
    weights = torch.softmax(scores, dim=dim)
    if allowed is not None and after:
        weights = weights * allowed  # zeroed after the softmax: rows no longer sum to 1
    return weights @ v


# --- Task 1: sliding-window attention (extend) ----------------------------------------------------------

def _sliding_reference(q, k, v, window):
    mask = ref.sliding_window_mask(q.shape[-2], k.shape[-2], window=window, device=q.device)  # (T, S)
    return ref.attention_reference(q, k, v, mask)


def _band(T, S, window, *, first=None, rule="window"):
    """Which keys each query may attend to under a (possibly wrong) rule; queries at first … first+T−1."""
    first = S - T if first is None else first
    i = torch.arange(first, first + T)[:, None]  # (T, 1): query positions
    j = torch.arange(S)[None, :]  # (1, S): key positions
    past = j <= i
    return {"window": past & (i - j < window),
            "window+1": past & (i - j <= window),  # one key too many
            "window-1": past & (i - j < window - 1),  # one key too few
            "symmetric": (i - j).abs() < window,  # a band, not causal
            "causal": past,  # the window ignored
            "from-start": past & (j < window)}[rule]


def _sliding_variant(q, k, v, window, *, rule="window", first=None, invert=False, **kw):
    allowed = _band(q.shape[-2], k.shape[-2], window, first=first, rule=rule).to(q.device)
    return _softmax_attention(q, k, v, ~allowed if invert else allowed, **kw)


def _sliding_cases(gen) -> list[Case]:
    f64, f32 = torch.float64, torch.float32
    q_hand = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [-1.0, 0.0]], dtype=f64)
    k_hand = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0]], dtype=f64)
    v_hand = torch.tensor([[1.0], [2.0], [3.0], [4.0]], dtype=f64)
    cases = [Case("four tokens, q and k (4, 2), v (4, 1), window = 2 (float64)", (q_hand, k_hand, v_hand, 2))]
    for lead, T, S, d, d_v, window, dtype, scale, note in [
        ((2, 3), 7, 7, 8, 8, 3, f64, 1.0, ""),
        ((2,), 3, 9, 8, 8, 4, f64, 1.0, ": 3 new queries after 6 cached keys"),
        ((1, 2), 1, 8, 16, 16, 3, f64, 1.0, ": one new query after 7 cached keys"),
        ((2, 2), 6, 6, 8, 4, 2, f64, 1.0, ", value width different from key width"),
        ((1, 4), 5, 5, 8, 8, 9, f64, 1.0, ", a window longer than the sequence"),
        ((3,), 5, 5, 8, 8, 1, f64, 1.0, ", a window of one key"),
        ((1, 2), 9, 9, 32, 32, 4, f64, 3.0, " with large scores"),
        ((2, 2), 6, 10, 16, 16, 5, f32, 1.0, ": 6 queries after 4 cached keys (float32)"),
    ]:
        q, k, v = _randn(gen, *lead, T, d, dtype=dtype, scale=scale), \
            _randn(gen, *lead, S, d, dtype=dtype, scale=scale), _randn(gen, *lead, S, d_v, dtype=dtype)
        cases.append(Case(f"q {describe(q)}, k {describe(k)}, v {describe(v)}, window = {window}{note}",
                          (q, k, v, window)))
    return cases


SLIDING_WINDOW = Task(
    name="sliding_window_attention", reference=_sliding_reference, cases=_sliding_cases, seed=301,
    rtol=1e-4, atol=1e-5,
    mistakes=[
        Mistake("each query attends to window + 1 keys: with i − j ≤ window the window includes one key too "
                "many. A window of W keys is the query's own position and the W − 1 before it: i − W < j ≤ i.",
                lambda q, k, v, w: _sliding_variant(q, k, v, w, rule="window+1")),
        Mistake("each query attends to window − 1 keys: a window of W keys includes the query's own position "
                "(i − W < j ≤ i).", lambda q, k, v, w: _sliding_variant(q, k, v, w, rule="window-1")),
        Mistake("the window is a band on both sides (|i − j| < window): it must stay causal, so no key after "
                "the query's own position (j ≤ i).", lambda q, k, v, w: _sliding_variant(q, k, v, w, rule="symmetric")),
        Mistake("the window is ignored: this is plain causal attention. Also block keys that are window or "
                "more positions behind the query.", lambda q, k, v, w: _sliding_variant(q, k, v, w, rule="causal")),
        Mistake("the queries are placed at positions 0 … T − 1, as with a square tril or is_causal=True. When "
                "there are fewer queries than keys they are the LAST T positions: query t sits at position "
                "S − T + t.", lambda q, k, v, w: _sliding_variant(q, k, v, w, first=0)),
        Mistake("the window counts from the first key (j < window); it moves with the query: the keys at "
                "i − window + 1 … i.", lambda q, k, v, w: _sliding_variant(q, k, v, w, rule="from-start")),
        Mistake("the mask is inverted: True means the query MAY attend to that key, so block the keys where "
                "it is False.", lambda q, k, v, w: _sliding_variant(q, k, v, w, invert=True)),
        Mistake("blocked scores were set to 0, but exp(0) = 1 still gives those keys weight: set them to "
                "-inf so that softmax gives them exactly 0.",
                lambda q, k, v, w: _sliding_variant(q, k, v, w, fill=0.0)),
        Mistake("the mask is applied after the softmax, so the remaining weights no longer sum to 1: mask the "
                "scores (with -inf) before the softmax.", lambda q, k, v, w: _sliding_variant(q, k, v, w, after=True)),
        Mistake("the scores are not scaled: divide q · k by √d_k, the width of the queries and keys.",
                lambda q, k, v, w: _sliding_variant(q, k, v, w, scale=1.0)),
        Mistake("the softmax normalises over the wrong dimension: each query's weights over the keys (the "
                "last dimension of the scores) must sum to 1.", lambda q, k, v, w: _sliding_variant(q, k, v, w, dim=-2)),
    ],
    forbid=Forbid(operations=("attention",), modules=(ref,)),
    hint="Write down, for one query position i, the list of key positions it may see, and compare it with "
         "the row of your mask; then check that the blocked scores become -inf before the softmax.",
)

check_sliding_window_attention = SLIDING_WINDOW.checker(
    """Check ``sliding_window_attention(q, k, v, window)``: causal attention in which the query at position
    i attends to the keys at i − window < j ≤ i; the T queries are the last T of the S positions.""")


# --- Task 2: grouped-query attention (find and fix the bug) ------------------------------------------------

def _gqa_reference(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads):
    head_dim = w_q.shape[0] // n_heads
    module = ref.GroupedQueryAttention(x.shape[-1], n_heads, n_kv_heads, head_dim=head_dim)
    module = module.to(device=x.device, dtype=x.dtype)
    with torch.no_grad():
        module.w_qkv.weight.copy_(torch.cat([w_q, w_k, w_v]))  # rows: W_q, W_k, W_v
        module.w_o.weight.copy_(w_o)
        return module(x, implementation="reference")


def _gqa_variant(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads, *, kv_of="group", causal=True, split="view",
                 merge="transpose", scale="head", project_out=True, w_o_transposed=True, softmax_dim=-1):
    """GQA with one mistake switched on; ``kv_of`` says which kv head query head h reads."""
    B, T, D = x.shape
    D_h = w_q.shape[0] // n_heads
    n_rep = n_heads // n_kv_heads

    def heads(y, n):
        if split == "view":
            return y.view(B, T, n, D_h).transpose(1, 2)  # (B, n, T, D_h)
        return y.reshape(B, n, T, D_h)  # wrong: mixes positions and heads

    q, k, v = heads(x @ w_q.T, n_heads), heads(x @ w_k.T, n_kv_heads), heads(x @ w_v.T, n_kv_heads)
    reads = {"group": lambda h: h // n_rep, "tiled": lambda h: h % n_kv_heads,
             "within": lambda h: h % n_rep}[kv_of]
    index = torch.tensor([reads(h) for h in range(n_heads)], device=x.device)
    if kv_of == "within" and n_rep > n_kv_heads:
        raise ValueError("this grouping mistake raises a shape error for these head counts")
    k, v = k[:, index], v[:, index]  # (B, H, T, D_h)
    factor = {"head": D_h ** -0.5, "model": D ** -0.5, "none": 1.0}[scale]
    scores = (q @ k.transpose(-2, -1)) * factor  # (B, H, T, T)
    if causal:
        lower = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()  # (T, T): j ≤ i
        blocked = ~lower if causal is True else lower.tril(-1)  # "anti": j < i blocked instead
        scores = scores.masked_fill(blocked, _INF)
    out = scores.softmax(softmax_dim) @ v  # (B, H, T, D_h)
    if merge == "transpose":
        out = out.transpose(1, 2).reshape(B, T, n_heads * D_h)
    else:
        out = out.reshape(B, T, n_heads * D_h)  # wrong: heads and positions interleaved
    if not project_out:
        return out
    return out @ (w_o.T if w_o_transposed else w_o)


def _gqa_cases(gen) -> list[Case]:
    cases = []
    for B, T, D, H, H_kv, D_h, dtype, what in [
        (1, 7, 32, 8, 2, 4, torch.float64, "Llama-like grouping, 4 query heads per kv head"),
        (2, 5, 32, 4, 2, 8, torch.float64, "2 query heads per kv head"),
        (2, 6, 24, 6, 3, 4, torch.float64, "3 kv heads shared by pairs of query heads"),
        (2, 4, 16, 4, 4, 4, torch.float64, "multi-head attention (n_kv_heads = n_heads)"),
        (2, 5, 16, 4, 1, 4, torch.float64, "multi-query attention (n_kv_heads = 1)"),
        (1, 6, 24, 4, 2, 8, torch.float64, "a head width that is not d_model / n_heads"),
        (1, 1, 16, 4, 2, 4, torch.float64, "a single position"),
        (2, 6, 32, 4, 2, 8, torch.float32, "float32"),
    ]:
        x = _randn(gen, B, T, D)
        weights = [_randn(gen, rows, cols, scale=2 * cols ** -0.5)
                   for rows, cols in ((H * D_h, D), (H_kv * D_h, D), (H_kv * D_h, D), (D, H * D_h))]
        x, weights = x.to(dtype), [w.to(dtype) for w in weights]
        label = (f"{what}: x {describe(x)}, n_heads={H}, n_kv_heads={H_kv}, w_q {tuple(weights[0].shape)}, "
                 f"w_k and w_v {tuple(weights[1].shape)}, w_o {tuple(weights[3].shape)}")
        cases.append(Case(label, (x, *weights, H, H_kv)))
    return cases


GQA_FORWARD = Task(
    name="gqa_forward", reference=_gqa_reference, cases=_gqa_cases, seed=302, rtol=1e-4, atol=1e-5,
    mistakes=[
        Mistake("this is still the given version's grouping: query head h reads kv head h % n_kv_heads (the "
                "kv heads are tiled). With n_kv_heads = n_heads (MHA) or 1 (MQA) that is the same as the "
                "right grouping, which is why the given test passed; with real groups each kv head serves "
                "n_rep CONSECUTIVE query heads, h // n_rep. Check which of the dimensions you split the query "
                "heads into holds the group.", lambda *a: _gqa_variant(*a, kv_of="tiled")),
        Mistake("query head h reads kv head h % n_rep: K and V are broadcast along the wrong one of the two "
                "group dimensions. Query head h = g · n_rep + r belongs to group g, and K and V need a size-1 "
                "dimension at the position of r.", lambda *a: _gqa_variant(*a, kv_of="within")),
        Mistake("the causal mask is missing: position t must not attend to positions after t.",
                lambda *a: _gqa_variant(*a, causal=False)),
        Mistake("the causal mask blocks the wrong side: the query at position i may attend to the keys at "
                "j ≤ i, so the blocked keys are those AFTER it (j > i).",
                lambda *a: _gqa_variant(*a, causal="anti")),
        Mistake("the heads are merged wrongly: reshaping (B, H, T, D_h) straight to (B, T, H·D_h) mixes "
                "positions and heads. Bring the head dimension next to D_h first (transpose), then reshape.",
                lambda *a: _gqa_variant(*a, merge="reshape")),
        Mistake("the heads are split wrongly: reshaping (B, T, H·D_h) straight to (B, H, T, D_h) mixes "
                "positions and heads. View as (B, T, H, D_h), then transpose.",
                lambda *a: _gqa_variant(*a, split="reshape")),
        Mistake("the scores are not scaled: divide by √D_h, the head width.",
                lambda *a: _gqa_variant(*a, scale="none")),
        Mistake("the scores are scaled by 1/√d_model; the scale uses the head width D_h, the length of the "
                "vectors in each dot product.", lambda *a: _gqa_variant(*a, scale="model")),
        Mistake("the softmax normalises over the queries; each query's weights over the keys (the last "
                "dimension) must sum to 1.", lambda *a: _gqa_variant(*a, softmax_dim=-2)),
        Mistake("w_o is used without transposing: the weights are stored as nn.Linear stores them, (out, in), "
                "so the output projection is out @ w_o.T.", lambda *a: _gqa_variant(*a, w_o_transposed=False)),
        Mistake("the output projection w_o is missing.", lambda *a: _gqa_variant(*a, project_out=False)),
    ],
    forbid=Forbid(operations=("attention",), modules=(ref,)),
    hint="Compare your function with a loop over the query heads that attends head h with kv head h // n_rep, "
         "on one small example, head by head.",
)

check_gqa_forward = GQA_FORWARD.checker(
    """Check ``gqa_forward(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads)``: causal grouped-query attention,
    weights in nn.Linear's (out_features, in_features) layout, query head h reading kv head h // n_rep.""")


# --- Task 3: the backward pass of grouped-query attention (derive) ----------------------------------------

def _backward_variant(q, k, v, grad_out, mask=None, *, rowsum=True, sign=1.0, scale_q=True, scale_k=True,
                      p_transposed=True, s_transposed=True, kv_of="group", reduce="sum", forward_mask=True,
                      mask_grad=False, rowsum_dim=-1):
    """The backward pass with one knob turned: what a solution with that mistake computes. ``kv_of``: which
    kv head query head h reads in the forward pass; ``reduce``: how the H query heads' gradients of K and V
    become H_kv (``"sum"`` over consecutive groups, ``"tiled"`` over heads h, h + H_kv, …, ``"mean"``,
    ``"first"``, or ``"none"``)."""
    H, H_kv = q.shape[-3], k.shape[-3]
    n_rep = H // H_kv
    index = torch.tensor([h % H_kv if kv_of == "tiled" else h // n_rep for h in range(H)])
    k_full, v_full = k[..., index, :, :], v[..., index, :, :]  # (B, H, S, ·)
    scale = q.shape[-1] ** -0.5
    scores = (q @ k_full.transpose(-2, -1)) * scale  # (B, H, T, S)
    if mask is not None and forward_mask:
        scores = scores.masked_fill(~mask, _INF)
    p = torch.softmax(scores, dim=-1)
    grad_v = (p.transpose(-2, -1) if p_transposed else p) @ grad_out
    grad_p = grad_out @ v_full.transpose(-2, -1)
    grad_s = p * (grad_p - sign * ((grad_p * p).sum(rowsum_dim, keepdim=True) if rowsum else 0.0))
    if mask is not None and mask_grad:
        grad_s = grad_s * mask  # the mask applied to the gradient only
    grad_q = grad_s @ k_full * (scale if scale_q else 1.0)
    grad_k = (grad_s.transpose(-2, -1) if s_transposed else grad_s) @ q * (scale if scale_k else 1.0)
    if reduce == "none":
        return grad_q, grad_k, grad_v
    if reduce == "tiled":
        def group(t):
            return t.unflatten(-3, (n_rep, H_kv)).sum(-4)  # heads h, h + H_kv, … together
    else:
        pick = {"sum": lambda t: t.sum(-3), "mean": lambda t: t.mean(-3), "first": lambda t: t.select(-3, 0)}

        def group(t):
            return pick[reduce](t.unflatten(-3, (H_kv, n_rep)))  # heads g·n_rep … g·n_rep + n_rep − 1
    return grad_q, group(grad_k), group(grad_v)


def _backward_cases(gen) -> list[Case]:
    f64, f32 = torch.float64, torch.float32
    cases = []
    for B, H, H_kv, T, S, D, D_v, mask_kind, dtype, note in [
        (1, 2, 2, 4, 4, 8, 8, None, f64, "multi-head attention, no mask"),
        (2, 2, 2, 5, 5, 8, 8, "causal", f64, "multi-head attention, causal mask"),
        (1, 8, 2, 3, 3, 16, 16, None, f64, "4 query heads per kv head, no mask"),
        (2, 4, 2, 5, 5, 8, 8, "causal", f64, "2 query heads per kv head, causal mask"),
        (1, 6, 2, 4, 7, 8, 4, "random", f64, "3 query heads per kv head, T ≠ S, a random mask, value width 4"),
        (2, 4, 1, 6, 6, 4, 4, "causal", f64, "multi-query attention, causal mask"),
        (1, 4, 2, 6, 6, 32, 32, "causal", f64, "large scores, causal mask"),
        (2, 4, 2, 5, 5, 8, 8, "causal", f32, "float32, causal mask"),
    ]:
        scale = 3.0 if note.startswith("large") else 1.0
        q = _randn(gen, B, H, T, D, dtype=dtype, scale=scale)
        k = _randn(gen, B, H_kv, S, D, dtype=dtype, scale=scale)
        v = _randn(gen, B, H_kv, S, D_v, dtype=dtype)
        grad_out = _randn(gen, B, H, T, D_v, dtype=dtype)
        if mask_kind == "causal":
            mask = torch.ones(T, S, dtype=torch.bool).tril(S - T)  # (T, S): queries at the last T positions
        elif mask_kind == "random":
            mask = torch.rand(B, 1, T, S, generator=gen) > 0.4
            mask[..., 0] = True  # every query may attend to at least one key
        else:
            mask = None
        mask_text = "no mask" if mask is None else f"mask {tuple(mask.shape)}"
        cases.append(Case(f"{note}: q {describe(q)}, k {describe(k)}, v {describe(v)}, {mask_text}",
                          (q, k, v, grad_out, mask)))
    return cases


def _backward_explain(got, want, case) -> str | None:
    names = ("grad_q", "grad_k", "grad_v")
    inputs = ("q", "k", "v")
    for name, source, g, w in zip(names, inputs, got, want):
        if g.shape != w.shape:
            if name != "grad_q" and g.dim() == w.dim() and g.shape[-3] != w.shape[-3]:
                return (f"{name} must have {source}'s shape {tuple(w.shape)}: {source} has n_kv_heads heads, and "
                        f"each of its heads is read by n_rep query heads, so its gradient SUMS the "
                        f"contributions of those query heads.")
            return f"{name} must have the shape of {source}, {tuple(w.shape)}; it has shape {tuple(g.shape)}."
    return None


ATTENTION_BACKWARD = Task(
    name="attention_backward", reference=ref.attention_backward, cases=_backward_cases, seed=303,
    rtol=1e-4, atol=1e-5, explain=_backward_explain,
    output=TupleOutput([TensorOutput("the dtype of q"), TensorOutput("the dtype of k"),
                        TensorOutput("the dtype of v")], ["grad_q", "grad_k", "grad_v"]),
    mistakes=[
        Mistake("the softmax's backward is missing its second term: dS = P ⊙ (dP − rowsum(dP ⊙ P)). Each "
                "weight depends on every score of its row, because the row is normalised.",
                lambda *a: _backward_variant(*a, rowsum=False)),
        Mistake("the second term of the softmax's backward has the wrong sign: dS = P ⊙ (dP − rowsum(dP ⊙ P)).",
                lambda *a: _backward_variant(*a, sign=-1.0)),
        Mistake("the row sum in dS = P ⊙ (dP − rowsum(dP ⊙ P)) runs over the wrong dimension: sum over the "
                "keys, the last dimension, one number per query.",
                lambda *a: _backward_variant(*a, rowsum_dim=-2)),
        Mistake("the scale 1/√d_k is missing from grad_q and grad_k: S = Q Kᵀ / √d_k, so the chain rule "
                "carries it into both.", lambda *a: _backward_variant(*a, scale_q=False, scale_k=False)),
        Mistake("the scale 1/√d_k is missing from grad_q: S = Q Kᵀ / √d_k, so dQ = dS K / √d_k.",
                lambda *a: _backward_variant(*a, scale_q=False)),
        Mistake("the scale 1/√d_k is missing from grad_k: S = Q Kᵀ / √d_k, so dK = dSᵀ Q / √d_k.",
                lambda *a: _backward_variant(*a, scale_k=False)),
        Mistake("grad_v should be Pᵀ dO: value j receives the output gradient of every query i, weighted by "
                "P[i, j].", lambda *a: _backward_variant(*a, p_transposed=False)),
        Mistake("grad_k should be dSᵀ Q: key j receives the score gradient of every query i.",
                lambda *a: _backward_variant(*a, s_transposed=False)),
        Mistake("each kv head's gradient must sum over the query heads that share it: query heads g · n_rep … "
                "g · n_rep + n_rep − 1 read kv head g (as repeat_interleave grouped them). Your sum groups "
                "heads h, h + n_kv_heads, … instead.", lambda *a: _backward_variant(*a, reduce="tiled")),
        Mistake("the forward pass groups the heads as .repeat does (query head h reading kv head "
                "h % n_kv_heads); query head h reads kv head h // n_rep, as repeat_interleave groups them.",
                lambda *a: _backward_variant(*a, kv_of="tiled", reduce="tiled")),
        Mistake("each kv head's gradient is the SUM of the contributions of its n_rep query heads, not their "
                "mean: each of them used the kv head, and the gradients of all uses add.",
                lambda *a: _backward_variant(*a, reduce="mean")),
        Mistake("grad_k and grad_v keep only the first query head of each group: the kv head is read by "
                "all n_rep of them, and their gradients add.", lambda *a: _backward_variant(*a, reduce="first")),
        Mistake("the mask is missing from the forward computation of P: blocked keys must get weight 0 "
                "(scores at -inf before the softmax), and so receive no gradient.",
                lambda *a: _backward_variant(*a, forward_mask=False)),
        Mistake("the mask is missing from the forward computation of P: zeroing the gradient of the blocked "
                "scores afterwards is not enough, because without the mask the softmax gave those keys weight "
                "and took it from the others. Set blocked scores to -inf before the softmax.",
                lambda *a: _backward_variant(*a, forward_mask=False, mask_grad=True)),
    ],
    forbid=Forbid(operations=("attention",), modules=(ref,), autograd=True),
    hint="Check each of your formulas against autograd on a single head without a mask, then with a mask, "
         "then with grouped heads (the self-check does this).",
)

check_attention_backward = ATTENTION_BACKWARD.checker(
    """Check ``attention_backward(q, k, v, grad_out, mask=None) -> (grad_q, grad_k, grad_v)``: the
    gradients of L through O = softmax(Q Kᵀ/√d_k, masked) V given grad_out = ∂L/∂O, q with H heads and k,
    v with H_kv heads (query head h reading kv head h // (H / H_kv)), without autograd.""")


# --- Task 4: predictions ----------------------------------------------------------------------------------


# Wrong predictions that reveal a specific misunderstanding, key by key.
_WRONG_PREDICTIONS = {
    "kv_head": [
        (0.0, "that is 9 % 3, the tiled layout of .repeat. Each kv head serves n_rep = 12 / 3 = 4 CONSECUTIVE "
              "query heads."),
        (3.0, "that divides by n_kv_heads; divide the head index by n_rep, the number of query heads per kv "
              "head."),
    ],
    "score_std": [
        (256.0, "256 is the variance of q · k; the standard deviation is its square root."),
        (1.0, "that is the spread AFTER dividing by √d_k; the question asks about the raw dot product."),
        (8.0, "a sum of d_k unit-variance terms has variance d_k: its standard deviation is √d_k."),
    ],
    "causal_uniform_weight": [
        (0.1, "the causal mask lets the query at position 4 see only keys 0 … 4, not all ten."),
        (0.25, "a query may attend to its own position: keys 0 … 4 are five keys."),
        (1.0, "equal scores give equal weights to every allowed key, not all the weight to one."),
    ],
    "score_gib": [
        (4.0, "float32 takes 4 bytes per number (2 is bfloat16)."),
        (0.25, "the score tensor has one T × S matrix per head: multiply by the 32 heads."),
        (8.589934592, "that is in GB (10⁹ bytes); a GiB is 2³⁰ bytes."),
        (2.0, "count the bytes: 32 heads × 8192 × 8192 scores × 4 bytes each, divided by 2³⁰."),
    ],
}


def _true_predictions() -> dict[str, float]:
    n_heads, n_kv_heads, head = 12, 3, 9
    d_k = 256
    return {
        "kv_head": float(head // (n_heads // n_kv_heads)),
        "score_std": math.sqrt(d_k),
        "causal_uniform_weight": 1 / 5,
        "score_gib": 32 * 8192 * 8192 * 4 / 2**30,
    }


ATTENTION_PREDICTIONS = predictions_task(
    truth=_true_predictions,
    wrong=_WRONG_PREDICTIONS,
    seed=304,
    rtol=1e-3,
    atol=1e-3,
    forbid=Forbid(modules=(ref,), models=True),
    advice="Work it out on paper first, then run the experiment below.",
)

check_attention_predictions = ATTENTION_PREDICTIONS.checker(
    """Check ``predictions() -> dict``: the kv head of a query head, the spread of raw scores, a causal
    weight under equal scores, and the size of a score tensor.""")
