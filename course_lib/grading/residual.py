"""Checkers for exercise 06 (the residual stream).

1. ``deep_norm_residual`` — implement DeepNet's residual sublayer, LayerNorm(α · x + F(x)), norm included.
2. ``pre_norm_residual_backward`` — derive the gradient through it for a linear sublayer (the identity
   plus the path through the sublayer and the norm) and the gradient of the sublayer's matrix.
3. ``residual_scaled_init_`` — find and fix the bug in a given GPT-2 initialisation.
4. ``predictions`` — predict four numbers about the stream before computing them.
"""

from __future__ import annotations

import functools
import math

import torch
from torch import nn

from .. import init as init_ref
from .. import norms, residual
from ._predictions import predictions_task
from ._core import Case, Forbid, Mistake, Task, TensorOutput, TupleOutput, describe
from ._watch import paused

__all__ = ["check_deep_norm_residual", "check_pre_norm_residual_backward", "check_residual_scaled_init",
           "check_residual_predictions"]

_LIBRARY = (norms, residual, init_ref)


def _randn(gen, *shape, scale=1.0, dtype=torch.float64):
    return (scale * torch.randn(shape, generator=gen, dtype=torch.float64)).to(dtype)


# --- Task 1: the DeepNorm residual sublayer --------------------------------------------------------------

def _linear(gen, d):
    a = _randn(gen, d, d) / math.sqrt(d)
    return lambda y: y @ a.to(y.dtype)


def _mlp(gen, d):
    w_up, w_down = _randn(gen, d, 4 * d) / math.sqrt(d), _randn(gen, 4 * d, d) / math.sqrt(4 * d)
    return lambda y: torch.tanh(y @ w_up.to(y.dtype)) @ w_down.to(y.dtype)


def _gated(gen, d):
    w_gate, w_up = _randn(gen, d, 3 * d) / math.sqrt(d), _randn(gen, d, 3 * d) / math.sqrt(d)
    w_down = _randn(gen, 3 * d, d) / math.sqrt(3 * d)

    def gated(y):
        gate = y @ w_gate.to(y.dtype)
        return (gate * torch.sigmoid(gate) * (y @ w_up.to(y.dtype))) @ w_down.to(y.dtype)

    return gated


def _constant(gen, d):
    c = _randn(gen, d)
    return lambda y: c.to(y.dtype).expand_as(y)  # ignores its input


_SUBLAYERS = {"a linear map": _linear, "a small MLP": _mlp, "a gated (SwiGLU-like) FFN": _gated,
              "a sublayer that ignores its input (a constant)": _constant,
              "the zero function": lambda gen, d: torch.zeros_like}


def _layer_norm(s, weight, bias, eps, *, unbiased=False, eps_outside=False, centre=True, all_dims=False):
    """LayerNorm with one knob turned: what a solution with that mistake computes."""
    dims = tuple(range(s.dim())) if all_dims else (-1,)
    mu = s.mean(dims, keepdim=True) if centre else torch.zeros_like(s)
    var = (s - mu).pow(2).sum(dims, keepdim=True) / (_count(s, dims) - (1 if unbiased else 0))
    y = (s - mu) / (var.sqrt() + eps if eps_outside else torch.sqrt(var + eps))
    y = y if weight is None else y * weight
    return y if bias is None else y + bias


def _count(s, dims) -> int:
    return math.prod(s.shape[d] for d in dims)


def _deep_norm(x, f, w, b, alpha, eps=1e-5, *, skip="alpha x", reads="x", norm_kw=None, after=False):
    """LayerNorm(α x + F(x)) with one part changed, as a student's slip would change it."""
    norm_kw = norm_kw or {}
    if reads == "x":
        read = x
    elif reads == "alpha x":
        read = alpha * x
    else:  # a normalized copy, as in pre-norm
        read = _layer_norm(x, w, b, eps)
    update = f(read)
    if skip == "pre-norm":  # α x + F(LN(x)): the stream is never normalized
        return alpha * x + update
    base = {"alpha x": alpha * x, "x": x}[skip]
    branch = alpha * update if skip == "x" and not after else update
    if after:  # α applied to the normalized sum
        return alpha * _layer_norm(x + update, w, b, eps, **norm_kw)
    return _layer_norm(base + branch, w, b, eps, **norm_kw)


