"""Checkers for exercise 07 (the decoder block): assemble the pre-norm block, the post-norm block and
the two residual updates from given components (two norms, an attention module, a feed-forward
network, RoPE tables).

The student's functions receive modules, not weights: ``attn_norm`` and ``ffn_norm`` (RMSNorm or
LayerNorm, with different random gains so that swapping them shows), ``attn`` (grouped-query attention,
called as ``attn(h, cos, sin)``), ``ffn`` (SwiGLU, GELU or ReLU) and the RoPE tables ``cos`` and
``sin`` (None in the cases without RoPE). The reference is :class:`course_lib.block.TransformerBlock`
with those very modules put in its slots.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from .. import residual
from ..attention import GroupedQueryAttention
from ..block import TransformerBlock
from ..config import ModelConfig
from ..ffn import FeedForward, SwiGLU
from ..norms import LayerNorm, RMSNorm
from ..positional import rope_cos_sin
from ._core import Case, Forbidden, GradingError, Mistake, check_function, describe

__all__ = ["check_pre_norm_block", "check_post_norm_block", "check_residual_updates"]

# float32 students must pass on float64 inputs too: the mistakes below differ by far more than this.
_RTOL, _ATOL = 1e-4, 1e-5

_REFERENCES = [
    Forbidden(TransformerBlock.forward, "course_lib.block.TransformerBlock"),
    Forbidden(TransformerBlock.attention, "course_lib.block.TransformerBlock.attention"),
    Forbidden(residual.PreNormResidual.forward, "course_lib.residual.PreNormResidual"),
    Forbidden(residual.PostNormResidual.forward, "course_lib.residual.PostNormResidual"),
    Forbidden(nn.TransformerEncoderLayer.forward, "torch.nn.TransformerEncoderLayer"),
    Forbidden(nn.TransformerDecoderLayer.forward, "torch.nn.TransformerDecoderLayer"),
]


# --- the cases: random components of many shapes and kinds ------------------------------------------

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
    modules = [m.to(dtype) for m in (attn_norm, attn, ffn_norm, mlp)]
    x = (3.0 * randn(B, T, D)).to(dtype)  # a stream of RMS about 3: normalising it changes it
    cos = sin = None
    if rope:
        cos, sin = rope_cos_sin(torch.arange(start, start + T), D_h, dtype=dtype)  # (T, D_h/2)
    kinds = {"rms": "RMSNorm", "layer": "LayerNorm"}
    ffn_kind = {"swiglu": "a SwiGLU FFN", "gelu": "a GELU FFN", "relu": "a ReLU FFN"}[ffn]
    heads = f"{H} query heads and {H_kv} kv heads of width {D_h}"
    where = f"RoPE tables of shape {tuple(cos.shape)}" if rope else "no RoPE (cos = sin = None)"
    label = f"x {describe(x)}, two {kinds[norm]}s, attention with {heads}, {ffn_kind} of width {F}, {where}"
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
    (2, 5, 32, 4, 2, 8, 48, "rms", "relu", False, torch.float64, "RMSNorm with a ReLU FFN, no RoPE"),
    (2, 6, 32, 4, 2, 8, 48, "rms", "swiglu", True, torch.float32, "float32"),
]


def _cases(seed: int) -> list[Case]:
    gen = torch.Generator().manual_seed(seed)
    cases = []
    for i, (B, T, D, H, H_kv, D_h, F, norm, ffn, rope, dtype, what) in enumerate(_SHAPES):
        args, label = _components(gen, B=B, T=T, D=D, H=H, H_kv=H_kv, D_h=D_h, F=F, norm=norm, ffn=ffn,
                                  rope=rope, dtype=dtype, start=3 * i)
        cases.append(Case(f"{what}: {label}", args))
    return cases


# --- the reference: TransformerBlock holding the given modules ---------------------------------------

def _block_holding(attn_norm, attn, ffn_norm, ffn, cos, placement: str) -> TransformerBlock:
    config = ModelConfig(vocab_size=1, d_model=attn.d_model, n_layers=1, n_heads=attn.n_heads,
                         n_kv_heads=attn.n_kv_heads, head_dim=attn.head_dim, d_ff=1, placement=placement,
                         positional="rope" if cos is not None else "none")
    with torch.device("meta"):  # its own modules are placeholders, replaced below
        block = TransformerBlock(config)
    block.attn_norm, block.attn, block.ffn_norm, block.ffn = attn_norm, attn, ffn_norm, ffn
    return block


def _reference(placement: str) -> Callable:
    def run(x, attn_norm, attn, ffn_norm, ffn, cos, sin):
        with torch.no_grad():
            block = _block_holding(attn_norm, attn, ffn_norm, ffn, cos, placement)
            return block(x, cos, sin, implementation="reference")
    return run


def _updates_reference(x, attn_norm, attn, ffn_norm, ffn, cos, sin):
    """(2, B, T, D): what the attention sublayer and the FFN sublayer add to the stream."""
    with torch.no_grad():
        block = _block_holding(attn_norm, attn, ffn_norm, ffn, cos, "pre")
        attn_update = block.attention(attn_norm(x), cos, sin, implementation="reference")  # (B, T, D)
        h = x + attn_update  # (B, T, D): the stream between the two sublayers
        return torch.stack([attn_update, ffn(ffn_norm(h))])  # (2, B, T, D)


# --- wrappers around the student's function ----------------------------------------------------------

def _guarded(student: Callable, task: str, *, pair: bool = False) -> Callable:
    """Call the student's function, refuse in-place changes to x, and (for ``pair``) stack the two
    returned updates into one (2, B, T, D) tensor so they can be compared."""
    if not callable(student):
        raise GradingError(f"{task} should be a function, but it is a {type(student).__name__}.")

    def wrapped(x, *rest):
        before = x.detach().clone()
        out = student(x, *rest)
        if not torch.equal(x.detach(), before):
            raise GradingError(
                f"{task} changed its input x in place (for example with x += ...). In a model, x is the "
                f"previous block's output and is still needed (by autograd, among others): compute a new "
                f"tensor, h = x + ..., instead."
            )
        if not pair:
            return out
        if not (isinstance(out, (tuple, list)) and len(out) == 2
                and all(isinstance(t, torch.Tensor) for t in out)):
            raise GradingError(
                f"{task} should return a pair (attention_update, ffn_update) of tensors, got "
                f"{type(out).__name__}."
            )
        if any(t.shape != x.shape for t in out):
            raise GradingError(
                f"{task} returned updates of shapes {tuple(out[0].shape)} and {tuple(out[1].shape)}; each "
                f"update is added to the stream, so both must have x's shape {tuple(x.shape)}."
            )
        return torch.stack([out[0], out[1]])  # (2, B, T, D)

    return wrapped


# --- the mistakes ------------------------------------------------------------------------------------

def _attn(attn, h, cos, sin, rope=True):
    return attn(h, cos, sin) if rope else attn(h)


def _pre(x, n1, attn, n2, ffn, cos, sin, *, attn_in="norm", ffn_in="norm", skip1="x", skip2="h",
         rope=True, out_norm=False):
    """The pre-norm block with one part changed, as a student's slip would change it."""
    attn_input = {"norm": n1(x), "raw": x, "n2": n2(x)}[attn_in]
    a = _attn(attn, attn_input, cos, sin, rope)
    h = {"x": x + a, "normed": attn_input + a, "none": a}[skip1]
    ffn_input = {"norm": n2(h), "raw": h, "n1": n1(h), "x": n2(x), "a": n2(a)}[ffn_in]
    f = ffn(ffn_input)
    out = {"h": h + f, "normed": ffn_input + f, "none": f, "x": x + f}[skip2]
    return n2(out) if out_norm else out


