"""Checkers for exercise 06 (the residual stream): a pre-norm residual sublayer with its RMSNorm, and
GPT-2's residual-scaled initialisation."""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
from torch import nn

from .. import init as init_ref
from .. import norms
from .. import residual as residual_ref
from ._core import Case, Forbidden, GradingError, Mistake, check_function, describe

__all__ = ["check_pre_norm_residual", "check_residual_scaled_init"]

# float32 students must pass on float64 inputs too: the mistakes below differ by far more than this.
_RTOL, _ATOL = 1e-4, 1e-5


# --- Task 1: the pre-norm residual sublayer -------------------------------------------------------------

def _rms_norm(x, weight, eps, *, eps_outside=False, all_dims=False, centre=False):
    """RMSNorm with one knob turned: what a solution with that mistake computes."""
    if centre:
        x = x - x.mean(-1, keepdim=True)  # LayerNorm's centring, which RMSNorm does not do
    dims = tuple(range(x.dim())) if all_dims else (-1,)
    ms = x.pow(2).mean(dims, keepdim=True)
    denom = ms.sqrt() + eps if eps_outside else torch.sqrt(ms + eps)
    y = x / denom
    return y if weight is None else y * weight


def _pre_norm_reference(x, sublayer, weight, eps=1e-6):
    return x + sublayer(norms.rms_norm(x, weight, eps))


def _linear(gen, d):
    a = torch.randn(d, d, generator=gen, dtype=torch.float64) / math.sqrt(d)
    return lambda y: y @ a.to(y.dtype)


def _mlp(gen, d):
    w_up = torch.randn(d, 4 * d, generator=gen, dtype=torch.float64) / math.sqrt(d)
    w_down = torch.randn(4 * d, d, generator=gen, dtype=torch.float64) / math.sqrt(4 * d)
    return lambda y: torch.tanh(y @ w_up.to(y.dtype)) @ w_down.to(y.dtype)


def _gated(gen, d):
    w_gate = torch.randn(d, 3 * d, generator=gen, dtype=torch.float64) / math.sqrt(d)
    w_up = torch.randn(d, 3 * d, generator=gen, dtype=torch.float64) / math.sqrt(d)
    w_down = torch.randn(3 * d, d, generator=gen, dtype=torch.float64) / math.sqrt(3 * d)

    def gated(y):
        gate = y @ w_gate.to(y.dtype)
        return (gate * torch.sigmoid(gate) * (y @ w_up.to(y.dtype))) @ w_down.to(y.dtype)

    return gated


def _constant(gen, d):
    c = torch.randn(d, generator=gen, dtype=torch.float64)
    return lambda y: c.to(y.dtype).expand_as(y)  # ignores its input


