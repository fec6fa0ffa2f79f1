"""Checkers for exercise 07 (the decoder block).

1. ``packed_block`` — find and fix the bug in a given pre-norm block for packed rows (several
   documents laid end to end in one row): its document mask replaces the causal mask instead of
   restricting it, so every token sees the rest of its own document, future included.
2. ``pre_norm_block_backward`` — derive ∂L/∂x through a pre-norm block, (I + J_Attn J_N₁) and
   (I + J_FFN J_N₂), given the sublayers' backward passes: the norms' transposed Jacobians by
   hand, no autograd.
3. ``res_post_norm_block_backward`` — extend it to the block that normalizes what each sublayer
   writes (Swin Transformer V2, OLMo 2): the same parts, chained in another order.
4. ``predictions`` — predict four numbers about blocks before computing them.

The student's functions receive the block's parts, not weights: the norms ``attn_norm`` and
``ffn_norm`` (modules with their own random gains, so that swapping them shows), and either the
attention and FFN modules (task 1: ``attn(h, cos, sin, mask)``, ``ffn(h)``) or, for the backward
passes, functions of one argument with RoPE and the causal mask built in (``attn(u)``,
``ffn(u)``) and their backward passes ``attn_backward(u, g)`` and ``ffn_backward(u, g)``, which
return g · ∂F/∂u. The given parts run unwatched (they are the checker's, not the student's code);
building the block from course_lib's or torch's own block classes is refused, and so are, in the
backward tasks, automatic differentiation and course_lib's norm functions.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .. import block as block_ref
from .. import norms as norms_ref
from .. import residual as residual_ref
from ..attention import GroupedQueryAttention
from ..config import ModelConfig
from ..ffn import FeedForward, SwiGLU
from ..norms import LayerNorm, RMSNorm
from ..positional import rope_cos_sin
from ._predictions import predictions_task
from ._core import Case, Forbid, Mistake, Task, describe
from ._watch import paused

__all__ = ["check_packed_block", "check_pre_norm_block_backward", "check_res_post_norm_block_backward",
           "check_block_predictions"]

_FORBID = Forbid(modules=(block_ref, residual_ref),
                 functions=((nn.TransformerEncoderLayer.forward, "torch.nn.TransformerEncoderLayer"),
                            (nn.TransformerDecoderLayer.forward, "torch.nn.TransformerDecoderLayer")))
_FORBID_BACKWARD = Forbid(modules=(block_ref, residual_ref, norms_ref), autograd=True,
                          functions=_FORBID.functions)


class _Given(nn.Module):
    """A module handed to the student: it runs unwatched, so that the course code inside it (the
    norm, the attention, the FFN) is not taken for the student's."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, *args, **kwargs):
        with paused():
            return self.inner(*args, **kwargs)

    def __getattr__(self, name: str):
        """The given module's attributes (attn.n_heads, norm.eps) read through."""
        if name.startswith("_") or name == "inner":
            return super().__getattr__(name)
        return getattr(super().__getattr__("inner"), name)


def _given_function(f):
    """A function handed to the student, run unwatched (like a given module)."""
    def given(*args, **kwargs):
        with paused():
            return f(*args, **kwargs)
    return given


def _backward_of(f):
    """The backward pass of f at u: g ↦ g · ∂f/∂u (a vector-Jacobian product, by autograd)."""
    def backward(u, g):
        with torch.enable_grad():
            u_ = u.detach().requires_grad_(True)
            (grad,) = torch.autograd.grad(f(u_), u_, g)
        return grad.detach()
    return backward


# --- the cases: random components of many shapes and kinds ---------------------------------------------