def _post_variant(x, n1, attn, n2, ffn, cos, sin, *, norms=("n1", "n2"), sum_norm=True, skip1=True,
                  skip2=True, ffn_from_x=False, rope=True, normed_input=False):
    """The post-norm block with one part changed."""
    by_name = {"n1": n1, "n2": n2}
    first, second = by_name[norms[0]], by_name[norms[1]]
    a = _attn(attn, first(x) if normed_input else x, cos, sin, rope)
    if sum_norm:
        h = first(x + a) if skip1 else first(a)
    else:  # x + Norm(F(x)): the output normalised instead of the sum
        h = x + first(a)
    f = ffn(x if ffn_from_x else h)
    if sum_norm:
        return second(h + f) if skip2 else second(f)
    return h + second(f)


def _rope_only(compute):
    """A mistake that only exists when there are RoPE tables to forget."""
    def run(x, n1, attn, n2, ffn, cos, sin):
        if cos is None:
            raise ValueError("no RoPE in this case")
        return compute(x, n1, attn, n2, ffn, cos, sin)
    return run


_PRE_FORMULA = "h = x + attn(attn_norm(x)), out = h + ffn(ffn_norm(h))"
_POST_FORMULA = "h = attn_norm(x + attn(x)), out = ffn_norm(h + ffn(h))"


