"""Checkers for exercise 07 (the decoder block).

1. ``res_post_norm_block`` — extend the block to the variant that normalizes each sublayer's
   output before adding it (Swin Transformer V2, OLMo 2): h = x + Norm₁(Attn(x)), …
2. ``parallel_block`` — extend it to the parallel block of GPT-J and PaLM: one norm, both
   sublayers read it, both outputs are added to x.
3. ``pre_norm_block`` — find and fix the bug in a given pre-norm block (its two norms are
   swapped, which a test with freshly initialised gains cannot see).
4. ``predictions`` — predict four numbers about a block before computing them.

The student's functions receive modules, not weights: ``attn_norm`` and ``ffn_norm`` (RMSNorm or
LayerNorm, with different random gains so that swapping them shows), ``attn`` (grouped-query
attention, called as ``attn(h, cos, sin)``), ``ffn`` (SwiGLU, GELU or ReLU) and the RoPE tables
``cos`` and ``sin`` (None in the cases without RoPE). The given modules run unwatched (they are
the checker's, not the student's code); building the block from course_lib's or torch's own
block classes is refused.
"""

from __future__ import annotations


import torch
from torch import nn

from .. import block as block_ref
from .. import residual as residual_ref
from ..attention import GroupedQueryAttention
from ..block import TransformerBlock
from ..config import ModelConfig
from ..ffn import FeedForward, SwiGLU
from ..norms import LayerNorm, RMSNorm
from ..positional import rope_cos_sin
from ._predictions import predictions_task
from ._core import Case, Forbid, Mistake, Task, describe
from ._watch import paused

__all__ = ["check_res_post_norm_block", "check_parallel_block", "check_pre_norm_block",
           "check_block_predictions"]

_FORBID = Forbid(modules=(block_ref, residual_ref),
                 functions=((nn.TransformerEncoderLayer.forward, "torch.nn.TransformerEncoderLayer"),
                            (nn.TransformerDecoderLayer.forward, "torch.nn.TransformerDecoderLayer")))


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


def _raw(module):
    return module.inner if isinstance(module, _Given) else module


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


def _cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for i, (B, T, D, H, H_kv, D_h, F, norm, ffn, rope, dtype, what) in enumerate(_SHAPES):
        args, label = _components(gen, B=B, T=T, D=D, H=H, H_kv=H_kv, D_h=D_h, F=F, norm=norm, ffn=ffn,
                                  rope=rope, dtype=dtype, start=3 * i)
        cases.append(Case(f"{what}: {label}", args))
    return cases


def _parallel_cases(gen: torch.Generator) -> list[Case]:
    """The same components with one norm: (x, norm, attn, ffn, cos, sin)."""
    return [Case(c.label.replace("RMSNorm,", "one RMSNorm,").replace("LayerNorm,", "one LayerNorm,"),
                 (c.args[0], c.args[1], c.args[2], c.args[4], c.args[5], c.args[6])) for c in _cases(gen)]


def _attn(attn, h, cos, sin, rope=True):
    return attn(h, cos, sin) if rope else attn(h)


def _rope_only(compute):
    """A mistake that only exists when there are RoPE tables to forget."""
    def run(*args):
        if args[-2] is None:
            raise ValueError("no RoPE in this case")
        return compute(*args)
    return run


def _no_grad(compute):
    def run(*args):
        with torch.no_grad():
            return compute(*args)
    return run


# --- Task 1: the res-post-norm block (extend) ------------------------------------------------------------

def _res_post(x, n1, attn, n2, ffn, cos, sin, *, norms=("n1", "n2"), what="output", skip1=True, skip2=True,
              ffn_from_x=False, rope=True):
    """h = x + n1(attn(x)); out = h + n2(ffn(h)), with one part changed."""
    by_name = {"n1": n1, "n2": n2}
    first, second = by_name[norms[0]], by_name[norms[1]]
    if what == "output":
        a = first(_attn(attn, x, cos, sin, rope))
        h = x + a if skip1 else a
        f = second(ffn(x if ffn_from_x else h))
        return h + f if skip2 else f
    if what == "sum":  # post-norm
        h = first(x + _attn(attn, x, cos, sin, rope))
        return second(h + ffn(h))
    if what == "input":  # pre-norm
        h = x + _attn(attn, first(x), cos, sin, rope)
        return h + ffn(second(h))
    if what == "both":  # pre- and post-norm with the same norm (a sandwich that reuses the norm)
        h = x + first(_attn(attn, first(x), cos, sin, rope))
        return h + second(ffn(second(h)))
    raise ValueError(what)


def _res_post_reference(x, n1, attn, n2, ffn, cos, sin):
    with torch.no_grad():
        return _res_post(x, n1, attn, n2, ffn, cos, sin)