def _components(gen: torch.Generator, *, B: int, T: int, D: int, H: int, H_kv: int, D_h: int, F: int,
                norm: str, ffn: str, rope: bool, dtype: torch.dtype, start: int = 0):
    """x, attn_norm, attn, ffn_norm, ffn, cos, sin and a label that names shapes and kinds only."""
    def randn(*shape):
        return torch.randn(shape, generator=gen, dtype=torch.float64)

    def make_norm():
        module = RMSNorm(D, eps=1e-6) if norm == "rms" else LayerNorm(D, eps=1e-5)
        with torch.no_grad():  # gains far from 1 and from each other: a swapped norm must show
            module.weight.copy_(0.5 + torch.rand(D, generator=gen, dtype=torch.float64))
            if getattr(module, "bias", None) is not None:
                module.bias.copy_(0.2 * randn(D))
        return module

    attn_norm, ffn_norm = make_norm(), make_norm()
    attn = GroupedQueryAttention(D, H, H_kv, head_dim=D_h)
    mlp = SwiGLU(D, F) if ffn == "swiglu" else FeedForward(D, F, activation=ffn)
    with torch.no_grad():
        for module in (attn, mlp):
            for linear in module.children():  # every projection: N(0, 1/fan_in) · 1.5
                fan_in = linear.weight.shape[1]
                linear.weight.copy_(1.5 * randn(*linear.weight.shape) / fan_in**0.5)
    for module in (attn_norm, ffn_norm, attn, mlp):
        module.requires_grad_(False)  # the tasks differentiate with respect to x only
    modules = [_Given(m.to(dtype)) for m in (attn_norm, attn, ffn_norm, mlp)]
    x = (3.0 * randn(B, T, D)).to(dtype)  # a stream of RMS about 3: normalising it changes it
    cos = sin = None
    if rope:
        cos, sin = rope_cos_sin(torch.arange(start, start + T), D_h, dtype=dtype)  # (T, D_h/2)
    kinds = {"rms": "RMSNorm", "layer": "LayerNorm"}
    ffn_kind = {"swiglu": "a SwiGLU FFN", "gelu": "a GELU FFN", "relu": "a ReLU FFN"}[ffn]
    heads = f"{H} query heads and {H_kv} kv heads of width {D_h}"
    where = f"RoPE tables of shape {tuple(cos.shape)}" if rope else "no RoPE (cos = sin = None)"
    label = f"x: {describe(x)}, {kinds[norm]}, attention with {heads}, {ffn_kind} of width {F}, {where}"
    return (x, modules[0], modules[1], modules[2], modules[3], cos, sin), label


_SHAPES = [
    # B, T, D, H, H_kv, D_h, F, norm, ffn, rope, dtype, what
    (2, 6, 32, 4, 2, 8, 48, "rms", "swiglu", True, torch.float64, "Llama's components"),
    (1, 9, 24, 6, 3, 4, 40, "rms", "swiglu", True, torch.float64, "a longer sequence"),
    (3, 5, 16, 4, 4, 4, 32, "rms", "swiglu", True, torch.float64, "multi-head attention"),
    (2, 4, 16, 4, 1, 6, 24, "rms", "swiglu", True, torch.float64, "multi-query attention, D_h ≠ D/H"),
    (2, 1, 32, 4, 2, 8, 48, "rms", "swiglu", True, torch.float64, "a single position"),
    (2, 7, 32, 4, 2, 8, 64, "layer", "gelu", False, torch.float64, "a GPT-style block"),
    (1, 6, 16, 2, 2, 8, 32, "layer", "relu", True, torch.float64, "LayerNorm with a ReLU FFN"),
    (2, 6, 32, 4, 2, 8, 48, "rms", "swiglu", True, torch.float32, "float32"),
]


def _attn(attn, h, cos, sin, rope=True):
    return attn(h, cos, sin) if rope else attn(h)


def _no_grad(compute):
    def run(*args):
        with torch.no_grad():
            return compute(*args)
    return run


# --- Task 1: the pre-norm block on packed rows (find and fix) -----------------------------------------

def _runs(ids: torch.Tensor) -> list[tuple[int, int]]:
    """The [start, end) of each run of equal ids along a row."""
    cuts = [0] + [t for t in range(1, len(ids)) if ids[t] != ids[t - 1]] + [len(ids)]
    return list(zip(cuts[:-1], cuts[1:]))