def _deep_norm_reference(x, sublayer, weight, bias, alpha, eps=1e-5):
    return norms.layer_norm(alpha * x + sublayer(x), weight, bias, eps)


def _deep_norm_cases(gen) -> list[Case]:
    cases = []
    for shape, dtype, scale, alpha, eps, kind in [
        ((5, 16), torch.float64, 1.0, 1.5, 1e-5, "a small MLP"),  # first: F(αx) ≠ αF(x) for an MLP
        ((8,), torch.float64, 1.0, 2.0, 1e-5, "a linear map"),
        ((2, 6, 16), torch.float64, 0.5, 3.0, 1e-5, "a gated (SwiGLU-like) FFN"),
        ((3, 4, 32), torch.float32, 2.0, 1.8, 1e-5, "a small MLP"),
        ((2, 5, 8), torch.float64, 0.01, 2.5, 0.1, "a linear map"),
        ((4, 8), torch.float64, 1.0, 1.7, 1e-5, "a sublayer that ignores its input (a constant)"),
        ((2, 3, 8), torch.float64, 2.0, 2.2, 1e-5, "the zero function"),
        ((3, 12), torch.float64, 1.0, 1.0, 1e-5, "a small MLP"),
    ]:
        x = _randn(gen, *shape, scale=scale, dtype=dtype)
        weight = (1 + 0.3 * _randn(gen, shape[-1])).to(dtype)
        bias = (0.2 * _randn(gen, shape[-1])).to(dtype)
        what = "alpha = 1 (plain post-norm)" if alpha == 1.0 else f"alpha = {alpha:g}"
        cases.append(Case(f"x: {describe(x)}, random weight and bias of shape ({shape[-1]},), {what}, "
                          f"eps = {eps:g}, with {kind} as the sublayer",
                          (x, _SUBLAYERS[kind](gen, shape[-1]), weight, bias, alpha), {"eps": eps}))
    return cases


def _dn(**knobs):
    return lambda x, f, w, b, alpha, eps=1e-5: _deep_norm(x, f, w, b, alpha, eps, **knobs)


DEEP_NORM_RESIDUAL = Task(
    name="deep_norm_residual", reference=_deep_norm_reference, cases=_deep_norm_cases, seed=606,
    rtol=1e-4, atol=1e-5,
    mistakes=[
        Mistake("α multiplies the sublayer's output. DeepNorm up-weights the skip connection: LayerNorm(α · x + "
                "F(x)), so that the stream, not the update, dominates the sum.", _dn(skip="x")),
        Mistake("α is missing: this is the plain post-norm sublayer LayerNorm(x + F(x)). DeepNorm scales the "
                "skip connection by α before adding.", lambda x, f, w, b, alpha, eps=1e-5: _layer_norm(x + f(x), w, b, eps)),
        Mistake("α is applied after the norm, α · LayerNorm(x + F(x)): it must scale x inside, before the sum "
                "is normalized.", _dn(after=True)),
        Mistake("this is pre-norm, α · x + F(LayerNorm(x)): DeepNorm is a post-norm sublayer. The sublayer reads "
                "the stream x itself and the SUM is normalized.", _dn(skip="pre-norm", reads="norm")),
        Mistake("the sublayer reads a normalized copy of x; in DeepNorm, as in post-norm, it reads the stream "
                "x itself: LayerNorm(α · x + F(x)).", _dn(reads="norm")),
        Mistake("the sublayer reads α · x; α scales only the skip connection, and F reads x: "
                "LayerNorm(α · x + F(x)).", _dn(reads="alpha x")),
        Mistake("the variance has Bessel's correction (divides by D − 1), which torch.var and torch.std use by "
                "default. LayerNorm divides by D: pass unbiased=False (or correction=0), or use .mean().",
                _dn(norm_kw={"unbiased": True})),
        Mistake("ε is outside the square root. It goes inside: (s − μ) / sqrt(σ² + ε).",
                _dn(norm_kw={"eps_outside": True})),
        Mistake("the mean is not subtracted (that is RMSNorm). LayerNorm centres first: s − mean(s).",
                _dn(norm_kw={"centre": False})),
        Mistake("normalize each position over its own features (the last dimension), not over the whole "
                "tensor.", _dn(norm_kw={"all_dims": True})),
        Mistake("the bias β is not added: LayerNorm ends with · γ + β.",
                lambda x, f, w, b, alpha, eps=1e-5: _layer_norm(alpha * x + f(x), w, None, eps)),
        Mistake("the weight γ is not applied: LayerNorm ends with · γ + β.",
                lambda x, f, w, b, alpha, eps=1e-5: _layer_norm(alpha * x + f(x), None, b, eps)),
    ],
    forbid=Forbid(operations=("rms_norm", "layer_norm"), modules=_LIBRARY),
)