_RES_POST_FORMULA = "h = x + attn_norm(attn(x)), out = h + ffn_norm(ffn(h))"

RES_POST_NORM_BLOCK = Task(
    name="res_post_norm_block", reference=_res_post_reference, cases=_cases, seed=707, rtol=1e-4, atol=1e-5,
    mistakes=[Mistake(m, _no_grad(f)) for m, f in [
        (f"you built the post-norm block, which normalizes the sum x + F(x). This variant normalizes the "
         f"sublayer's output before adding it, so the stream itself is never normalized: {_RES_POST_FORMULA}.",
         lambda *a: _res_post(*a, what="sum")),
        (f"you built the pre-norm block, which normalizes the sublayer's input. This variant normalizes its "
         f"output: {_RES_POST_FORMULA}.", lambda *a: _res_post(*a, what="input")),
        ("the sublayers read a normalized copy as well as having their outputs normalized: here they read the "
         "stream itself, x and h.", lambda *a: _res_post(*a, what="both")),
        ("the residual connection around attention is missing: h = x + attn_norm(attn(x)).",
         lambda *a: _res_post(*a, skip1=False)),
        ("the residual connection around the FFN is missing: out = h + ffn_norm(ffn(h)).",
         lambda *a: _res_post(*a, skip2=False)),
        ("the FFN reads the block's input x instead of h = x + attention's (normalized) output.",
         lambda *a: _res_post(*a, ffn_from_x=True)),
        ("the two norms are swapped: attention's output goes through attn_norm, the FFN's through ffn_norm.",
         lambda *a: _res_post(*a, norms=("n2", "n1"))),
        ("the same norm is used twice: the FFN's output goes through ffn_norm, its own module with its own "
         "gain.", lambda *a: _res_post(*a, norms=("n1", "n1"))),
        ("the same norm is used twice: attention's output goes through attn_norm, not ffn_norm.",
         lambda *a: _res_post(*a, norms=("n2", "n2"))),
    ]] + [Mistake("attention was called without the RoPE tables, so it ignores positions: call attn(x, cos, sin).",
                  _rope_only(_no_grad(lambda *a: _res_post(*a, rope=False))))],
    forbid=_FORBID,
)

check_res_post_norm_block = RES_POST_NORM_BLOCK.checker(
    """Check ``res_post_norm_block(x, attn_norm, attn, ffn_norm, ffn, cos, sin)``:
    h = x + attn_norm(attn(x, cos, sin)); out = h + ffn_norm(ffn(h)).""")


# --- Task 2: the parallel block (extend) -----------------------------------------------------------------

def _parallel(x, norm, attn, ffn, cos, sin, *, attn_in="norm", ffn_in="norm", skip="x", combine="add",
              out_norm=False, rope=True):
    """out = x + attn(norm(x)) + ffn(norm(x)), with one part changed."""
    n = norm(x)
    a = _attn(attn, {"norm": n, "raw": x}[attn_in], cos, sin, rope)
    ffn_input = {"norm": n, "raw": x, "h_norm": None, "h": None}[ffn_in]
    if ffn_in == "h_norm":
        ffn_input = norm(x + a)
    elif ffn_in == "h":
        ffn_input = x + a
    f = ffn(ffn_input)
    base = {"x": x, "normed": n, "none": 0.0}[skip]
    updates = {"add": a + f, "mean": (a + f) / 2, "attn": a, "ffn": f}[combine]
    out = base + updates
    return norm(out) if out_norm else out


def _parallel_reference(x, norm, attn, ffn, cos, sin):
    with torch.no_grad():
        return _parallel(x, norm, attn, ffn, cos, sin)


PARALLEL_BLOCK = Task(
    name="parallel_block", reference=_parallel_reference, cases=_parallel_cases, seed=708, rtol=1e-4,
    atol=1e-5,
    mistakes=[Mistake(m, _no_grad(f)) for m, f in [
        ("this is the sequential block: the FFN reads the stream after attention. In the parallel block both "
         "sublayers read the same normalized input, norm(x), and both outputs are added to x.",
         lambda *a: _parallel(*a, ffn_in="h_norm")),
        ("the FFN reads x + attention's output, un-normalized: in the parallel block it reads norm(x), the "
         "same input as attention.", lambda *a: _parallel(*a, ffn_in="h")),
        ("the FFN reads x without normalizing it: both sublayers read norm(x).",
         lambda *a: _parallel(*a, ffn_in="raw")),
        ("attention reads x without normalizing it: both sublayers read norm(x).",
         lambda *a: _parallel(*a, attn_in="raw")),
        ("the residual connection is missing: out = x + attention's output + the FFN's output.",
         lambda *a: _parallel(*a, skip="none")),
        ("the skip connection carries the normalized copy: add the outputs to x itself, not to norm(x).",
         lambda *a: _parallel(*a, skip="normed")),
        ("you normalized the block's output: the parallel block is pre-norm, and leaves the stream "
         "un-normalized.", lambda *a: _parallel(*a, out_norm=True)),
        ("the two outputs are averaged: the parallel block adds both to x, as the sequential block does.",
         lambda *a: _parallel(*a, combine="mean")),
        ("the FFN's output is missing: out = x + attention's output + the FFN's output.",
         lambda *a: _parallel(*a, combine="attn")),
        ("attention's output is missing: out = x + attention's output + the FFN's output.",
         lambda *a: _parallel(*a, combine="ffn")),
    ]] + [Mistake("attention was called without the RoPE tables, so it ignores positions: call "
                  "attn(norm(x), cos, sin).", _rope_only(_no_grad(lambda *a: _parallel(*a, rope=False))))],
    forbid=_FORBID,
)