def _layout(gen: torch.Generator, B: int, T: int, row: int) -> torch.Tensor:
    """Document ids (B, T): each row its own split into contiguous documents, with ids that are
    neither sorted nor consecutive; the first row of a case with T ≥ 3 always holds a one-token
    document and another of several tokens."""
    ids = torch.empty(B, T, dtype=torch.long)
    for b in range(B):
        if T == 1:
            n_docs, cuts = 1, []
        elif b == 0 and T >= 3:
            cuts = [1, 1 + int(torch.randint(1, T - 1, (1,), generator=gen))]
            cuts = sorted(set(c for c in cuts if c < T))
        else:
            n_docs = int(torch.randint(1 if (b + row) % 3 == 0 else 2, min(T, 3) + 1, (1,), generator=gen))
            cuts = sorted(torch.randperm(T - 1, generator=gen)[:n_docs - 1].add(1).tolist())
        labels = torch.randperm(50, generator=gen)[:len(cuts) + 1] + 3
        bounds = [0] + cuts + [T]
        for k, (s, e) in enumerate(zip(bounds[:-1], bounds[1:])):
            ids[b, s:e] = labels[k]
    return ids


def _packed_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for i, (B, T, D, H, H_kv, D_h, F, norm, ffn, rope, dtype, what) in enumerate(_SHAPES):
        (x, n1, attn, n2, mlp, cos, sin), label = _components(
            gen, B=B, T=T, D=D, H=H, H_kv=H_kv, D_h=D_h, F=F, norm=norm, ffn=ffn, rope=rope, dtype=dtype,
            start=0)
        doc_ids = _layout(gen, B, T, i)
        n_docs = [len(_runs(row)) for row in doc_ids]
        docs = f"rows holding {', '.join(map(str, n_docs))} document(s)"
        cases.append(Case(f"{what}: {label}, doc_ids of shape {tuple(doc_ids.shape)} ({docs})",
                          (x, doc_ids, n1, attn, n2, mlp, cos, sin)))
    return cases


def _packed_reference(x, doc_ids, n1, attn, n2, ffn, cos, sin):
    """Each document of each row through the pre-norm block on its own: what packing must give."""
    out = torch.empty_like(x)
    with torch.no_grad():
        for b in range(x.shape[0]):
            for s, e in _runs(doc_ids[b]):
                part = x[b:b + 1, s:e]  # (1, L, D)
                c, si = (cos[s:e], sin[s:e]) if cos is not None else (None, None)
                h = part + attn(n1(part), c, si)
                out[b:b + 1, s:e] = h + ffn(n2(h))
    return out


def _packed(x, doc_ids, n1, attn, n2, ffn, cos, sin, *, mask="doc and causal", first_row=False, rope=True,
            ffn_in="h"):
    """The packed block with one part changed, as a student's slip would change it."""
    T = x.shape[1]
    ids = doc_ids[:1].expand_as(doc_ids) if first_row else doc_ids
    same = ids[:, :, None] == ids[:, None, :]  # (B, T, T)
    causal = torch.ones(T, T, dtype=torch.bool).tril()  # (T, T): key ≤ query
    masks = {"doc": same, "doc and causal": same & causal, "doc or causal": same | causal,
             "doc and future": same & causal.T, "doc and strictly earlier": same & causal.tril(-1),
             "causal": None}
    m = masks[mask]
    m = m[:, None] if m is not None else None  # (B, 1, T, T)
    c, s = (cos, sin) if rope else (None, None)
    h = x + attn(n1(x), c, s, m)
    return h + ffn(n2(h if ffn_in == "h" else x))


def _pk(**knobs):
    return _no_grad(lambda *a: _packed(*a, **knobs))


def _rope_only(compute):
    """A mistake that only exists when there are RoPE tables to forget."""
    def run(*args):
        if args[-2] is None:
            raise ValueError("no RoPE in this case")
        return compute(*args)
    return run