check_deep_norm_residual = DEEP_NORM_RESIDUAL.checker(
    """Check ``deep_norm_residual(x, sublayer, weight, bias, alpha, eps=1e-5)`` = LayerNorm(alpha · x +
    sublayer(x)) with gain `weight` and shift `bias`, over the last dimension (biased variance, eps inside
    the square root), in x's dtype.""")


# --- Task 2: the gradient through a pre-norm residual sublayer ------------------------------------------

def _backward_reference(x, weight, proj, grad_out, eps=1e-6):
    """(∂L/∂x, ∂L/∂proj) for y = x + (x / sqrt(mean(x²) + ε) · weight) @ proj, by autograd."""
    x_, proj_ = x.detach().clone().requires_grad_(True), proj.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        u = x_ * torch.rsqrt(x_.pow(2).mean(-1, keepdim=True) + eps) * weight  # (..., D)
        y = x_ + u @ proj_  # (..., D)
        grad_x, grad_proj = torch.autograd.grad(y, (x_, proj_), grad_out)
    return grad_x.detach(), grad_proj.detach()


def _backward(x, weight, proj, g, eps=1e-6, *, identity=True, transpose_proj=True, transpose_norm=True,
              projection=True, over_d=True, sign=1.0, eps_in_r=True, grad_proj="u", proj_t=False):
    """The gradient with one knob turned: what a solution with that mistake computes."""
    d = x.shape[-1]
    r = torch.sqrt(x.pow(2).mean(-1, keepdim=True) + (eps if eps_in_r else 0.0))  # (..., 1)
    x_hat = x / r  # (..., D)
    u = x_hat * weight  # (..., D): what the sublayer reads
    gu = g @ (proj.transpose(-2, -1) if transpose_proj else proj)  # (..., D): ∂L/∂u
    if transpose_norm:  # Jᵀ gu: the gain first, then the projection
        wg = weight * gu
        dot = (x_hat * wg).mean(-1, keepdim=True) if over_d else (x_hat * wg).sum(-1, keepdim=True)
        through_norm = (wg - sign * (x_hat * dot if projection else 0.0)) / r
    else:  # J gu: the projection first, the gain after
        dot = (x_hat * gu).mean(-1, keepdim=True)
        through_norm = weight * (gu - x_hat * dot) / r
    grad_x = (g if identity else 0.0) + through_norm
    reads = {"u": u, "x": x, "x_hat": x_hat}[grad_proj].reshape(-1, d)  # (P, D)
    grad_w = reads.transpose(0, 1) @ g.reshape(-1, d)  # (D, D): summed over every position
    return grad_x, (grad_w.transpose(0, 1) if proj_t else grad_w)


