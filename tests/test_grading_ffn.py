"""The chapter 4 checkers: correct solutions pass, each common mistake is named, delegation is refused,
and no message leaks a reference value."""

from functools import partial
import math
import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import course_lib
from course_lib.grading import check_gelu_tanh, check_swiglu

from grading_helpers import expect_failure

# --- correct solutions written independently of course_lib -----------------------------------------


def good_swiglu(x, w_gate, w_up, w_down):
    gate_pre = torch.einsum("...d,df->...f", x, w_gate)
    return torch.einsum("...f,fd->...d", gate_pre / (1 + torch.exp(-gate_pre)) * (x @ w_up), w_down)


def float32_swiglu(x, w_gate, w_up, w_down):  # computing in float32 is fine
    x, w_gate, w_up, w_down = (t.float() for t in (x, w_gate, w_up, w_down))
    g = x @ w_gate
    return (g * torch.sigmoid(g) * (x @ w_up)) @ w_down


def good_gelu_tanh(x):
    c = math.sqrt(2 / math.pi)
    return x / 2 * (1 + torch.tanh(c * x + c * 0.044715 * x * x * x))


def typed_constant_gelu_tanh(x):  # √(2/π) typed to 7 digits passes
    return 0.5 * x * (1 + torch.tanh(0.7978846 * (x + 0.044715 * x.pow(3))))


@pytest.mark.parametrize(
    "checker, solution",
    [(check_swiglu, good_swiglu), (check_swiglu, float32_swiglu),
     (check_gelu_tanh, good_gelu_tanh), (check_gelu_tanh, typed_constant_gelu_tanh)],
)
def test_correct_solutions_pass(checker, solution):
    checker(solution)


# --- mistakes are named ----------------------------------------------------------------------------

def assert_no_values_leak(message):
    """Messages may mention shapes and constants of the formula, never tensor values or results."""
    assert "tensor(" not in message
    allowed = message.replace("0.044715", "").replace("1.702", "")
    assert not re.search(r"\d\.\d{3,}", allowed), message


expect = partial(expect_failure, no_leak=assert_no_values_leak)


def silu(z):
    return z * torch.sigmoid(z)


SWIGLU_MISTAKES = {
    "SiLU is applied to the wrong projection": lambda x, g, u, d: ((x @ g) * silu(x @ u)) @ d,
    "the weights are used transposed": lambda x, g, u, d: (silu(x @ g.T) * (x @ u.T)) @ d.T,
    "the activation is ReLU": lambda x, g, u, d: (torch.relu(x @ g) * (x @ u)) @ d,
    "the original GLU": lambda x, g, u, d: (torch.sigmoid(x @ g) * (x @ u)) @ d,
    "that is GeGLU": lambda x, g, u, d: (0.5 * (x @ g) * (1 + torch.erf((x @ g) / math.sqrt(2))) * (x @ u)) @ d,
    "SiLU is applied after the product": lambda x, g, u, d: silu((x @ g) * (x @ u)) @ d,
    "the gate is missing": lambda x, g, u, d: silu(x @ u) @ d,
    "are added": lambda x, g, u, d: (silu(x @ g) + x @ u) @ d,
    "project them back with @ w_down": lambda x, g, u, d: silu(x @ g) * (x @ u),
}


@pytest.mark.parametrize("fragment", SWIGLU_MISTAKES)
def test_swiglu_mistakes_are_named(fragment):
    expect(check_swiglu, SWIGLU_MISTAKES[fragment], fragment)


def tanh_gelu(x, half=0.5, scale=math.sqrt(2 / math.pi), cubic=0.044715):
    return half * x * (1 + torch.tanh(scale * (x + cubic * x**3)))


GELU_MISTAKES = {
    "exact GELU": lambda x: x * 0.5 * (1 + torch.erf(x / math.sqrt(2))),
    "factor 0.5 in front is missing": lambda x: tanh_gelu(x, half=1.0),
    "leading x is missing": lambda x: 0.5 * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
    "cubic term is missing": lambda x: tanh_gelu(x, cubic=0.0),
    "the square root of 2/π": lambda x: tanh_gelu(x, scale=2 / math.pi),
    "not √(π/2)": lambda x: tanh_gelu(x, scale=math.sqrt(math.pi / 2)),
    "must multiply the whole bracket": lambda x: 0.5 * x * (1 + torch.tanh(x + math.sqrt(2 / math.pi) * 0.044715 * x**3)),
    "sigmoid approximation": lambda x: x * torch.sigmoid(1.702 * x),
    "not 1 − tanh": lambda x: 0.5 * x * (1 - torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
}


@pytest.mark.parametrize("fragment", GELU_MISTAKES)
def test_gelu_tanh_mistakes_are_named(fragment):
    expect(check_gelu_tanh, GELU_MISTAKES[fragment], fragment)


def test_unrecognised_wrong_answers_get_a_generic_hint():
    expect(check_swiglu, lambda x, g, u, d: 1.01 * good_swiglu(x, g, u, d), "wrong values", "square weights")
    expect(check_gelu_tanh, lambda x: good_gelu_tanh(x) + 0.001, "wrong values")


def test_not_implemented_and_crashes_are_reported():
    def todo(x):
        raise NotImplementedError()

    expect(check_gelu_tanh, todo, "not implemented yet")
    expect(check_swiglu, lambda x, g, u, d: x.silu(), "raised AttributeError")
    expect(check_gelu_tanh, lambda x: x.tolist(), "should return a tensor")


# --- delegation is refused -------------------------------------------------------------------------

def test_torch_and_course_lib_versions_are_refused():
    expect(check_swiglu, lambda x, g, u, d: (F.silu(x @ g) * (x @ u)) @ d, "calls torch.nn.functional.silu")
    expect(check_swiglu, lambda x, g, u, d: (nn.SiLU()(x @ g) * (x @ u)) @ d, "scores no points")
    expect(check_swiglu, course_lib.ffn.swiglu, "calls course_lib.ffn.swiglu")
    expect(check_swiglu, lambda x, g, u, d: (course_lib.ffn.silu(x @ g) * (x @ u)) @ d,
           "calls course_lib.ffn.silu")
    expect(check_gelu_tanh, lambda x: F.gelu(x, approximate="tanh"), "calls torch.nn.functional.gelu")
    expect(check_gelu_tanh, lambda x: nn.GELU(approximate="tanh")(x), "scores no points")
    expect(check_gelu_tanh, lambda x: course_lib.ffn.gelu(x, approximate="tanh"), "calls course_lib.ffn.gelu")


def test_the_module_forward_is_refused():
    def via_module(x, g, u, d):
        module = course_lib.ffn.SwiGLU(g.shape[0], g.shape[1]).to(x.dtype)
        with torch.no_grad():
            module.w_gate.weight.copy_(g.T)
            module.w_up.weight.copy_(u.T)
            module.w_down.weight.copy_(d.T)
        return module(x)

    expect(check_swiglu, via_module, "scores no points")
