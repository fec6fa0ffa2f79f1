"""The chapter 5 checkers: correct solutions pass, each common mistake is named, delegation is refused,
and no message leaks a reference value."""

from functools import partial

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import course_lib
from course_lib.grading import check_layer_norm, check_rms_norm, check_rms_norm_jacobian

from grading_helpers import expect_failure, no_values_leak

# --- correct solutions written independently of course_lib -----------------------------------------


def good_layer_norm(x, weight, bias, eps=1e-5):
    centred = x - x.mean(dim=-1, keepdim=True)
    var = (centred * centred).mean(dim=-1, keepdim=True)
    return weight * centred / torch.sqrt(var + eps) + bias


def var_layer_norm(x, weight, bias, eps=1e-5):  # torch.var with correction=0 is fine
    mu = x.mean(-1, keepdim=True)
    return (x - mu) * torch.rsqrt(x.var(-1, keepdim=True, correction=0) + eps) * weight + bias


def good_rms_norm(x, weight, eps=1e-6):
    x32 = x.float()
    ms = (x32 * x32).mean(dim=-1, keepdim=True)
    return (x32 / torch.sqrt(ms + eps)).type_as(x) * weight


def float32_out_rms_norm(x, weight, eps=1e-6):  # returning float32 for half inputs is fine
    x32 = x.to(torch.float64 if x.dtype == torch.float64 else torch.float32)
    return x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * weight.to(x32.dtype)


def good_jacobian(x, weight, eps=1e-6):
    d = x.shape[-1]
    r = torch.sqrt((x**2).mean(-1, keepdim=True) + eps)  # (..., 1)
    x_hat = x / r
    core = torch.eye(d, dtype=x.dtype) - torch.einsum("...i,...j->...ij", x_hat, x_hat) / d
    return torch.diag(weight) @ core / r.unsqueeze(-1)


@pytest.mark.parametrize(
    "checker, solution",
    [(check_layer_norm, good_layer_norm), (check_layer_norm, var_layer_norm),
     (check_rms_norm, good_rms_norm), (check_rms_norm, float32_out_rms_norm),
     (check_rms_norm_jacobian, good_jacobian)],
)
def test_correct_solutions_pass(checker, solution):
    checker(solution)


# --- mistakes are named ----------------------------------------------------------------------------

expect = partial(expect_failure, no_leak=partial(no_values_leak, max_decimals=2))


def ln_with(x, w, b, eps, *, unbiased=False, outside=False, no_eps=False, dim=-1, centre=True):
    mu = x.mean(dim, keepdim=True) if centre else 0.0
    var = x.var(dim, keepdim=True, unbiased=unbiased) if centre else (x * x).mean(dim, keepdim=True)
    denom = var.sqrt() + eps if outside else var.sqrt() if no_eps else (var + eps).sqrt()
    return (x - mu) / denom * w + b


LAYER_NORM_MISTAKES = {
    "Bessel's correction": lambda x, w, b, eps=1e-5: ln_with(x, w, b, eps, unbiased=True),
    "ε is outside the square root": lambda x, w, b, eps=1e-5: ln_with(x, w, b, eps, outside=True),
    "ε is missing": lambda x, w, b, eps=1e-5: ln_with(x, w, b, eps, no_eps=True),
    "that is BatchNorm": lambda x, w, b, eps=1e-5: ln_with(x, w, b, eps, dim=0),
    "the mean is not subtracted": lambda x, w, b, eps=1e-5: ln_with(x, w, b, eps, centre=False),
    "weight and bias are swapped": lambda x, w, b, eps=1e-5: ln_with(x, b, w, eps),
    "the bias β is not added": lambda x, w, b, eps=1e-5: ln_with(x, w, 0.0, eps),
    "the weight γ is not applied": lambda x, w, b, eps=1e-5: ln_with(x, 1.0, b, eps),
}


@pytest.mark.parametrize("fragment", LAYER_NORM_MISTAKES)
def test_layer_norm_mistakes_are_named(fragment):
    expect(check_layer_norm, LAYER_NORM_MISTAKES[fragment], fragment)


def rms_with(x, w, eps, *, outside=False, no_eps=False, dim=-1, total="mean", root=True, upcast=True):
    xc = x.float() if upcast and x.dtype in (torch.float16, torch.bfloat16) else x
    ms = {"mean": lambda: (xc * xc).mean(dim, keepdim=True), "sum": lambda: (xc * xc).sum(dim, keepdim=True),
          "all": lambda: (xc * xc).mean()}[total]()
    if not root:
        denom = ms + eps
    else:
        denom = ms.sqrt() + eps if outside else ms.sqrt() if no_eps else (ms + eps).sqrt()
    return (xc / denom).to(x.dtype) * w


RMS_NORM_MISTAKES = {
    "ε is outside the square root": lambda x, w, eps=1e-6: rms_with(x, w, eps, outside=True),
    "ε is missing": lambda x, w, eps=1e-6: rms_with(x, w, eps, no_eps=True),
    "that is LayerNorm": lambda x, w, eps=1e-6: good_rms_norm(x - x.mean(-1, keepdim=True), w, eps),
    "divided by the standard deviation": lambda x, w, eps=1e-6: x / torch.sqrt(x.var(-1, keepdim=True) + eps) * w,
    "the squares are summed": lambda x, w, eps=1e-6: rms_with(x, w, eps, total="sum"),
    "the square root is missing": lambda x, w, eps=1e-6: rms_with(x, w, eps, root=False),
    "the wrong dimension": lambda x, w, eps=1e-6: rms_with(x, w, eps, dim=0),
    "over the whole tensor": lambda x, w, eps=1e-6: rms_with(x, w, eps, total="all"),
    "the weight γ is not applied": lambda x, w, eps=1e-6: rms_with(x, 1.0, eps),
    "is not upcast": lambda x, w, eps=1e-6: rms_with(x, w, eps, upcast=False),
}