PACKED_BLOCK = Task(
    name="packed_block", reference=_packed_reference, cases=_packed_cases, seed=707, rtol=1e-4, atol=1e-5,
    mistakes=[
        Mistake("this is still what the given version computes: every token sees its whole document, the "
                "tokens after it included, so a packed row is not causal any more. Read what `attn` does with a "
                "mask you pass it: is it combined with the causal mask, or used instead of it?", _pk(mask="doc")),
        Mistake("attention is plain causal over the whole row: tokens attend to the documents before their own. "
                "Each token may attend only to earlier tokens (itself included) of its OWN document.",
                _pk(mask="causal")),
        Mistake("the mask lets a token attend to its document OR to every earlier position: both conditions "
                "must hold (same document AND not in the future).", _pk(mask="doc or causal")),
        Mistake("the mask lets each token attend to the FUTURE of its document, not its past (True = may "
                "attend, and a key may be attended when its position is ≤ the query's).",
                _pk(mask="doc and future")),
        Mistake("a token may not attend to itself in your mask: the causal condition is key position ≤ query "
                "position, diagonal included (the first token of a document has nothing else to attend to).",
                _pk(mask="doc and strictly earlier")),
        Mistake("every row gets the documents of the first row: each row of a batch is packed differently, so "
                "the mask is built from each row's own doc_ids.", _pk(first_row=True)),
        Mistake("the FFN reads the block's input x instead of h = x + attention's output.", _pk(ffn_in="x")),
    ] + [Mistake("attention was called without the RoPE tables, so it ignores positions: call attn(h, cos, sin, "
                 "mask).", _rope_only(_pk(rope=False)))],
    forbid=_FORBID,
    hint="Run each document of a row on its own and compare with your packed output position by position.",
)

check_packed_block = PACKED_BLOCK.checker(
    """Check ``packed_block(x, doc_ids, attn_norm, attn, ffn_norm, ffn, cos, sin)``: the pre-norm block on
    rows that pack several documents, equal to each document run through the block on its own.""")


# --- the backward tasks: shared parts ----------------------------------------------------------------------

_RMS_SHAPES = [s for s in _SHAPES if s[7] == "rms"]


def _backward_cases(gen: torch.Generator) -> list[Case]:
    """(x, grad_out, attn_norm, attn, attn_backward, ffn_norm, ffn, ffn_backward): RMSNorm blocks, the
    sublayers as functions of one argument (RoPE tables and the causal mask built in)."""
    cases = []
    for i, (B, T, D, H, H_kv, D_h, F, norm, ffn, rope, dtype, what) in enumerate(_RMS_SHAPES):
        (x, n1, attn, n2, mlp, cos, sin), label = _components(
            gen, B=B, T=T, D=D, H=H, H_kv=H_kv, D_h=D_h, F=F, norm=norm, ffn=ffn, rope=rope, dtype=dtype,
            start=3 * i)
        if what == "multi-head attention":  # a large ε, so that one left out of r shows
            n1.inner.eps = n2.inner.eps = 0.5
            label += ", both norms with eps = 0.5"
        attn_fn = (lambda a, c, s: lambda u: a(u, c, s))(attn, cos, sin)
        ffn_fn = (lambda f: lambda u: f(u))(mlp)
        grad_out = torch.randn(x.shape, generator=gen, dtype=torch.float64).to(dtype)
        given = [_given_function(f) for f in (attn_fn, _backward_of(attn_fn), ffn_fn, _backward_of(ffn_fn))]
        cases.append(Case(f"{what}: {label}, grad_out of x's shape",
                          (x, grad_out, n1, given[0], given[1], n2, given[2], given[3])))
    return cases


