"""The chapter 6 checkers beyond the catalogue (tests/mistakes/ex06.py): other correct formulations pass,
and the checkers refuse what they must."""

import math
from functools import partial

import pytest
import torch
import torch.nn as nn

import course_lib
from course_lib.grading import (GradingError, check_deep_norm_residual, check_pre_norm_residual_backward,
                                check_residual_predictions, check_residual_scaled_init)
from grading_helpers import expect_failure, no_values_leak

expect = partial(expect_failure, no_leak=no_values_leak)


# --- Task 1: deep_norm_residual -----------------------------------------------------------------------------

def float32_statistics(x, sublayer, weight, bias, alpha, eps=1e-5):  # normalizing in float32 is fine
    s = (alpha * x + sublayer(x)).float()
    y = (s - s.mean(-1, keepdim=True)) * torch.rsqrt(s.var(-1, keepdim=True, correction=0) + eps)
    return (y * weight.float() + bias.float()).to(x.dtype)


def deepnet_style(x, sublayer, weight, bias, alpha, eps=1e-5):  # residual scaled, then added, then normed
    residual = x * alpha
    h = sublayer(x)
    h = residual + h
    centred = h - h.mean(dim=-1, keepdim=True)
    return weight * centred / torch.sqrt((centred * centred).mean(dim=-1, keepdim=True) + eps) + bias


@pytest.mark.parametrize("solution", [float32_statistics, deepnet_style])
def test_other_deep_norm_formulations_pass(solution):
    check_deep_norm_residual(solution)


def test_deep_norm_delegations_are_refused():
    def via_torch_module(x, f, w, b, alpha, eps=1e-5):
        norm = nn.LayerNorm(x.shape[-1], eps=eps).to(x.dtype)
        with torch.no_grad():
            norm.weight.copy_(w)
            norm.bias.copy_(b)
        return norm(alpha * x + f(x))

    expect(check_deep_norm_residual, via_torch_module, "layer_norm operation")

    def via_course_lib(x, f, w, b, alpha, eps=1e-5):
        return course_lib.norms.layer_norm(alpha * x + f(x), w, b, eps)

    expect(check_deep_norm_residual, via_course_lib, "course_lib.")


def test_deep_norm_unfinished_and_wrong_kinds_are_reported():
    def todo(x, sublayer, weight, bias, alpha, eps=1e-5):
        raise NotImplementedError()

    expect(check_deep_norm_residual, todo, "not implemented yet")
    expect(check_deep_norm_residual, 3, "should be a function")
    expect(check_deep_norm_residual, lambda x, f, w, b, alpha, eps=1e-5: "LN(αx + F)", "it should return a tensor")


def test_a_forgotten_alpha_is_not_taken_for_alpha_on_the_input():
    """For a linear sublayer LN(αx + F(αx)) = LN(x + F(x)): the first case has a nonlinear one."""
    def no_alpha(x, f, w, b, alpha, eps=1e-5):
        s = x + f(x)
        mu = s.mean(-1, keepdim=True)
        return (s - mu) / torch.sqrt((s - mu).pow(2).mean(-1, keepdim=True) + eps) * w + b

    expect(check_deep_norm_residual, no_alpha, "α is missing")


# --- Task 2: pre_norm_residual_backward ---------------------------------------------------------------------

def einsum_backward(x, weight, proj, grad_out, eps=1e-6):  # through the D×D norm Jacobian: O(D²) but right
    d = x.shape[-1]
    r = torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    x_hat = x / r
    jac = weight[:, None] * (torch.eye(d, dtype=x.dtype) - torch.einsum("...i,...j->...ij", x_hat, x_hat) / d)
    grad_u = torch.einsum("...j,ij->...i", grad_out, proj)  # grad_out @ projᵀ
    grad_x = grad_out + torch.einsum("...ij,...i->...j", jac / r.unsqueeze(-1), grad_u)
    return grad_x, torch.einsum("...i,...j->ij", x_hat * weight, grad_out)


def test_other_backward_formulations_pass():
    check_pre_norm_residual_backward(einsum_backward)


def test_backward_through_torch_func_is_refused():
    def via_vjp(x, weight, proj, grad_out, eps=1e-6):
        def forward(x_, p_):
            return x_ + (x_ * torch.rsqrt(x_.pow(2).mean(-1, keepdim=True) + eps) * weight) @ p_

        _, pullback = torch.func.vjp(forward, x, proj)
        return pullback(grad_out)

    expect(check_pre_norm_residual_backward, via_vjp, "torch.func")


def test_backward_with_the_wrong_output_kind_is_reported():
    expect(check_pre_norm_residual_backward, lambda x, w, p, g, eps=1e-6: g, "it should return a tuple of 2")


# --- Task 3: residual_scaled_init_ --------------------------------------------------------------------------

def by_modules(model, n_layers, std=0.02):
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            scaled = name.rsplit(".", 1)[-1] in ("w_o", "w_down")
            nn.init.normal_(module.weight, 0.0, std / math.sqrt(2 * n_layers) if scaled else std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, 0.0, std)


def by_parameter_names(model, n_layers, std=0.02):  # the given version, fixed: skip the norms
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


@pytest.mark.parametrize("solution", [by_modules, by_parameter_names])
def test_correct_init_solutions_pass(solution):
    check_residual_scaled_init(solution)


def test_combined_init_mistakes_name_the_roles():
    def blocks_and_default_biases(model, n_layers, std=0.02):
        for name, module in model.named_modules():
            if isinstance(module, nn.Linear):
                scaled = name.rsplit(".", 1)[-1] in ("w_o", "w_down")
                nn.init.normal_(module.weight, 0.0, std / math.sqrt(n_layers) if scaled else std)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, 0.0, std)

    message = expect(check_residual_scaled_init, blocks_and_default_biases, "wrong spread")
    assert "w_o, w_down, linear biases." in message, message


def test_init_leaves_the_global_generator_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    check_residual_scaled_init(by_modules)
    assert torch.equal(torch.rand(3), expected)


def test_init_delegation_is_refused():
    expect(check_residual_scaled_init, lambda model, n_layers, std=0.02: course_lib.init.gpt2_init_(
        model, n_layers, std=std), "course_lib.init.gpt2_init_")

    def uses_residual_std(model, n_layers, std=0.02):
        sigma = course_lib.init.residual_std(std, n_layers)
        by_modules(model, n_layers, std)
        for name, p in model.named_parameters():
            if name.endswith(("w_o.weight", "w_down.weight")):
                nn.init.normal_(p, 0.0, sigma)

    expect(check_residual_scaled_init, uses_residual_std, "course_lib.init.residual_std")


# --- Task 4: predictions ------------------------------------------------------------------------------------

def test_predictions_within_rounding_pass_and_wrong_types_are_named():
    check_residual_predictions(lambda: {"paths": 4096.0, "stream_rms": 2.236, "post_norm_gradient": 0.001372,
                                        "concat_width": 16896})
    with pytest.raises(GradingError, match="should return a dict"):
        check_residual_predictions(lambda: [4096, 2.236, 0.00137, 16896])
    with pytest.raises(GradingError, match="has no value for"):
        check_residual_predictions(lambda: {"paths": 4096})
    with pytest.raises(GradingError, match="still empty"):
        check_residual_predictions(lambda: {"paths": 4096, "stream_rms": ..., "post_norm_gradient": 3 ** -6,
                                            "concat_width": 16896})