def _pre_norm_mistakes() -> list[Mistake]:
    post = _reference("post")
    return [
        Mistake(f"you built the post-norm block, Norm(x + F(x)). In the pre-norm block each sublayer reads "
                f"a normalised copy and its output is added to the un-normalised stream: {_PRE_FORMULA}.",
                lambda *a: post(*a)),
        Mistake("you normalised the sublayers' outputs, x + Norm(F(x)), instead of their inputs. Pre-norm "
                "normalises what goes INTO attention and the FFN; what comes out is added as it is.",
                lambda x, n1, attn, n2, ffn, cos, sin: _post_variant(x, n1, attn, n2, ffn, cos, sin,
                                                                     sum_norm=False)),
        Mistake("the residual stream was normalised: you added a sublayer's output to the normalised copy "
                "(Norm(x) + F(Norm(x))). The skip connection must carry x itself, un-normalised; only the "
                "sublayer's input is normalised.",
                lambda *a: _pre(*a, skip1="normed", skip2="normed")),
        Mistake("the first residual starts from the normalised copy: h = attn_norm(x) + attn(...). It must "
                "start from x itself: h = x + attn(attn_norm(x)).",
                lambda *a: _pre(*a, skip1="normed")),
        Mistake("the second residual starts from the normalised copy: out = ffn_norm(h) + ffn(...). It "
                "must start from h itself: out = h + ffn(ffn_norm(h)).",
                lambda *a: _pre(*a, skip2="normed")),
        Mistake("you normalised the block's output. In a pre-norm block the stream is never normalised "
                "inside the block (a pre-norm model normalises once, after its last block).",
                lambda *a: _pre(*a, out_norm=True)),
        Mistake("the FFN reads the block's input x instead of h = x + attention's output, so it cannot "
                "use what attention just gathered (that is the 'parallel' block of GPT-J and PaLM, a "
                "different model). Feed ffn_norm(h) to the FFN.",
                lambda *a: _pre(*a, ffn_in="x")),
        Mistake("the second residual adds the FFN's output to x instead of to h, which drops attention's "
                "contribution: out = h + ffn(ffn_norm(h)).",
                lambda *a: _pre(*a, skip2="x")),
        Mistake("the FFN reads attention's output alone; it must read the stream h = x + attention's "
                "output (normalised).",
                lambda *a: _pre(*a, ffn_in="a")),
        Mistake("the residual connection around attention is missing: h = x + attn(attn_norm(x)), not "
                "attn(attn_norm(x)).",
                lambda *a: _pre(*a, skip1="none")),
        Mistake("the residual connection around the FFN is missing: out = h + ffn(ffn_norm(h)), not "
                "ffn(ffn_norm(h)).",
                lambda *a: _pre(*a, skip2="none")),
        Mistake("both residual connections are missing: each sublayer's output must be ADDED to the stream "
                "it read from.",
                lambda *a: _pre(*a, skip1="none", skip2="none")),
        Mistake("the same norm is used twice: attention reads attn_norm, the FFN reads ffn_norm. They are "
                "two modules with their own learned gains.",
                lambda *a: _pre(*a, ffn_in="n1")),
        Mistake("the same norm is used twice: attention must read attn_norm(x), not ffn_norm(x).",
                lambda *a: _pre(*a, attn_in="n2")),
        Mistake("the two norms are swapped: attention reads attn_norm, the FFN reads ffn_norm.",
                lambda *a: _pre(*a, attn_in="n2", ffn_in="n1")),
        Mistake("attention reads x without normalising it first: h = x + attn(attn_norm(x)).",
                lambda *a: _pre(*a, attn_in="raw")),
        Mistake("the FFN reads h without normalising it first: out = h + ffn(ffn_norm(h)).",
                lambda *a: _pre(*a, ffn_in="raw")),
        Mistake("attention was called without the RoPE tables, so it ignores positions: call "
                "attn(h, cos, sin).",
                _rope_only(lambda *a: _pre(*a, rope=False))),
    ]