def _backward_cases(gen) -> list[Case]:
    f64, f32 = torch.float64, torch.float32
    hand = (torch.tensor([3.0, 4.0], dtype=f64), torch.ones(2, dtype=f64), torch.eye(2, dtype=f64),
            torch.tensor([1.0, 0.0], dtype=f64))
    cases = [Case("x = (3, 4), weight = (1, 1), proj = the 2×2 identity, grad_out = (1, 0), eps = 0 (float64)",
                  hand, {"eps": 0.0})]
    for shape, dtype, scale, eps, note in [
        ((8,), f64, 1.0, 1e-6, ""),
        ((5, 6), f64, 2.0, 1e-6, ""),
        ((2, 3, 8), f64, 1.0, 1e-5, ""),
        ((4, 8), f64, 1e-3, 1e-6, " with mean(x²) comparable to eps"),
        ((3, 7), f64, 1.0, 0.5, ", eps = 0.5"),
        ((2, 4, 12), f32, 1.5, 1e-6, ""),
    ]:
        d = shape[-1]
        x = _randn(gen, *shape, scale=scale, dtype=dtype)
        weight = (1 + 0.5 * _randn(gen, d)).to(dtype)
        proj = (_randn(gen, d, d) / math.sqrt(d)).to(dtype)
        g = _randn(gen, *shape, dtype=dtype)
        cases.append(Case(f"x: {describe(x)}{note}, random weight, proj ({d}, {d}) and grad_out of x's shape",
                          (x, weight, proj, g), {"eps": eps}))
    return cases


def _backward_explain(got, want, case) -> str | None:
    grad_x, grad_proj = got
    if grad_proj.shape != want[1].shape:
        return ("grad_proj must have proj's shape (D, D): the same matrix is applied at every position, so its "
                "gradient sums the contributions of all of them (every leading dimension of x).")
    if grad_x.shape != want[0].shape:
        return "grad_x must have x's shape: it is ∂L/∂x, one number per entry of x."
    return None


def _bw(**knobs):
    return lambda x, w, p, g, eps=1e-6: _backward(x, w, p, g, eps, **knobs)


PRE_NORM_RESIDUAL_BACKWARD = Task(
    name="pre_norm_residual_backward", reference=_backward_reference, cases=_backward_cases, seed=607,
    rtol=1e-4, atol=1e-6,
    output=TupleOutput([TensorOutput("the dtype of x"), TensorOutput("the dtype of proj")],
                       ["grad_x", "grad_proj"]),
    explain=_backward_explain,
    mistakes=[
        Mistake("grad_x has no identity term. The skip connection y = x + … passes grad_out straight through: "
                "∂L/∂x = grad_out + (the gradient through the sublayer and the norm).", _bw(identity=False)),
        Mistake("the gradient through the sublayer multiplies by proj instead of its transpose: for u ↦ u @ proj "
                "the backward pass is grad_u = grad_out @ projᵀ.", _bw(transpose_proj=False)),
        Mistake("through the norm you multiplied by J instead of Jᵀ. γ_i scales row i of the norm's Jacobian, so "
                "in Jᵀ g it multiplies the incoming gradient before the projection: start from γ ⊙ grad_u.",
                _bw(transpose_norm=False)),
        Mistake("the norm is treated as a constant scale: r depends on x too, so the gradient through the norm "
                "has a second term, the one through r (∂r/∂x_j = x_j / (D r)).", _bw(projection=False)),
        Mistake("the term through r must average over the D features (a mean, not a sum): "
                "∂r/∂x_j = x_j / (D r).", _bw(over_d=False)),
        Mistake("the term through r has the wrong sign: increasing x_j increases r, which shrinks every "
                "normalized entry, so it is subtracted.", _bw(sign=-1.0)),
        Mistake("r must include ε: r = sqrt(mean(x²) + ε), as in the forward pass.", _bw(eps_in_r=False)),
        Mistake("grad_proj uses x; proj multiplies what the sublayer reads, u = x / r · weight, so "
                "∂L/∂proj = uᵀ grad_out summed over positions.", _bw(grad_proj="x")),
        Mistake("grad_proj uses x / r without the gain: the sublayer reads u = x / r · weight.",
                _bw(grad_proj="x_hat")),
        Mistake("grad_proj is transposed: for u ↦ u @ proj, ∂L/∂proj[i, j] = Σ u_i grad_out_j, i.e. uᵀ @ "
                "grad_out (rows index u's features).", _bw(proj_t=True)),
    ],
    forbid=Forbid(operations=("rms_norm", "layer_norm"), modules=_LIBRARY, autograd=True),
    hint="Write y = x + u @ proj with u = x / r · weight, and apply the chain rule one step at a time: "
         "grad_u from grad_out, then the transpose of the norm's Jacobian (chapter 5, 'The RMSNorm "
         "Jacobian'), then add the skip connection's term.",
)