@pytest.mark.parametrize("fragment", RMS_NORM_MISTAKES)
def test_rms_norm_mistakes_are_named(fragment):
    expect(check_rms_norm, RMS_NORM_MISTAKES[fragment], fragment)


def jac_with(x, w, eps, *, r_eps=True, outside=False, side="rows", over_d=True, use_hat=True, eye=True):
    d = x.shape[-1]
    ms = (x * x).mean(-1, keepdim=True)
    r = ms.sqrt() + eps if outside else (ms + eps).sqrt() if r_eps else ms.sqrt()
    v = x / r if use_hat else x
    core = (torch.eye(d, dtype=x.dtype) if eye else 0) - v[..., :, None] * v[..., None, :] / (d if over_d else 1)
    core = core / r[..., None]
    return {"rows": w[:, None] * core, "columns": core * w[None, :], "none": core}[side]


JACOBIAN_MISTAKES = {
    "r must include ε": lambda x, w, eps=1e-6: jac_with(x, w, eps, r_eps=False),
    "ε is outside the square root": lambda x, w, eps=1e-6: jac_with(x, w, eps, outside=True),
    "the weight scales the columns": lambda x, w, eps=1e-6: jac_with(x, w, eps, side="columns"),
    "the weight γ is missing": lambda x, w, eps=1e-6: jac_with(x, w, eps, side="none"),
    "divided by D": lambda x, w, eps=1e-6: jac_with(x, w, eps, over_d=False),
    "the outer product uses x": lambda x, w, eps=1e-6: jac_with(x, w, eps, use_hat=False),
    "the identity term is missing": lambda x, w, eps=1e-6: jac_with(x, w, eps, eye=False),
}


@pytest.mark.parametrize("fragment", JACOBIAN_MISTAKES)
def test_jacobian_mistakes_are_named(fragment):
    expect(check_rms_norm_jacobian, JACOBIAN_MISTAKES[fragment], fragment)


def test_unrecognised_wrong_answers_get_a_generic_hint():
    expect(check_layer_norm, lambda x, w, b, eps=1e-5: good_layer_norm(x, w, b, eps) * 1.01, "wrong values",
           "(1, 2, 3, 4)")
    expect(check_rms_norm_jacobian, lambda x, w, eps=1e-6: good_jacobian(x, w, eps).diagonal(dim1=-2, dim2=-1),
           "shape")


def test_not_implemented_and_crashes_are_reported():
    def todo(x, weight, eps=1e-6):
        raise NotImplementedError()

    expect(check_rms_norm, todo, "not implemented yet")
    expect(check_rms_norm, lambda x, weight, eps=1e-6: x.rms(), "raised AttributeError")
    expect(check_rms_norm, lambda x, weight, eps=1e-6: good_rms_norm(x, weight, eps).sum(), "returned shape")


# --- delegation is refused -------------------------------------------------------------------------

def test_torch_and_course_lib_versions_are_refused():
    expect(check_layer_norm, lambda x, w, b, eps=1e-5: F.layer_norm(x, (x.shape[-1],), w, b, eps),
           "calls torch.nn.functional.layer_norm")
    expect(check_layer_norm, lambda x, w, b, eps=1e-5: torch.layer_norm(x, (x.shape[-1],), w, b, eps),
           "calls torch.layer_norm")
    expect(check_layer_norm, course_lib.norms.layer_norm, "calls course_lib.norms.layer_norm")
    expect(check_rms_norm, lambda x, w, eps=1e-6: F.rms_norm(x, (x.shape[-1],), w, eps),
           "calls torch.nn.functional.rms_norm")
    expect(check_rms_norm, lambda x, w, eps=1e-6: torch.rms_norm(x, (x.shape[-1],), w, eps), "scores no points")

    def via_module(x, w, eps=1e-6):
        module = nn.RMSNorm(x.shape[-1], eps=eps).to(x.dtype)
        with torch.no_grad():
            module.weight.copy_(w)
        return module(x)

    expect(check_rms_norm, via_module, "scores no points")
    expect(check_rms_norm, lambda x, w, eps=1e-6: course_lib.norms.RMSNorm(x.shape[-1], eps).to(x.dtype)(x) * w,
           "scores no points")


def test_autograd_is_refused_for_the_jacobian():
    from torch.autograd.functional import jacobian

    def by_autograd(x, w, eps=1e-6):
        return jacobian(lambda v: good_rms_norm(v, w, eps), x)

    expect(check_rms_norm_jacobian, by_autograd, "calls torch.autograd.functional.jacobian")
    expect(check_rms_norm_jacobian, lambda x, w, eps=1e-6: torch.func.jacrev(lambda v: good_rms_norm(v, w, eps))(x),
           "scores no points")
    expect(check_rms_norm_jacobian, course_lib.norms.rms_norm_jacobian, "calls course_lib.norms.rms_norm_jacobian")