def check_pre_norm_residual(pre_norm_residual) -> None:
    """Check ``pre_norm_residual(x, sublayer, weight, eps=1e-6)``:
    x + sublayer(x / sqrt(mean(x², last dim) + eps) · weight)."""
    task = "pre_norm_residual"
    if not callable(pre_norm_residual):
        raise GradingError(f"{task} should be a function, but it is a {type(pre_norm_residual).__name__}.")
    gen = torch.Generator().manual_seed(606)

    def tensor(*shape, scale=1.0, dtype=torch.float64):
        return (scale * torch.randn(shape, generator=gen, dtype=torch.float64)).to(dtype)

    cases = []
    specs = [  # (shape, dtype, scale of x, eps, sublayer kind)
        ((8,), torch.float64, 3.0, 1e-6, "a linear map"),
        ((5, 16), torch.float64, 3.0, 1e-6, "a small MLP"),
        ((2, 6, 16), torch.float64, 0.5, 1e-5, "a gated (SwiGLU-like) FFN"),
        ((3, 4, 32), torch.float32, 4.0, 1e-6, "a small MLP"),
        ((2, 5, 8), torch.float64, 0.2, 0.1, "a linear map"),
        ((4, 8), torch.float64, 3.0, 1e-6, "a sublayer that ignores its input (a constant)"),
        ((2, 3, 8), torch.float64, 2.0, 1e-6, "the zero function"),
    ]
    makers = {"a linear map": _linear, "a small MLP": _mlp, "a gated (SwiGLU-like) FFN": _gated,
              "a sublayer that ignores its input (a constant)": _constant,
              "the zero function": lambda g, dd: torch.zeros_like}
    for shape, dtype, scale, eps, kind in specs:
        x = tensor(*shape, scale=scale, dtype=dtype)
        weight = (1 + 0.3 * tensor(shape[-1])).to(dtype)
        cases.append(Case(f"x {describe(x)}, a random weight of shape ({shape[-1]},), eps = {eps:g}, "
                          f"with {kind} as the sublayer", (x, makers[kind](gen, shape[-1]), weight),
                          {"eps": eps}))
    # the self-check's case, last: several mistakes give the same answer on it
    cases.append(Case("x = 2 · ones(4), weight = ones(4), eps = 0 and the identity as sublayer",
                      (2 * torch.ones(4, dtype=torch.float64), lambda y: y, torch.ones(4, dtype=torch.float64)),
                      {"eps": 0.0}))

    def norm_then(fn):
        return lambda x, f, w, eps=1e-6: fn(x, f, w, eps)

    mistakes = [
        Mistake("this is post-norm, Norm(x + F(x)): you normalized after adding. Pre-norm normalizes only the "
                "copy the sublayer reads, x + F(Norm(x)), and never the stream x itself.",
                norm_then(lambda x, f, w, eps: _rms_norm(x + f(x), w, eps))),
        Mistake("the residual adds the normalized input. Keep the raw x for the skip connection: "
                "x + F(Norm(x)), not Norm(x) + F(Norm(x)) — a line like `x = norm(x)` overwrote it.",
                norm_then(lambda x, f, w, eps: _rms_norm(x, w, eps) + f(_rms_norm(x, w, eps)))),
        Mistake("the residual connection is missing: you returned F(Norm(x)); add the input x back.",
                norm_then(lambda x, f, w, eps: f(_rms_norm(x, w, eps)))),
        Mistake("the sublayer reads x itself: it must read the normalized copy Norm(x).",
                norm_then(lambda x, f, w, eps: x + f(x))),
        Mistake("you normalized the output as well. In pre-norm the stream x + F(Norm(x)) is left "
                "un-normalized (the model applies one final norm at the very end).",
                norm_then(lambda x, f, w, eps: _rms_norm(x + f(_rms_norm(x, w, eps)), w, eps))),
        Mistake("ε goes inside the square root: x / sqrt(mean(x²) + ε), not x / (sqrt(mean(x²)) + ε).",
                norm_then(lambda x, f, w, eps: x + f(_rms_norm(x, w, eps, eps_outside=True)))),
        Mistake("the gain `weight` is not applied: RMSNorm multiplies the normalized vector by it.",
                norm_then(lambda x, f, w, eps: x + f(_rms_norm(x, None, eps)))),
        Mistake("normalize each position over its own features (the last dimension), not over the "
                "whole tensor.",
                norm_then(lambda x, f, w, eps: x + f(_rms_norm(x, w, eps, all_dims=True)))),
        Mistake("RMSNorm does not subtract the mean (that is LayerNorm); divide x by its root mean square.",
                norm_then(lambda x, f, w, eps: x + f(_rms_norm(x, w, eps, centre=True)))),
    ]
    forbidden = [
        Forbidden(norms.rms_norm, "course_lib.norms.rms_norm"),
        Forbidden(norms.RMSNorm.forward, "course_lib.norms.RMSNorm"),
        Forbidden(residual_ref.PreNormResidual.forward, "course_lib.residual.PreNormResidual"),
        Forbidden(residual_ref.PostNormResidual.forward, "course_lib.residual.PostNormResidual"),
        Forbidden(F.rms_norm, "torch.nn.functional.rms_norm"),
        Forbidden(torch.rms_norm, "torch.rms_norm"),
        Forbidden(nn.RMSNorm.forward, "torch.nn.RMSNorm"),
    ]
    mutated = []

    def run(x, sublayer, weight, eps=1e-6):  # the student's function on copies, watching for x += ...
        x_copy, weight_copy = x.clone(), weight.clone()
        out = pre_norm_residual(x_copy, sublayer, weight_copy, eps=eps)
        if not torch.equal(x_copy, x):
            mutated.append(True)
        return out

    check_function(run, _pre_norm_reference, cases, task=task, mistakes=mistakes, forbidden=forbidden,
                   rtol=_RTOL, atol=_ATOL)
    if mutated:
        raise GradingError(f"{task} returns the right values but modifies its input x in place (an `x += ...` "
                           f"or `x.mul_(...)`). In a model other code still needs x: build a new tensor, "
                           f"`x + ...`.")