def _post_norm_mistakes() -> list[Mistake]:
    pre = _reference("pre")
    return [
        Mistake(f"you built the pre-norm block. In the post-norm block (the original Transformer) the "
                f"sublayers read the stream itself and the norm is applied to each sum: {_POST_FORMULA}.",
                lambda *a: pre(*a)),
        Mistake(f"you normalised each sublayer's output and then added it, x + Norm(F(x)). Post-norm "
                f"normalises the SUM, Norm(x + F(x)): {_POST_FORMULA}.",
                lambda *a: _post_variant(*a, sum_norm=False)),
        Mistake("attention reads a normalised copy of x: in the post-norm block the sublayers read the "
                "stream as it is, and the norm comes after the addition.",
                lambda *a: _post_variant(*a, normed_input=True)),
        Mistake("the residual connection around attention is missing: h = attn_norm(x + attn(x)).",
                lambda *a: _post_variant(*a, skip1=False)),
        Mistake("the residual connection around the FFN is missing: out = ffn_norm(h + ffn(h)).",
                lambda *a: _post_variant(*a, skip2=False)),
        Mistake("the FFN reads the block's input x instead of h, the normalised stream after attention.",
                lambda *a: _post_variant(*a, ffn_from_x=True)),
        Mistake("the same norm is used twice: the first sum goes through attn_norm, the second through "
                "ffn_norm.",
                lambda *a: _post_variant(*a, norms=("n1", "n1"))),
        Mistake("the same norm is used twice: the first sum goes through attn_norm, not ffn_norm.",
                lambda *a: _post_variant(*a, norms=("n2", "n2"))),
        Mistake("the two norms are swapped: attn_norm normalises the sum after attention, ffn_norm the "
                "sum after the FFN.",
                lambda *a: _post_variant(*a, norms=("n2", "n1"))),
        Mistake("the second sum is not normalised: out = ffn_norm(h + ffn(h)).",
                lambda x, n1, attn, n2, ffn, cos, sin: (lambda h: h + ffn(h))(
                    n1(x + attn(x, cos, sin)))),
        Mistake("the first sum is not normalised: h = attn_norm(x + attn(x)).",
                lambda x, n1, attn, n2, ffn, cos, sin: (lambda h: n2(h + ffn(h)))(x + attn(x, cos, sin))),
        Mistake("attention was called without the RoPE tables, so it ignores positions: call "
                "attn(x, cos, sin).",
                _rope_only(lambda *a: _post_variant(*a, rope=False))),
    ]


def _stack(compute):
    def run(*args):
        attn_update, ffn_update = compute(*args)
        return torch.stack([attn_update, ffn_update])
    return run