check_parallel_block = PARALLEL_BLOCK.checker(
    """Check ``parallel_block(x, norm, attn, ffn, cos, sin)`` = x + attn(norm(x), cos, sin) + ffn(norm(x))
    (GPT-J, PaLM: one norm, both sublayers read it).""")


# --- Task 3: the pre-norm block (find and fix) ----------------------------------------------------------

def _block_holding(attn_norm, attn, ffn_norm, ffn, cos, placement: str) -> TransformerBlock:
    attn_norm, attn, ffn_norm, ffn = (_raw(m) for m in (attn_norm, attn, ffn_norm, ffn))
    config = ModelConfig(vocab_size=1, d_model=attn.d_model, n_layers=1, n_heads=attn.n_heads,
                         n_kv_heads=attn.n_kv_heads, head_dim=attn.head_dim, d_ff=1, placement=placement,
                         positional="rope" if cos is not None else "none")
    with torch.device("meta"):  # its own modules are placeholders, replaced below
        block = TransformerBlock(config)
    block.attn_norm, block.attn, block.ffn_norm, block.ffn = attn_norm, attn, ffn_norm, ffn
    return block


def _pre_norm_reference(x, attn_norm, attn, ffn_norm, ffn, cos, sin):
    with torch.no_grad():
        block = _block_holding(attn_norm, attn, ffn_norm, ffn, cos, "pre")
        return block(x, cos, sin, implementation="reference")


def _pre(x, n1, attn, n2, ffn, cos, sin, *, attn_in="norm", ffn_in="norm", skip1="x", skip2="h", rope=True,
         out_norm=False):
    """The pre-norm block with one part changed, as a student's slip would change it."""
    attn_input = {"norm": n1(x), "raw": x, "n2": n2(x)}[attn_in]
    a = _attn(attn, attn_input, cos, sin, rope)
    h = {"x": x + a, "normed": attn_input + a, "none": a}[skip1]
    ffn_input = {"norm": n2(h), "raw": h, "n1": n1(h), "x": n2(x), "a": n2(a)}[ffn_in]
    f = ffn(ffn_input)
    out = {"h": h + f, "normed": ffn_input + f, "none": f, "x": x + f}[skip2]
    return n2(out) if out_norm else out


_PRE_FORMULA = "h = x + attn(attn_norm(x)), out = h + ffn(ffn_norm(h))"