# --- Task 2: residual-scaled initialisation ---------------------------------------------------------------

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


def _by_role(model: nn.Module) -> dict[str, list[torch.Tensor]]:
    groups: dict[str, list[torch.Tensor]] = {}
    for name, p in model.named_parameters():
        groups.setdefault(_role(name), []).append(p.detach())
    return groups


def _measure(groups: dict[str, list[torch.Tensor]]) -> torch.Tensor:
    """Root-mean-square entry of every role's parameters together, (len(_ROLES),); −1 for absent roles."""
    return torch.tensor([torch.cat([p.flatten().double() for p in groups[r]]).pow(2).mean().sqrt().item()
                         if r in groups else -1.0 for r in _ROLES], dtype=torch.float64)


def _expected(spec: dict, *, factor=None, scaled_roles=("w_o", "w_down"), std=None, zero_bias=True,
              init_embed=True, init_linear=True, norm_gain=1.0) -> torch.Tensor:
    """The RMS per role that an initialisation with these choices gives (0.02-style normals have RMS σ)."""
    std = spec["std"] if std is None else std
    n = spec["n_layers"]
    factor = 1 / math.sqrt(2 * n) if factor is None else factor
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


@functools.lru_cache(maxsize=16)
def _defaults(spec_items: tuple) -> tuple[torch.Tensor, float]:
    """What PyTorch's own initialisation leaves, per role, and the expected RMS of default biases."""
    model = _spec_model(dict(spec_items))
    return _measure(_by_role(model)), _default_bias_rms(model)


def _default_bias_rms(model: nn.Module) -> float:
    """nn.Linear's default bias is U(−1/√fan_in, 1/√fan_in): mean square 1/(3 fan_in) per entry."""
    total, count = 0.0, 0
    for m in model.modules():
        if isinstance(m, nn.Linear) and m.bias is not None:
            total += m.bias.numel() / (3 * m.in_features)
            count += m.bias.numel()
    return math.sqrt(total / count) if count else 0.0


def _spec_label(spec: dict) -> str:
    ffn = "SwiGLU FFN (w_gate, w_up, w_down)" if spec["gated"] else "FFN (w_up, w_down)"
    norm = "LayerNorm" if spec["layer_norm"] else "RMSNorm"
    bias = "with" if spec["bias"] else "without"
    return (f"a model of {spec['n_layers']} block(s) (attention w_q, w_k, w_v, w_o; {ffn}; {norm}; linear "
            f"layers {bias} biases; an embedding and an lm_head), n_layers = {spec['n_layers']}, "
            f"std = {spec['std']:g}")