def _norm_vjp(norm, x, v, *, transpose=True, projection=True, over_d=True, sign=1.0, eps_in_r=True):
    """v · ∂RMSNorm/∂x at x (the gradient through the norm), with one knob turned."""
    w, eps = norm.weight, norm.eps
    r = torch.sqrt(x.pow(2).mean(-1, keepdim=True) + (eps if eps_in_r else 0.0))  # (..., 1)
    x_hat = x / r
    if not transpose:  # J v instead of Jᵀ v: the gain applied after the projection
        return w * (v - x_hat * (x_hat * v).mean(-1, keepdim=True)) / r
    wv = w * v
    if not projection:  # the norm taken for a constant scale 1/r
        return wv / r
    dot = (x_hat * wv).mean(-1, keepdim=True) if over_d else (x_hat * wv).sum(-1, keepdim=True)
    return (wv - sign * x_hat * dot) / r


def _autograd_reference(forward):
    def reference(x, g, n1, attn, attn_bwd, n2, ffn, ffn_bwd):
        with torch.enable_grad():
            x_ = x.detach().requires_grad_(True)
            (grad,) = torch.autograd.grad(forward(x_, n1, attn, n2, ffn), x_, g)
        return grad.detach()
    return reference


def _pre_forward(x, n1, attn, n2, ffn):
    h = x + attn(n1(x))
    return h + ffn(n2(h))


def _res_post_forward(x, n1, attn, n2, ffn):
    h = x + n1(attn(x))
    return h + n2(ffn(h))


# --- Task 2: the pre-norm block's backward pass (derive) -------------------------------------------------

def _pre_bw(x, g, n1, attn, attn_bwd, n2, ffn, ffn_bwd, *, skip_h=True, skip_x=True, attn_gets="g_h",
            n2_at="h", ffn_at="n2(h)", attn_at="n1(x)", swap=False, no_norm=False, norm=None):
    """∂L/∂x through h = x + Attn(N₁(x)), out = h + FFN(N₂(h)), with one part changed."""
    norm = norm or {}
    na, nf = (n2, n1) if swap else (n1, n2)
    u1 = n1(x)
    h = x + attn(u1)
    u2 = n2(h)
    v = ffn_bwd({"n2(h)": u2, "h": h}[ffn_at], g)  # g · J_FFN
    through_ffn = v if no_norm else _norm_vjp(nf, {"h": h, "x": x}[n2_at], v, **norm)
    g_h = (g if skip_h else 0.0) + through_ffn
    v = attn_bwd({"n1(x)": u1, "x": x}[attn_at], {"g_h": g_h, "g": g}[attn_gets])  # · J_Attn
    through_attn = v if no_norm else _norm_vjp(na, x, v, **norm)
    return (g_h if skip_x else 0.0) + through_attn


def _pb(**knobs):
    return lambda *a: _pre_bw(*a, **knobs)