PRE_NORM_BLOCK = Task(
    name="pre_norm_block", reference=_pre_norm_reference, cases=_cases, seed=709, rtol=1e-4, atol=1e-5,
    mistakes=[Mistake(m, _no_grad(f)) for m, f in [
        ("this is still what the given version computes: the bug is not fixed yet. It agrees with the right "
         "block only while the two norms have equal gains, as they do when freshly built; which norm does "
         "each sublayer read through?", lambda *a: _pre(*a, attn_in="n2", ffn_in="n1")),
        (f"you built the post-norm block, Norm(x + F(x)). In the pre-norm block each sublayer reads a "
         f"normalised copy and its output is added to the un-normalised stream: {_PRE_FORMULA}.",
         lambda *a: _res_post(*a, what="sum")),
        ("you normalised the sublayers' outputs, x + Norm(F(x)), instead of their inputs.",
         lambda *a: _res_post(*a)),
        ("the residual stream was normalised: you added a sublayer's output to the normalised copy. The skip "
         "connection must carry x itself; only the sublayer's input is normalised.",
         lambda *a: _pre(*a, skip1="normed", skip2="normed")),
        ("the first residual starts from the normalised copy: h = attn_norm(x) + attn(...). It must start "
         "from x itself.", lambda *a: _pre(*a, skip1="normed")),
        ("the second residual starts from the normalised copy: out = ffn_norm(h) + ffn(...). It must start "
         "from h itself.", lambda *a: _pre(*a, skip2="normed")),
        ("you normalised the block's output. In a pre-norm block the stream is never normalised inside the "
         "block (a pre-norm model normalises once, after its last block).", lambda *a: _pre(*a, out_norm=True)),
        ("the FFN reads the block's input x instead of h = x + attention's output, so it cannot use what "
         "attention just gathered (that is the parallel block). Feed ffn_norm(h) to the FFN.",
         lambda *a: _pre(*a, ffn_in="x")),
        ("the second residual adds the FFN's output to x instead of to h, which drops attention's "
         "contribution.", lambda *a: _pre(*a, skip2="x")),
        ("the FFN reads attention's output alone; it must read the stream h = x + attention's output "
         "(normalised).", lambda *a: _pre(*a, ffn_in="a")),
        ("the residual connection around attention is missing: h = x + attn(attn_norm(x)).",
         lambda *a: _pre(*a, skip1="none")),
        ("the residual connection around the FFN is missing: out = h + ffn(ffn_norm(h)).",
         lambda *a: _pre(*a, skip2="none")),
        ("the same norm is used twice: the FFN reads ffn_norm(h), its own module with its own gain.",
         lambda *a: _pre(*a, ffn_in="n1")),
        ("the same norm is used twice: attention reads attn_norm(x), not ffn_norm(x).",
         lambda *a: _pre(*a, attn_in="n2")),
        ("attention reads x without normalising it first: h = x + attn(attn_norm(x)).",
         lambda *a: _pre(*a, attn_in="raw")),
        ("the FFN reads h without normalising it first: out = h + ffn(ffn_norm(h)).",
         lambda *a: _pre(*a, ffn_in="raw")),
    ]] + [Mistake("attention was called without the RoPE tables, so it ignores positions: call "
                  "attn(attn_norm(x), cos, sin).", _rope_only(_no_grad(lambda *a: _pre(*a, rope=False))))],
    forbid=_FORBID,
)

check_pre_norm_block = PRE_NORM_BLOCK.checker(
    """Check ``pre_norm_block(x, attn_norm, attn, ffn_norm, ffn, cos, sin)``:
    h = x + attn(attn_norm(x), cos, sin); out = h + ffn(ffn_norm(h)).""")


# --- Task 4: predictions ---------------------------------------------------------------------------------


_WRONG_PREDICTIONS = {
    "silenced_pre_rms": [
        (1.0, "a pre-norm block never normalizes the stream: only the copies its sublayers read are "
              "normalized."),
        (0.0, "the skip connections still carry x: with both sublayers silent the block is the identity."),
    ],
    "silenced_post_rms": [
        (3.0, "post-norm normalizes the sum x + F(x) even when the sublayer adds nothing."),
        (0.0, "the sum x + 0 is x, and the norm rescales it; nothing sets it to zero."),
    ],
    "kv_head": [
        (0.0, "consecutive query heads share a key/value head (repeat_interleave): query head h reads kv "
              "head h // (H / H_kv), not h mod H_kv."),
        (3.0, "divide by the group size H / H_kv (query heads per kv head), not by H_kv."),
        (6.0, "with grouped-query attention several query heads share one kv head; there are only H_kv of "
              "them."),
    ],
    "scores_gib": [
        (2.0, "bfloat16 takes 2 bytes per number, not 4."),
        (1 / 32, "there is one score per pair of positions for every head: B · H · T² numbers."),
        (0.5, "bfloat16 takes 2 bytes per number."),
        (4096 * 4096 * 2 / 2**30, "there is one score per pair of positions for every head: B · H · T²."),
    ],
}


def _true_predictions() -> dict[str, float]:
    B, H, T = 1, 32, 4096
    return {
        "silenced_pre_rms": 3.0,  # W_O = W_down = 0: the block is the identity
        "silenced_post_rms": 1.0,  # Norm₂(Norm₁(x)): RMS 1 with gains 1
        "kv_head": float(6 // (8 // 2)),  # query head 6 of 8 reads kv head 6 // 4
        "scores_gib": B * H * T * T * 2 / 2**30,  # (B, H, T, T) in bfloat16
    }


def _close_enough(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-3 * max(abs(a), abs(b), 1e-12)


BLOCK_PREDICTIONS = predictions_task(
    truth=_true_predictions,
    wrong=_WRONG_PREDICTIONS,
    seed=710,
    rtol=1e-3,
    atol=1e-9,
    advice="Work it out on paper first, then run the experiment below.",
)

check_block_predictions = BLOCK_PREDICTIONS.checker(
    """Check ``predictions() -> dict``: the output RMS of a silenced pre-norm and post-norm block, the kv
    head a query head reads, and the size of one block's attention scores.""")
