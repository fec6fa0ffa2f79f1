"""course_lib._autograd.apply_function: the hand-written backward passes are called without
Function.apply's per-call Python wrapper, and give the same numbers as through it."""

from __future__ import annotations

import inspect

import pytest
import torch

from course_lib import _autograd, norms, positional


def rope_and_norm(x, weight, cos, sin):
    y = norms.RMSNorm(x.shape[-1])
    with torch.no_grad():
        y.weight.copy_(weight)
    return positional.apply_rope(y(x), cos, sin).sum(-1)  # (B, H, T)


@pytest.fixture
def inputs():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 5, 8, generator=gen, requires_grad=True)  # (B, H, T, D_h)
    weight = torch.rand(8, generator=gen) + 0.5
    cos, sin = positional.rope_cos_sin(5, 8)
    return x, weight, cos, sin


def test_no_signature_binding_outside_transforms(inputs, monkeypatch):
    # Function.apply binds each call to forward's signature with inspect.signature; the course's
    # calls must not, so a broken inspect.signature cannot reach them
    def refuse(*args, **kwargs):
        raise AssertionError("inspect.signature called")

    monkeypatch.setattr(inspect, "signature", refuse)
    x, weight, cos, sin = inputs
    out = rope_and_norm(x, weight, cos, sin)
    out.sum().backward()
    assert type(out.grad_fn).__name__ == "SumBackward1"
    assert x.grad is not None and torch.isfinite(x.grad).all()


def test_same_outputs_and_gradients_as_function_apply(inputs, monkeypatch):
    x, weight, cos, sin = inputs
    fast = rope_and_norm(x, weight, cos, sin)
    (fast_grad,) = torch.autograd.grad(fast.square().sum(), x)
    monkeypatch.setattr(_autograd, "_are_functorch_transforms_active", None)  # Function.apply
    slow = rope_and_norm(x, weight, cos, sin)
    (slow_grad,) = torch.autograd.grad(slow.square().sum(), x)
    assert torch.equal(fast, slow) and torch.equal(fast_grad, slow_grad)


def test_under_vmap_it_goes_through_function_apply(inputs, monkeypatch):
    x, weight, cos, sin = inputs
    calls = []
    original = torch.autograd.Function.apply.__func__

    def counting_apply(cls, *args, **kwargs):
        calls.append(cls.__name__)
        return original(cls, *args, **kwargs)

    monkeypatch.setattr(torch.autograd.Function, "apply", classmethod(counting_apply))
    per_row = torch.func.grad(lambda row: rope_and_norm(row, weight, cos, sin).sum())
    grads = torch.func.vmap(per_row)(x.detach())  # (B, H, T, D_h)
    assert {"_RMSNormFunction", "_RopeFunction"} <= set(calls)  # (and the vmapped Functions vmap makes)
    loop = torch.stack([torch.autograd.grad(rope_and_norm(row, weight, cos, sin).sum(), row)[0]
                        for row in x.detach().clone().requires_grad_().unbind()])
    torch.testing.assert_close(grads, loop)