PRE_NORM_BLOCK_BACKWARD = Task(
    name="pre_norm_block_backward", reference=_autograd_reference(_pre_forward), cases=_backward_cases,
    seed=708, rtol=1e-4, atol=1e-6,
    mistakes=[
        Mistake("the skip connection around the FFN is missing from the gradient at h: out = h + FFN(N₂(h)), so "
                "∂L/∂h = grad_out + (the part through N₂ and the FFN).", _pb(skip_h=False)),
        Mistake("the skip connection around attention is missing from the gradient at x: h = x + Attn(N₁(x)), "
                "so ∂L/∂x = ∂L/∂h + (the part through N₁ and attention).", _pb(skip_x=False)),
        Mistake("attention's backward pass receives grad_out; it must receive ∂L/∂h, which also carries what "
                "flows back through the FFN (attention's output is added to h, and the FFN reads h).",
                _pb(attn_gets="g")),
        Mistake("the norms are left out of the backward pass: each sublayer read N(stream), so its gradient "
                "goes back through the norm's Jacobian before it reaches the stream.", _pb(no_norm=True)),
        Mistake("each norm is treated as a constant scale γ / r: r depends on the stream too, so the gradient "
                "through a norm has a second term, the one through r (∂r/∂x_j = x_j / (D r)).",
                _pb(norm={"projection": False})),
        Mistake("through the norms you multiplied by J instead of Jᵀ. γ_i scales row i of the norm's "
                "Jacobian, so in the backward pass it multiplies the incoming gradient first: start from γ ⊙ v.",
                _pb(norm={"transpose": False})),
        Mistake("the term through r must average over the D features (a mean, not a sum): "
                "∂r/∂x_j = x_j / (D r).", _pb(norm={"over_d": False})),
        Mistake("the term through r has the wrong sign: a larger x_j makes r larger, which shrinks every "
                "normalized entry, so it is subtracted.", _pb(norm={"sign": -1.0})),
        Mistake("r must include ε, as in the forward pass: r = sqrt(mean(x²) + ε) (norm.eps).",
                _pb(norm={"eps_in_r": False})),
        Mistake("the norms are swapped in the backward pass: the FFN read ffn_norm(h), attention read "
                "attn_norm(x), and each gradient goes back through the norm its sublayer read.", _pb(swap=True)),
        Mistake("the FFN's norm is differentiated at x: N₂ normalized h = x + Attn(N₁(x)), so its Jacobian is "
                "taken at h.", _pb(n2_at="x")),
        Mistake("a sublayer's backward pass is evaluated at the raw stream; each sublayer read the normalized "
                "copy, so call ffn_backward(N₂(h), ·) and attn_backward(N₁(x), ·).",
                _pb(ffn_at="h", attn_at="x")),
        Mistake("the FFN's backward pass is evaluated at h: the FFN read N₂(h), so call ffn_backward(N₂(h), ·).",
                _pb(ffn_at="h")),
        Mistake("attention's backward pass is evaluated at x: attention read N₁(x), so call "
                "attn_backward(N₁(x), ·).", _pb(attn_at="x")),
    ],
    forbid=_FORBID_BACKWARD,
    hint="Go backwards one step at a time: first through out = h + FFN(N₂(h)) to get ∂L/∂h, then through "
         "h = x + Attn(N₁(x)); at each step, the skip connection's term plus the sublayer's backward pass "
         "followed by the norm's transposed Jacobian, each evaluated where the forward pass used it.",
)

check_pre_norm_block_backward = PRE_NORM_BLOCK_BACKWARD.checker(
    """Check ``pre_norm_block_backward(x, grad_out, attn_norm, attn, attn_backward, ffn_norm, ffn,
    ffn_backward)``: ∂L/∂x through h = x + attn(attn_norm(x)), out = h + ffn(ffn_norm(h)), the norms'
    backward passes by hand, without autograd.""")


# --- Task 3: the res-post-norm block's backward pass (extend) ---------------------------------------------

def _res_post_bw(x, g, n1, attn, attn_bwd, n2, ffn, ffn_bwd, *, skip_h=True, skip_x=True, attn_gets="g_h",
                 norm_at="write", sub_at="stream", order="norm first", swap=False, no_norm=False, norm=None):
    """∂L/∂x through h = x + N₁(Attn(x)), out = h + N₂(FFN(h)), with one part changed."""
    norm = norm or {}
    na, nf = (n2, n1) if swap else (n1, n2)
    a = attn(x)
    h = x + n1(a)
    f = ffn(h)

    def through(nrm, write, stream, sub_bwd, v):
        at = {"write": write, "stream": stream}[norm_at]
        read = {"stream": stream, "normed": nrm(stream)}[sub_at]
        if no_norm:
            return sub_bwd(read, v)
        if order == "norm first":  # v · J_N(write) · J_F(stream)
            return sub_bwd(read, _norm_vjp(nrm, at, v, **norm))
        return _norm_vjp(nrm, at, sub_bwd(read, v), **norm)  # the chain taken in the forward order

    g_h = (g if skip_h else 0.0) + through(nf, f, h, ffn_bwd, g)
    g_x_attn = through(na, a, x, attn_bwd, {"g_h": g_h, "g": g}[attn_gets])
    return (g_h if skip_x else 0.0) + g_x_attn