check_pre_norm_residual_backward = PRE_NORM_RESIDUAL_BACKWARD.checker(
    """Check ``pre_norm_residual_backward(x, weight, proj, grad_out, eps=1e-6) -> (grad_x, grad_proj)`` for
    y = x + (x / sqrt(mean(x²) + eps) · weight) @ proj, without autograd.""")


# --- Task 3: residual-scaled initialisation (find and fix the bug) ---------------------------------------

# Roles of the checker's models, in the order the measurement reports them.
_WEIGHT_ROLES = ("w_q", "w_k", "w_v", "w_o", "w_gate", "w_up", "w_down", "lm_head")
_ROLES = _WEIGHT_ROLES + ("embed", "linear biases", "norm gains", "norm shifts")
_INPUT_PROJECTIONS = ("w_q", "w_k", "w_v", "w_gate", "w_up")


class _Attention(nn.Module):
    def __init__(self, d, bias):
        super().__init__()
        self.w_q, self.w_k = nn.Linear(d, d, bias=bias), nn.Linear(d, d, bias=bias)
        self.w_v, self.w_o = nn.Linear(d, d, bias=bias), nn.Linear(d, d, bias=bias)


class _FFN(nn.Module):
    def __init__(self, d, d_ff, gated, bias):
        super().__init__()
        if gated:
            self.w_gate = nn.Linear(d, d_ff, bias=bias)
        self.w_up, self.w_down = nn.Linear(d, d_ff, bias=bias), nn.Linear(d_ff, d, bias=bias)


class _Block(nn.Module):
    def __init__(self, d, d_ff, gated, bias, layer_norm):
        super().__init__()
        make_norm = (lambda: nn.LayerNorm(d)) if layer_norm else (lambda: nn.RMSNorm(d))
        self.attn_norm, self.attn = make_norm(), _Attention(d, bias)
        self.ffn_norm, self.ffn = make_norm(), _FFN(d, d_ff, gated, bias)


class _TinyLM(nn.Module):
    """A decoder-shaped model whose parameters are named by role, as in course_lib."""

    def __init__(self, n_layers, d, d_ff, vocab, gated, bias, layer_norm):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(_Block(d, d_ff, gated, bias, layer_norm) for _ in range(n_layers))
        self.final_norm = nn.RMSNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)


def _role(name: str) -> str:
    parts = name.split(".")
    if parts[-2] in _WEIGHT_ROLES:
        return parts[-2] if parts[-1] == "weight" else "linear biases"
    if parts[0] == "embed":
        return "embed"
    return "norm gains" if parts[-1] == "weight" else "norm shifts"


def _spec_model(spec: dict) -> _TinyLM:
    with torch.random.fork_rng(devices=[]):  # PyTorch's default initialisation, reproducibly
        torch.manual_seed(spec["seed"])
        return _TinyLM(spec["n_layers"], spec["d"], spec["d_ff"], spec["vocab"], spec["gated"], spec["bias"],
                       spec["layer_norm"])