def check_residual_scaled_init(residual_scaled_init_) -> None:
    """Check ``residual_scaled_init_(model, n_layers, std=0.02)``: every nn.Linear weight ~ N(0, std²)
    except w_o and w_down ~ N(0, std²/(2·n_layers)), linear biases 0, nn.Embedding ~ N(0, std²), norms
    untouched. Checked statistically: the RMS of each role's parameters against the σ it should have."""
    task = "residual_scaled_init_"
    if not callable(residual_scaled_init_):
        raise GradingError(f"{task} should be a function, but it is a {type(residual_scaled_init_).__name__}.")
    base = dict(d=128, d_ff=256, vocab=256)  # every role has ≥ 16384 entries
    specs = [  # N = 1 not first: there 1/√N and 1/√(2N)'s mistakes coincide with others
        dict(base, n_layers=4, std=0.02, gated=False, bias=True, layer_norm=True, seed=2),
        dict(base, n_layers=1, std=0.02, gated=True, bias=False, layer_norm=False, seed=1),
        dict(base, n_layers=12, std=0.02, gated=True, bias=False, layer_norm=False, seed=3),
        dict(base, n_layers=6, std=0.1, gated=True, bias=True, layer_norm=False, seed=4),
        dict(base, n_layers=2, std=0.05, gated=False, bias=True, layer_norm=False, seed=5),
    ]
    cases = [Case(_spec_label(s), (s,)) for s in specs]

    def run(spec):
        model = _spec_model(spec)
        with torch.random.fork_rng(devices=[]):  # reproducible draws, the caller's generator untouched
            torch.manual_seed(1000 + spec["seed"])
            if spec["std"] == 0.02:
                residual_scaled_init_(model, spec["n_layers"])
            else:
                residual_scaled_init_(model, spec["n_layers"], std=spec["std"])
        return _measure(_by_role(model))

    def reference(spec):
        return _expected(spec)

    mistakes = [
        Mistake("the scale factor counts blocks, 1/√N. Each block has two residual branches (attention "
                "and FFN), so 2N branches add to the stream: scale by 1/√(2N).",
                lambda s: _expected(s, factor=1 / math.sqrt(s["n_layers"]))),
        Mistake("you divided the standard deviation by 2N. It is the variance that shrinks by 1/(2N); the "
                "standard deviation shrinks by 1/√(2N).",
                lambda s: _expected(s, factor=1 / (2 * s["n_layers"]))),
        Mistake("you multiplied by √(2N) instead of dividing: deep models need smaller residual projections.",
                lambda s: _expected(s, factor=math.sqrt(2 * s["n_layers"]))),
        Mistake("you scaled every linear layer. Only the residual output projections, w_o and w_down, "
                "get σ/√(2N); all other matrices keep σ.",
                lambda s: _expected(s, scaled_roles=_WEIGHT_ROLES)),
        Mistake("you scaled the input projections (w_q, w_k, w_v, w_gate, w_up). The scaled matrices are "
                "the ones that write into the residual stream: w_o and w_down.",
                lambda s: _expected(s, scaled_roles=_INPUT_PROJECTIONS)),
        Mistake("only w_down is scaled: the attention output projection w_o also writes into the residual "
                "stream and needs σ/√(2N).",
                lambda s: _expected(s, scaled_roles=("w_down",))),
        Mistake("only w_o is scaled: the FFN's output projection w_down also writes into the residual "
                "stream and needs σ/√(2N).",
                lambda s: _expected(s, scaled_roles=("w_o",))),
        Mistake("nothing is scaled: w_o and w_down must get σ/√(2N), not σ.",
                lambda s: _expected(s, scaled_roles=())),
        Mistake("the `std` argument is ignored: use it instead of 0.02.",
                lambda s: _expected(s, std=0.02)),
        Mistake("you re-initialised the norms' gains. RMSNorm and LayerNorm gains must keep their value "
                "1 (initialise only nn.Linear and nn.Embedding weights).",
                lambda s: _expected(s, norm_gain=s["std"])),
        Mistake("you set the norms' gains to 0, which switches every norm off. Leave them at 1.",
                lambda s: _expected(s, norm_gain=0.0)),
        Mistake("the linear layers' biases keep PyTorch's default values: set them to 0.",
                lambda s: _expected(s, zero_bias=False)),
        Mistake("the embedding keeps PyTorch's default N(0, 1): initialise nn.Embedding weights with N(0, σ²).",
                lambda s: _expected(s, init_embed=False)),
        Mistake("the linear weights keep PyTorch's default initialisation: draw them from N(0, σ²).",
                lambda s: _expected(s, init_linear=False)),
    ]
    forbidden = [
        Forbidden(init_ref.gpt2_init_, "course_lib.init.gpt2_init_"),
        Forbidden(init_ref.residual_std, "course_lib.init.residual_std"),
    ]
    try:
        # the RMS of ≥ 16384 normal draws is within ±5 % of σ (9 standard errors) in practice always
        check_function(run, reference, cases, task=task, mistakes=mistakes, forbidden=forbidden,
                       rtol=0.05, atol=1e-7)
    except GradingError as err:
        if "returns wrong values" not in str(err):
            raise
        raise GradingError(_which_roles(run, reference, cases, task)) from None


def _which_roles(run, reference, cases, task) -> str:
    """The generic failure, made specific: which parameter roles have the wrong spread."""
    for case in cases:
        got, want = run(*case.args), reference(*case.args)
        wrong = [role for role, g, w in zip(_ROLES, got, want)
                 if not math.isclose(g.item(), w.item(), rel_tol=0.05, abs_tol=1e-7)]
        if wrong:
            return (f"{task} gives the wrong spread to these parameters for {case.label}: {', '.join(wrong)}. "
                    f"Check which modules you initialise and with which standard deviation.")
    return f"{task} gives results that vary from call to call; draw with torch's random functions only."