def _rb(**knobs):
    return lambda *a: _res_post_bw(*a, **knobs)


def _as_pre_norm(x, g, n1, attn, attn_bwd, n2, ffn, ffn_bwd):
    """Task 2's answer, handed in for task 3."""
    return _pre_bw(x, g, n1, attn, attn_bwd, n2, ffn, ffn_bwd)


RES_POST_NORM_BLOCK_BACKWARD = Task(
    name="res_post_norm_block_backward", reference=_autograd_reference(_res_post_forward),
    cases=_backward_cases, seed=709, rtol=1e-4, atol=1e-6,
    mistakes=[
        Mistake("this is the PRE-norm block's backward pass (task 2). Here the norm comes after the sublayer: "
                "h = x + N₁(Attn(x)), so the sublayer read the stream itself and the norm normalized its output.",
                _as_pre_norm),
        Mistake("the norms' Jacobians are taken at the stream. Each norm normalized what its sublayer wrote: "
                "take N₁'s at Attn(x) and N₂'s at FFN(h).", _rb(norm_at="stream")),
        Mistake("a sublayer's backward pass is evaluated at a normalized copy of the stream: in this block the "
                "sublayers read the stream itself, attn(x) and ffn(h).", _rb(sub_at="normed")),
        Mistake("the chain is taken in the wrong order: going backwards, the gradient meets the norm first "
                "(it came last in the forward pass), then the sublayer: v · J_N · J_F, not v · J_F · J_N.",
                _rb(order="sublayer first")),
        Mistake("the norms are left out of the backward pass: each write went through a norm, whose Jacobian "
                "the gradient must cross before the sublayer's.", _rb(no_norm=True)),
        Mistake("the skip connection around the FFN is missing from the gradient at h: out = h + N₂(FFN(h)), so "
                "∂L/∂h = grad_out + (the part through N₂ and the FFN).", _rb(skip_h=False)),
        Mistake("the skip connection around attention is missing from the gradient at x: h = x + N₁(Attn(x)).",
                _rb(skip_x=False)),
        Mistake("attention's path receives grad_out; it must receive ∂L/∂h, which also carries what flows back "
                "through the FFN.", _rb(attn_gets="g")),
        Mistake("each norm is treated as a constant scale γ / r: r depends on the normalized vector too, so the "
                "gradient through a norm has a second term, the one through r.", _rb(norm={"projection": False})),
        Mistake("through the norms you multiplied by J instead of Jᵀ: γ multiplies the incoming gradient first.",
                _rb(norm={"transpose": False})),
        Mistake("the norms are swapped in the backward pass: attention's write went through attn_norm, the "
                "FFN's through ffn_norm.", _rb(swap=True)),
    ],
    forbid=_FORBID_BACKWARD,
    hint="Write the forward pass with names (a = attn(x), h = x + N₁(a), f = ffn(h), out = h + N₂(f)) and "
         "go backwards through it one step at a time.",
)

check_res_post_norm_block_backward = RES_POST_NORM_BLOCK_BACKWARD.checker(
    """Check ``res_post_norm_block_backward(x, grad_out, attn_norm, attn, attn_backward, ffn_norm, ffn,
    ffn_backward)``: ∂L/∂x through h = x + attn_norm(attn(x)), out = h + ffn_norm(ffn(h)), without
    autograd.""")


# --- Task 4: predictions ---------------------------------------------------------------------------------

_D_PRED = 64


def _silenced_post_block_jacobian() -> tuple[torch.Tensor, torch.Tensor]:
    """(J, x): the Jacobian ∂out/∂x (D × D, one position) of a post-norm block whose W_O and W_down are 0,
    RMSNorm gains 1 and ε = 0, at a stream x of RMS 4."""
    config = ModelConfig(vocab_size=1, d_model=_D_PRED, n_layers=1, n_heads=4, n_kv_heads=2, d_ff=172,
                         placement="post", positional="none")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        block = block_ref.TransformerBlock(config).double()
        x = torch.randn(1, 1, _D_PRED, dtype=torch.float64)
    with torch.no_grad():
        block.attn.w_o.weight.zero_()
        block.ffn.w_down.weight.zero_()
    block.attn_norm.eps = block.ffn_norm.eps = 0.0
    x = 4 * x / x.pow(2).mean().sqrt()  # RMS 4
    jac = torch.autograd.functional.jacobian(lambda v: block(v), x)  # (1, 1, D, 1, 1, D)
    return jac.reshape(_D_PRED, _D_PRED), x.reshape(_D_PRED)