def _measure(model: nn.Module) -> torch.Tensor:
    """Root-mean-square entry of every role's parameters together, (len(_ROLES),); −1 for absent roles."""
    groups: dict[str, list[torch.Tensor]] = {}
    for name, p in model.named_parameters():
        groups.setdefault(_role(name), []).append(p.detach().flatten().double())
    return torch.tensor([torch.cat(groups[r]).pow(2).mean().sqrt().item() if r in groups else -1.0
                         for r in _ROLES], dtype=torch.float64)


@functools.lru_cache(maxsize=16)
def _defaults(spec_items: tuple) -> tuple[torch.Tensor, float]:
    """What PyTorch's own initialisation leaves, per role, and the expected RMS of default biases."""
    model = _spec_model(dict(spec_items))
    total = count = 0
    for m in model.modules():  # nn.Linear's default bias is U(±1/√fan_in): mean square 1/(3 fan_in)
        if isinstance(m, nn.Linear) and m.bias is not None:
            total += m.bias.numel() / (3 * m.in_features)
            count += m.bias.numel()
    return _measure(model), (math.sqrt(total / count) if count else 0.0)


def _expected(spec: dict, *, factor=None, scaled_roles=("w_o", "w_down"), std=None, zero_bias=True,
              init_embed=True, init_linear=True, norm_gain=1.0) -> torch.Tensor:
    """The RMS per role that an initialisation with these choices gives (normal draws have RMS σ)."""
    std = spec["std"] if std is None else std
    factor = 1 / math.sqrt(2 * spec["n_layers"]) if factor is None else factor
    default, default_bias = _defaults(tuple(sorted(spec.items())))
    out = []
    for i, role in enumerate(_ROLES):
        if default[i] < 0:  # the role is absent from this model
            out.append(-1.0)
        elif role in _WEIGHT_ROLES:
            out.append((std * factor if role in scaled_roles else std) if init_linear else default[i].item())
        elif role == "embed":
            out.append(std if init_embed else default[i].item())
        elif role == "linear biases":
            out.append(0.0 if zero_bias else default_bias)
        elif role == "norm gains":
            out.append(norm_gain)
        else:  # norm shifts start at 0
            out.append(0.0)
    return torch.tensor(out, dtype=torch.float64)


def _spec_label(spec: dict) -> str:
    ffn = "SwiGLU FFN (w_gate, w_up, w_down)" if spec["gated"] else "FFN (w_up, w_down)"
    norm = "LayerNorm" if spec["layer_norm"] else "RMSNorm"
    bias = "with" if spec["bias"] else "without"
    return (f"a model of {spec['n_layers']} block(s) (attention w_q, w_k, w_v, w_o; {ffn}; {norm}; linear "
            f"layers {bias} biases; an embedding and an lm_head), n_layers = {spec['n_layers']}, "
            f"std = {spec['std']:g}")


_BASE = dict(d=128, d_ff=256, vocab=256)  # every role has ≥ 16384 entries: its RMS is within ±5 % of σ
_SPECS = [  # N = 1 not first: there 1/√N and 1/√(2N)'s mistakes coincide with others
    dict(_BASE, n_layers=4, std=0.02, gated=False, bias=True, layer_norm=True, seed=2),
    dict(_BASE, n_layers=1, std=0.02, gated=True, bias=False, layer_norm=False, seed=1),
    dict(_BASE, n_layers=12, std=0.02, gated=True, bias=False, layer_norm=False, seed=3),
    dict(_BASE, n_layers=6, std=0.1, gated=True, bias=True, layer_norm=False, seed=4),
    dict(_BASE, n_layers=2, std=0.05, gated=False, bias=True, layer_norm=False, seed=5),
]


