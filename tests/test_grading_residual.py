"""The chapter 6 checkers: correct solutions pass, each common mistake is named, delegation is refused,
in-place modification is caught, and no message leaks a reference value."""

from functools import partial
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import course_lib
from course_lib.grading import GradingError, check_pre_norm_residual, check_residual_scaled_init

from grading_helpers import expect_failure, no_values_leak


expect = partial(expect_failure, no_leak=partial(no_values_leak, max_decimals=2))


# --- Task 1: pre-norm residual sublayer -------------------------------------------------------------------

def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def good_pre_norm(x, sublayer, weight, eps=1e-6):
    return x + sublayer(rms_norm(x, weight, eps))


def float32_pre_norm(x, sublayer, weight, eps=1e-6):  # normalizing in float32 is fine
    normed = rms_norm(x.float(), weight.float(), eps).to(x.dtype)
    return x + sublayer(normed)


def llama_style(x, sublayer, weight, eps=1e-6):  # residual = x; h = norm(h); h = f(h); residual + h
    residual = x
    h = x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps)
    h = sublayer(weight * h)
    return residual + h


@pytest.mark.parametrize("solution", [good_pre_norm, float32_pre_norm, llama_style])
def test_correct_pre_norm_solutions_pass(solution):
    check_pre_norm_residual(solution)


PRE_NORM_MISTAKES = {
    "this is post-norm": lambda x, f, w, eps=1e-6: rms_norm(x + f(x), w, eps),
    "the residual adds the normalized input": lambda x, f, w, eps=1e-6: rms_norm(x, w, eps) + f(rms_norm(x, w, eps)),
    "the residual connection is missing": lambda x, f, w, eps=1e-6: f(rms_norm(x, w, eps)),
    "the sublayer reads x itself": lambda x, f, w, eps=1e-6: x + f(x),
    "you normalized the output as well": lambda x, f, w, eps=1e-6: rms_norm(x + f(rms_norm(x, w, eps)), w, eps),
    "ε goes inside the square root": lambda x, f, w, eps=1e-6: x + f(
        x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps) * w),
    "the gain `weight` is not applied": lambda x, f, w, eps=1e-6: x + f(rms_norm(x, torch.ones_like(w), eps)),
    "the last dimension": lambda x, f, w, eps=1e-6: x + f(x * torch.rsqrt(x.pow(2).mean() + eps) * w),
    "does not subtract the mean": lambda x, f, w, eps=1e-6: x + f(
        rms_norm(x - x.mean(-1, keepdim=True), w, eps)),
}


@pytest.mark.parametrize("fragment", PRE_NORM_MISTAKES)
def test_pre_norm_mistakes_are_named(fragment):
    expect(check_pre_norm_residual, PRE_NORM_MISTAKES[fragment], fragment)


def test_in_place_modification_is_caught():
    def in_place(x, sublayer, weight, eps=1e-6):
        update = sublayer(rms_norm(x, weight, eps))
        x += update
        return x

    expect(check_pre_norm_residual, in_place, "modifies its input x in place")


def test_pre_norm_delegation_is_refused():
    from course_lib.norms import rms_norm as lib_rms_norm

    expect(check_pre_norm_residual, lambda x, f, w, eps=1e-6: x + f(F.rms_norm(x, (x.shape[-1],), w, eps)),
           "calls torch.nn.functional.rms_norm")
    expect(check_pre_norm_residual, lambda x, f, w, eps=1e-6: x + f(lib_rms_norm(x, w, eps)),
           "calls course_lib.norms.rms_norm")

    def via_module(x, f, w, eps=1e-6):
        norm = nn.RMSNorm(x.shape[-1], eps=eps).to(x.dtype)
        with torch.no_grad():
            norm.weight.copy_(w)
        return x + f(norm(x))

    expect(check_pre_norm_residual, via_module, "calls torch.nn.RMSNorm")

    def via_course_lib(x, f, w, eps=1e-6):
        class Wrap(nn.Module):
            def forward(self, y):
                return f(y)

        norm = course_lib.norms.RMSNorm(x.shape[-1], eps=eps).to(x.dtype)
        with torch.no_grad():
            norm.weight.copy_(w)
        return course_lib.residual.PreNormResidual(norm, Wrap())(x)

    expect(check_pre_norm_residual, via_course_lib, "scores no points")


def test_pre_norm_crashes_and_todos_are_reported():
    def todo(x, sublayer, weight, eps=1e-6):
        raise NotImplementedError()

    expect(check_pre_norm_residual, todo, "not implemented yet")
    expect(check_pre_norm_residual, 3, "should be a function")
    expect(check_pre_norm_residual, lambda x, f, w, eps=1e-6: "x plus F", "should return a tensor")
    expect(check_pre_norm_residual, lambda x, f, w, eps=1e-6: good_pre_norm(x, f, w, eps) + 0.01, "wrong values")