_WRONG_PREDICTIONS = {
    "res_post_rms": [
        (5.0, "RMS values do not add: for writes uncorrelated with the stream and with each other, the mean "
              "squares add."),
        (1.0, "this block never normalizes the stream, only what each sublayer writes."),
        (3.0, "the writes are normalized, not silenced: each adds a vector of RMS 1 to the stream."),
        (10.0 ** 0.5, "count the writes: attention and the FFN each add one."),
        (11.0, "that is the mean square; the question asks for the root mean square."),
    ],
    "post_block_gain": [
        (1 / 16, "the second norm reads the first norm's output, whose RMS is 1: it does not divide by 4 "
                 "again."),
        (1.0, "in a post-norm block every path, the skip connection's included, goes through the norms: the "
              "first one divides by the RMS of the stream it normalizes."),
        (4.0, "the ratio is upside down: a norm of a large vector shrinks gradients."),
        (0.0, "only the direction of x itself is lost through a norm; a gradient orthogonal to x gets through "
              "it, scaled."),
    ],
    "silenced_post_rank": [
        (float(_D_PRED), "RMSNorm ignores the length of its input, so the direction of x itself is mapped to 0: "
                         "the Jacobian is singular."),
        (float(_D_PRED - 2), "the second norm's input is the first norm's output, parallel to x: both norms "
                             "lose the same direction, not two different ones."),
        (0.0, "only one direction is lost; every direction orthogonal to x gets through, scaled."),
    ],
    "packed_allowed": [
        (36.0, "that is the causal mask of the whole row: no token may attend to the other document."),
        (34.0, "that is the document mask alone (3² + 5²): the mask must stay causal within each document."),
        (28.0, "a token may attend to itself: the causal condition includes the diagonal."),
        (13.0, "a token may attend to itself: the causal condition includes the diagonal."),
        (15.0, "count both documents: 3 · 4 / 2 pairs in the first as well."),
        (6.0, "count both documents: 5 · 6 / 2 pairs in the second as well."),
    ],
}


def _true_predictions() -> dict[str, float]:
    jac, x = _silenced_post_block_jacobian()
    g = torch.randn(_D_PRED, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    g = g - (g @ x) / (x @ x) * x  # a gradient orthogonal to x
    doc_ids = torch.tensor([0] * 3 + [1] * 5)  # T = 8: documents of 3 and 5 tokens
    same = doc_ids[:, None] == doc_ids[None, :]
    causal = torch.ones(8, 8, dtype=torch.bool).tril()
    return {
        "res_post_rms": math.sqrt(3.0**2 + 1.0**2 + 1.0**2),  # stream² + two normalized writes², uncorrelated
        "post_block_gain": float((g @ jac).norm() / g.norm()),  # a row gradient crosses as g · J
        "silenced_post_rank": float(torch.linalg.matrix_rank(jac)),
        "packed_allowed": float((same & causal).sum()),
    }


BLOCK_PREDICTIONS = predictions_task(
    truth=_true_predictions,
    wrong=_WRONG_PREDICTIONS,
    seed=710,
    rtol=1e-3,
    atol=1e-9,
    advice="Work it out on paper first, then run the experiment below.",
)

check_block_predictions = BLOCK_PREDICTIONS.checker(
    """Check ``predictions() -> dict``: the output RMS of a res-post-norm block, the gain and the rank of a
    silenced post-norm block's Jacobian, and the number of True entries of a packed row's mask.""")