def _run_init(student, spec):
    """Build a fresh model (unwatched), let the student initialise it (watched), measure it (unwatched)."""
    with paused():
        model = _spec_model(spec)
    with torch.random.fork_rng(devices=[]):  # reproducible draws, the caller's generator untouched
        torch.manual_seed(1000 + spec["seed"])
        if spec["std"] == 0.02:
            student(model, spec["n_layers"])
        else:
            student(model, spec["n_layers"], std=spec["std"])
    with paused():
        return _measure(model)


_INIT_MISTAKES = [
    Mistake("the norms' gains end at 0, as in the given version: the bug is not fixed yet. A norm whose gain "
            "is 0 outputs zeros, so every sublayer reads zeros and writes a constant. Initialise the linear "
            "and embedding weights and the linear biases; leave the norms' gains at 1.",
            lambda s: _expected(s, norm_gain=0.0)),
    Mistake("the scale factor counts blocks, 1/√N. Each block has two residual branches (attention and FFN), "
            "so 2N branches add to the stream: scale by 1/√(2N).",
            lambda s: _expected(s, factor=1 / math.sqrt(s["n_layers"]))),
    Mistake("you divided the standard deviation by 2N. It is the variance that shrinks by 1/(2N); the "
            "standard deviation shrinks by 1/√(2N).", lambda s: _expected(s, factor=1 / (2 * s["n_layers"]))),
    Mistake("you multiplied by √(2N) instead of dividing: deep models need smaller residual projections.",
            lambda s: _expected(s, factor=math.sqrt(2 * s["n_layers"]))),
    Mistake("you scaled every linear layer. Only the residual output projections, w_o and w_down, get "
            "σ/√(2N); all other matrices keep σ.", lambda s: _expected(s, scaled_roles=_WEIGHT_ROLES)),
    Mistake("you scaled the input projections (w_q, w_k, w_v, w_gate, w_up). The scaled matrices are the ones "
            "that write into the residual stream: w_o and w_down.",
            lambda s: _expected(s, scaled_roles=_INPUT_PROJECTIONS)),
    Mistake("only w_down is scaled: the attention output projection w_o also writes into the residual stream "
            "and needs σ/√(2N).", lambda s: _expected(s, scaled_roles=("w_down",))),
    Mistake("only w_o is scaled: the FFN's output projection w_down also writes into the residual stream and "
            "needs σ/√(2N).", lambda s: _expected(s, scaled_roles=("w_o",))),
    Mistake("nothing is scaled: w_o and w_down must get σ/√(2N), not σ.", lambda s: _expected(s, scaled_roles=())),
    Mistake("the `std` argument is ignored: use it instead of 0.02.", lambda s: _expected(s, std=0.02)),
    Mistake("you re-initialised the norms' gains. RMSNorm and LayerNorm gains must keep their value 1 "
            "(initialise only nn.Linear and nn.Embedding parameters).", lambda s: _expected(s, norm_gain=s["std"])),
    Mistake("the linear layers' biases keep PyTorch's default values: set them to 0.",
            lambda s: _expected(s, zero_bias=False)),
    Mistake("the embedding keeps PyTorch's default N(0, 1): initialise nn.Embedding weights with N(0, σ²).",
            lambda s: _expected(s, init_embed=False)),
    Mistake("the linear weights keep PyTorch's default initialisation: draw them from N(0, σ²).",
            lambda s: _expected(s, init_linear=False)),
]


def _init_explain(got, want, case) -> str | None:
    """Name the roles with the wrong spread, when no single catalogued mistake explains the result."""
    (spec,) = case.args
    for mistake in _INIT_MISTAKES:
        wrong = mistake.compute(spec)
        if torch.allclose(got, wrong, rtol=0.05, atol=1e-7) and not torch.allclose(wrong, want, rtol=0.05,
                                                                                    atol=1e-7):
            return None  # the core names it
    bad = [role for role, g, w in zip(_ROLES, got.tolist(), want.tolist())
           if not math.isclose(g, w, rel_tol=0.05, abs_tol=1e-7)]
    return (f"these parameters get the wrong spread: {', '.join(bad)}. Check which modules you initialise and "
            f"with which standard deviation.")