def _updates(x, n1, attn, n2, ffn, cos, sin, *, ffn_reads="h", attn_in="norm", rope=True):
    a = _attn(attn, n1(x) if attn_in == "norm" else x, cos, sin, rope)
    h = x + a
    f_input = {"h": n2(h), "x": n2(x), "a": n2(a), "raw": h, "n1": n1(h)}[ffn_reads]
    return a, ffn(f_input)


def _residual_updates_mistakes() -> list[Mistake]:
    return [
        Mistake("you returned the stream after each sublayer (h and the block's output) rather than what "
                "each sublayer adds to it: return (attn_update, ffn_update), with x + attn_update + "
                "ffn_update equal to the block's output.",
                _stack(lambda x, *r: (lambda a, f: (x + a, x + a + f))(*_updates(x, *r)))),
        Mistake("the updates are in the wrong order: return (attention's update, the FFN's update).",
                _stack(lambda *a: _updates(*a)[::-1])),
        Mistake("the FFN's update was computed from the block's input x; the FFN reads the stream after "
                "attention, h = x + attn_update (through ffn_norm).",
                _stack(lambda *a: _updates(*a, ffn_reads="x"))),
        Mistake("the FFN's update was computed from attention's update alone; the FFN reads the whole "
                "stream h = x + attn_update (through ffn_norm).",
                _stack(lambda *a: _updates(*a, ffn_reads="a"))),
        Mistake("the FFN reads h without normalising it first: ffn(ffn_norm(h)).",
                _stack(lambda *a: _updates(*a, ffn_reads="raw"))),
        Mistake("the same norm is used twice: the FFN reads ffn_norm(h), not attn_norm(h).",
                _stack(lambda *a: _updates(*a, ffn_reads="n1"))),
        Mistake("attention reads x without normalising it first: attn(attn_norm(x), cos, sin).",
                _stack(lambda *a: _updates(*a, attn_in="raw"))),
        Mistake("attention was called without the RoPE tables, so it ignores positions: call "
                "attn(h, cos, sin).",
                _rope_only(_stack(lambda *a: _updates(*a, rope=False)))),
    ]


# --- the checkers ------------------------------------------------------------------------------------

def _no_grad(mistakes: list[Mistake]) -> list[Mistake]:
    def quiet(compute):
        def run(*args):
            with torch.no_grad():
                return compute(*args)
        return run
    return [Mistake(m.message, quiet(m.compute)) for m in mistakes]


def check_pre_norm_block(pre_norm_block) -> None:
    """Check ``pre_norm_block(x, attn_norm, attn, ffn_norm, ffn, cos, sin)``:
    h = x + attn(attn_norm(x), cos, sin); out = h + ffn(ffn_norm(h))."""
    task = "pre_norm_block"
    check_function(_guarded(pre_norm_block, task), _reference("pre"), _cases(707), task=task,
                   mistakes=_no_grad(_pre_norm_mistakes()), forbidden=_REFERENCES, rtol=_RTOL, atol=_ATOL)


def check_post_norm_block(post_norm_block) -> None:
    """Check ``post_norm_block(x, attn_norm, attn, ffn_norm, ffn, cos, sin)``:
    h = attn_norm(x + attn(x, cos, sin)); out = ffn_norm(h + ffn(h))."""
    task = "post_norm_block"
    check_function(_guarded(post_norm_block, task), _reference("post"), _cases(708), task=task,
                   mistakes=_no_grad(_post_norm_mistakes()), forbidden=_REFERENCES, rtol=_RTOL, atol=_ATOL)


def check_residual_updates(residual_updates) -> None:
    """Check ``residual_updates(x, attn_norm, attn, ffn_norm, ffn, cos, sin)`` → (a, f): what attention
    and the FFN add to the stream in a pre-norm block, so that x + a + f is the block's output."""
    task = "residual_updates"
    check_function(_guarded(residual_updates, task, pair=True), _updates_reference, _cases(709), task=task,
                   mistakes=_no_grad(_residual_updates_mistakes()), forbidden=_REFERENCES, rtol=_RTOL,
                   atol=_ATOL)