# --- Task 2: residual-scaled initialisation -----------------------------------------------------------------

def good_init(model, n_layers, std=0.02):
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            role = name.split(".")[-1]
            sigma = std / math.sqrt(2 * n_layers) if role in ("w_o", "w_down") else std
            nn.init.normal_(module.weight, 0.0, sigma)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, 0.0, std)


def by_parameter_names(model, n_layers, std=0.02):  # another correct style: loop over parameters
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                continue
            if name.endswith("bias"):
                p.zero_()
            elif name.endswith(("w_o.weight", "w_down.weight")):
                p.normal_(0.0, std / (2 * n_layers) ** 0.5)
            else:
                p.normal_(0.0, std)


@pytest.mark.parametrize("solution", [good_init, by_parameter_names])
def test_correct_init_solutions_pass(solution):
    check_residual_scaled_init(solution)


def make_init(factor=lambda n: 1 / math.sqrt(2 * n), scaled=("w_o", "w_down"), std_override=None, zero_bias=True,
              embed=True, norms=False, norm_value=None, linear=True):
    def init(model, n_layers, std=0.02):
        std = std if std_override is None else std_override
        for name, module in model.named_modules():
            role = name.split(".")[-1]
            if isinstance(module, nn.Linear):
                if linear:
                    sigma = std * factor(n_layers) if role in scaled else std
                    nn.init.normal_(module.weight, 0.0, sigma)
                if module.bias is not None and zero_bias:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding) and embed:
                nn.init.normal_(module.weight, 0.0, std)
            elif norms and isinstance(module, (nn.RMSNorm, nn.LayerNorm)):
                if norm_value is None:
                    nn.init.normal_(module.weight, 0.0, std)
                else:
                    nn.init.constant_(module.weight, norm_value)

    return init


INIT_MISTAKES = {
    "counts blocks, 1/√N": make_init(factor=lambda n: 1 / math.sqrt(n)),
    "divided the standard deviation by 2N": make_init(factor=lambda n: 1 / (2 * n)),
    "multiplied by √(2N)": make_init(factor=lambda n: math.sqrt(2 * n)),
    "you scaled every linear layer": make_init(scaled=("w_q", "w_k", "w_v", "w_o", "w_gate", "w_up", "w_down",
                                                       "lm_head")),
    "you scaled the input projections": make_init(scaled=("w_q", "w_k", "w_v", "w_gate", "w_up")),
    "only w_down is scaled": make_init(scaled=("w_down",)),
    "only w_o is scaled": make_init(scaled=("w_o",)),
    "nothing is scaled": make_init(scaled=()),
    "the `std` argument is ignored": make_init(std_override=0.02),
    "re-initialised the norms' gains": make_init(norms=True),
    "set the norms' gains to 0": make_init(norms=True, norm_value=0.0),
    "biases keep PyTorch's default": make_init(zero_bias=False),
    "the embedding keeps PyTorch's default": make_init(embed=False),
    "linear weights keep PyTorch's default": make_init(linear=False),
}


@pytest.mark.parametrize("fragment", INIT_MISTAKES)
def test_init_mistakes_are_named(fragment):
    expect(check_residual_scaled_init, INIT_MISTAKES[fragment], fragment)


def test_combined_mistakes_name_the_roles():
    two_wrongs = make_init(factor=lambda n: 1 / math.sqrt(n), zero_bias=False)
    message = expect(check_residual_scaled_init, two_wrongs, "wrong spread")
    roles = message.rsplit("std = 0.02: ", 1)[1].split(".")[0]
    assert roles == "w_o, w_down, linear biases", message


def test_init_delegation_is_refused():
    expect(check_residual_scaled_init, lambda model, n_layers, std=0.02: course_lib.init.gpt2_init_(
        model, n_layers, std=std), "calls course_lib.init.gpt2_init_")

    def uses_residual_std(model, n_layers, std=0.02):
        sigma = course_lib.init.residual_std(std, n_layers)
        make_init(factor=lambda n: sigma / std)(model, n_layers, std)

    expect(check_residual_scaled_init, uses_residual_std, "calls course_lib.init.residual_std")


def test_init_crashes_and_todos_are_reported():
    def todo(model, n_layers, std=0.02):
        raise NotImplementedError()

    expect(check_residual_scaled_init, todo, "not implemented yet")
    expect(check_residual_scaled_init, "gpt2", "should be a function")
    expect(check_residual_scaled_init, lambda model, n_layers, std=0.02: model.w_o, "raised AttributeError")


def test_the_global_generator_is_left_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    check_residual_scaled_init(good_init)
    assert torch.equal(torch.rand(3), expected)


def test_checkers_leave_no_profiler_behind():
    import sys

    before = sys.getprofile()
    check_pre_norm_residual(good_pre_norm)
    with pytest.raises(GradingError):
        check_residual_scaled_init(course_lib.init.gpt2_init_)
    assert sys.getprofile() is before