RESIDUAL_SCALED_INIT = Task(
    name="residual_scaled_init_", reference=_expected, seed=608,
    cases=lambda gen: [Case(_spec_label(s), (s,)) for s in _SPECS],
    run=_run_init, output=TensorOutput("float64 statistics"), rtol=0.05, atol=1e-7,
    explain=_init_explain, mistakes=_INIT_MISTAKES,
    forbid=Forbid(modules=(init_ref,)),
)

check_residual_scaled_init = RESIDUAL_SCALED_INIT.checker(
    """Check ``residual_scaled_init_(model, n_layers, std=0.02)``: every nn.Linear weight ~ N(0, std²) except
    w_o and w_down ~ N(0, std²/(2·n_layers)), linear biases 0, nn.Embedding ~ N(0, std²), norms untouched.
    Checked statistically: the RMS of each role's parameters against the σ it should have.""")


# --- Task 4: predictions -----------------------------------------------------------------------------------


# Wrong predictions that reveal a specific misunderstanding, key by key.
_WRONG_PREDICTIONS = {
    "paths": [
        (2.0 ** 6, "each residual *branch* is taken or skipped, and a block has two (attention and FFN): count "
                   "branches, not blocks."),
        (12.0, "that is the number of branches; a path chooses, for each branch, to go through it or skip it."),
        (2.0 ** 12 - 1, "the path that skips every branch — the identity — is a path too."),
    ],
    "stream_rms": [
        (9.0, "RMS values do not add: for uncorrelated updates the mean squares (variances) add."),
        (math.sqrt(3.0), "count the writes: every block has two sublayers, and each adds its update."),
        (1.0, "the stream of a pre-norm stack is never normalized: only the copies the sublayers read are."),
        (5.0, "that is the mean square; the question asks for the root mean square."),
    ],
    "post_norm_gradient": [
        (3.0 ** -21, "the norm brings every sum back to RMS 1, so each sublayer divides the gradient by the same "
                     "3; the stream does not keep growing from one sublayer to the next."),
        (1.0, "in post-norm the skip connection's identity also passes through the norm: the gradient is "
              "divided by rms(x + b) at every sublayer."),
        (3.0 ** 6, "the ratio is upside down: the gradient at the input is the smaller one."),
        (3.0 ** -12, "each sublayer divides the gradient by rms(x + b) = 3 once: six sublayers, six factors."),
    ],
    "concat_width": [
        (512.0 * 17, "each block appends two outputs (attention and FFN), not one."),
        (512.0 * 32, "the embeddings are the first part of the stream, and stay in it."),
        (512.0, "that is the width when the outputs are added; appending grows the stream with every write."),
    ],
}


def _true_predictions() -> dict[str, float]:
    n_blocks = 6
    return {
        "paths": float(2 ** (2 * n_blocks)),  # two branches per block, each taken or skipped
        "stream_rms": math.sqrt(1.0 + 2 * 8 * 0.5 ** 2),  # 16 uncorrelated writes of RMS 0.5
        "post_norm_gradient": 3.0 ** -6,  # rms(x + b) = sqrt(1 + 8) = 3 at each of 6 sublayers
        "concat_width": float(512 * (1 + 2 * 16)),  # the embeddings and 32 writes of width 512
    }


def _close_enough(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-3 * max(abs(a), abs(b), 1e-300)


RESIDUAL_PREDICTIONS = predictions_task(
    truth=_true_predictions,
    wrong=_WRONG_PREDICTIONS,
    seed=609,
    rtol=1e-3,
    atol=0.0,
    advice="Work it out on paper first, then run the experiment below.",
)

check_residual_predictions = RESIDUAL_PREDICTIONS.checker(
    """Check ``predictions() -> dict``: the number of paths through 6 blocks, the RMS of a pre-norm stream
    after 8 blocks of uncorrelated writes, a post-norm gradient ratio after 6 sublayers, and the width of a
    concatenated stream.""")
