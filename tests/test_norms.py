"""course_lib.norms against nn.LayerNorm, nn.RMSNorm, Hugging Face's LlamaRMSNorm, autograd Jacobians
and mathematical properties (zero mean / unit RMS, scale invariance, where ε goes, float32 compute)."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd.functional import jacobian

from course_lib import checkpointing as ck
from course_lib import norms
from course_lib.device import get_device


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(0)


# --- by hand -----------------------------------------------------------------------------------------

def test_layer_norm_of_a_small_vector_by_hand():
    x = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    # mean 2.5, biased variance 1.25
    expected = (x - 2.5) / torch.sqrt(torch.tensor(1.25 + 1e-5, dtype=torch.float64))
    torch.testing.assert_close(norms.layer_norm(x), expected)


def test_rms_norm_of_a_small_vector_by_hand():
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64)
    expected = x / torch.tensor([[2.5 ** 0.5], [12.5 ** 0.5]], dtype=torch.float64)
    torch.testing.assert_close(norms.rms_norm(x, eps=0.0), expected)


# --- against torch and Hugging Face ----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("eps", [1e-6, 1e-5, 0.1])
def test_rms_norm_matches_torch(dtype, eps, gen):
    x = (3 * torch.randn(4, 5, 32, generator=gen, dtype=torch.float64)).to(dtype)
    weight = torch.randn(32, generator=gen, dtype=torch.float64).to(dtype)
    torch.testing.assert_close(norms.rms_norm(x, weight, eps), F.rms_norm(x, (32,), weight, eps))
    module, ref = norms.RMSNorm(32, eps).to(dtype), nn.RMSNorm(32, eps=eps).to(dtype)
    with torch.no_grad():
        module.weight.copy_(weight)
        ref.weight.copy_(weight)
    torch.testing.assert_close(module(x), ref(x))
    module.load_state_dict(ref.state_dict())  # same parameter name


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_rms_norm_matches_hugging_face_llama_rms_norm(dtype, gen):
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    hf, ours = LlamaRMSNorm(64, eps=1e-6), norms.RMSNorm(64, eps=1e-6)
    with torch.no_grad():
        hf.weight.copy_(1 + 0.1 * torch.randn(64, generator=gen))
    ours.load_state_dict(hf.state_dict())
    hf, ours = hf.to(dtype), ours.to(dtype)
    x = (2 * torch.randn(3, 7, 64, generator=gen)).to(dtype)
    torch.testing.assert_close(ours(x), hf(x), rtol=0, atol=0)  # the same operations in the same order


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("bias", [True, False])
def test_layer_norm_matches_torch(dtype, bias, gen):
    x = (2 + 3 * torch.randn(4, 6, 24, generator=gen, dtype=torch.float64)).to(dtype)
    ref = nn.LayerNorm(24, eps=1e-5, bias=bias).to(dtype)
    with torch.no_grad():
        ref.weight.copy_(torch.randn(24, generator=gen))
        if bias:
            ref.bias.copy_(torch.randn(24, generator=gen))
    ours = norms.LayerNorm(24, eps=1e-5, bias=bias).to(dtype)
    ours.load_state_dict(ref.state_dict())
    torch.testing.assert_close(ours(x), ref(x))
    torch.testing.assert_close(norms.layer_norm(x, ref.weight, ref.bias, 1e-5),
                               F.layer_norm(x, (24,), ref.weight, ref.bias, 1e-5))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_layer_norm_module_fused_and_explicit_paths_agree_with_their_gradients(dtype, gen):
    """The module's default path is PyTorch's kernel; fused=False is the explicit layer_norm, value
    and gradients (x, gain and shift) equal to rounding."""
    module = norms.LayerNorm(24).to(dtype)
    with torch.no_grad():
        module.weight.copy_(torch.randn(24, generator=gen))
        module.bias.copy_(torch.randn(24, generator=gen))
    x = (2 + 3 * torch.randn(3, 5, 24, generator=gen, dtype=torch.float64)).to(dtype).requires_grad_()
    g = torch.randn(3, 5, 24, generator=gen, dtype=torch.float64).to(dtype)
    results = []
    for fused in (True, False):
        y = module(x, fused=fused)
        results.append((y, *torch.autograd.grad(y, (x, module.weight, module.bias), g)))
    for got, want in zip(*results):
        torch.testing.assert_close(got, want)
    torch.testing.assert_close(results[1][0], norms.layer_norm(x, module.weight, module.bias, 1e-5),
                               rtol=0, atol=0)  # fused=False is exactly the explicit function
    with pytest.raises(TypeError, match="fused must be True or False"):
        module(x, fused="no")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_rms_norm_module_fused_path_is_rms_norm_with_its_gradients(dtype, gen):
    """fused=True (the default) gives rms_norm's numbers bit for bit and differentiates them by hand:
    gradients equal autograd's through the explicit rms_norm, and rms_norm_backward's."""
    module = norms.RMSNorm(24, eps=1e-5).to(dtype)
    with torch.no_grad():
        module.weight.copy_(torch.randn(24, generator=gen))
    x = (2 + 3 * torch.randn(3, 5, 24, generator=gen, dtype=torch.float64)).to(dtype).requires_grad_()
    g = torch.randn(3, 5, 24, generator=gen, dtype=torch.float64).to(dtype)
    fused = module(x)
    assert fused.grad_fn is not None and "RMSNorm" in type(fused.grad_fn).__name__
    explicit = module(x, fused=False)
    assert torch.equal(fused, explicit) and torch.equal(explicit, norms.rms_norm(x, module.weight, 1e-5))
    by_hand = torch.autograd.grad(fused, (x, module.weight), g)
    by_autograd = torch.autograd.grad(explicit, (x, module.weight), g)
    tol = {} if dtype != torch.bfloat16 else dict(rtol=2e-2, atol=2e-2)
    for got, want in zip(by_hand, by_autograd):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, **tol)
    if dtype != torch.bfloat16:  # bf16 rounds the two orders of arithmetic differently
        formula = norms.rms_norm_backward(x.detach(), module.weight.detach(), g, 1e-5)
        for got, want in zip(by_hand, formula):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    with pytest.raises(TypeError, match="fused must be True or False"):
        module(x, fused=1)


def test_rms_norm_fused_gradcheck_and_what_it_keeps(gen):
    module = norms.RMSNorm(6, eps=1e-3).double()
    with torch.no_grad():
        module.weight.copy_(torch.randn(6, generator=gen, dtype=torch.float64))
    x = torch.randn(2, 3, 6, generator=gen, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w: norms._RMSNormFunction.apply(x, w, 1e-3)[0],
                                    (x, module.weight))
    with ck.SavedTensorLog(exclude=module.parameters()) as fused:
        module(x * 1.0)  # x * 1.0: the norm's input is not a leaf
    assert sorted(t.shape for t in fused.tensors) == [(2, 3, 1), (2, 3, 6)]  # 1/rms, x/rms: not x
    with ck.SavedTensorLog(exclude=module.parameters()) as explicit:
        module(x * 1.0, fused=False)
    wide = [t for t in explicit.tensors if t.shape == (2, 3, 6)]  # one per storage
    assert len(wide) == 2  # autograd keeps x as well as x/rms


def test_rms_norm_fused_under_vmap_and_vectorized_jacobians(gen):
    module = norms.RMSNorm(5).double()
    with torch.no_grad():
        module.weight.copy_(torch.randn(5, generator=gen, dtype=torch.float64))
    xs = torch.randn(4, 3, 5, generator=gen, dtype=torch.float64)
    looped = torch.stack([module(x) for x in xs])
    torch.testing.assert_close(torch.func.vmap(module)(xs), looped, rtol=0, atol=0)
    by_loop = jacobian(lambda x: module(x, fused=False), xs[0])  # (3, 5, 3, 5)
    for jac in (jacobian(module, xs[0], vectorize=True), torch.func.jacrev(module)(xs[0])):
        torch.testing.assert_close(jac, by_loop, rtol=1e-12, atol=1e-12)


# --- properties ------------------------------------------------------------------------------------------

def test_outputs_have_zero_mean_and_unit_rms(gen):
    x = 5 + 3 * torch.randn(10, 128, generator=gen, dtype=torch.float64)
    ln = norms.layer_norm(x, eps=0.0)
    torch.testing.assert_close(ln.mean(-1), torch.zeros(10, dtype=torch.float64))
    torch.testing.assert_close(ln.pow(2).mean(-1), torch.ones(10, dtype=torch.float64))
    torch.testing.assert_close(norms.rms_norm(x, eps=0.0).pow(2).mean(-1), torch.ones(10, dtype=torch.float64))


def test_scale_invariance_and_what_epsilon_does(gen):
    x = torch.randn(6, 16, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(norms.rms_norm(7.5 * x, eps=0.0), norms.rms_norm(x, eps=0.0))
    torch.testing.assert_close(norms.layer_norm(7.5 * x + 3, eps=0.0), norms.layer_norm(x, eps=0.0))
    # a zero vector: ε inside the square root keeps the output finite (zero)
    assert norms.rms_norm(torch.zeros(4, 8)).abs().max() == 0
    assert torch.isfinite(norms.layer_norm(torch.ones(4, 8))).all()
    # with ε inside, the gain of a tiny input saturates at 1/sqrt(ε)
    tiny = 1e-9 * torch.ones(8, dtype=torch.float64)
    assert (norms.rms_norm(tiny, eps=1e-6) / tiny)[0].item() == pytest.approx(1e3, rel=1e-6)


def test_low_precision_inputs_are_normalised_in_float32(gen):
    x = (3 * torch.randn(8, 256, generator=gen)).bfloat16()
    expected = norms.rms_norm(x.float()).bfloat16()  # compute in float32, round once
    torch.testing.assert_close(norms.rms_norm(x), expected, rtol=0, atol=0)
    assert norms.rms_norm(x).dtype == torch.bfloat16
    big = torch.full((2, 64), 300.0, dtype=torch.float16)  # 300² overflows float16
    naive = big * torch.rsqrt(big.pow(2).mean(-1, keepdim=True) + 1e-6)
    assert naive.abs().max() == 0  # x / sqrt(inf) = 0
    torch.testing.assert_close(norms.rms_norm(big), torch.ones_like(big))


# --- Jacobians -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("eps", [0.0, 1e-6, 0.5])
@pytest.mark.parametrize("scale", [1e-3, 1.0, 10.0])
def test_rms_norm_jacobian_matches_autograd(eps, scale, gen):
    d = 12
    x = scale * torch.randn(d, generator=gen, dtype=torch.float64)
    weight = torch.randn(d, generator=gen, dtype=torch.float64)
    auto = jacobian(lambda v: norms.rms_norm(v, weight, eps), x)
    torch.testing.assert_close(norms.rms_norm_jacobian(x, weight, eps), auto)
    torch.testing.assert_close(norms.rms_norm_jacobian(x, None, eps),
                               jacobian(lambda v: norms.rms_norm(v, eps=eps), x))


def test_rms_norm_jacobian_without_epsilon_in_r_is_only_approximate(gen):
    x = 1e-3 * torch.randn(8, generator=gen, dtype=torch.float64)  # mean(x²) comparable to ε
    eps = 1e-6
    auto = jacobian(lambda v: norms.rms_norm(v, eps=eps), x)
    r0 = x.pow(2).mean().sqrt()
    x_hat = x / r0
    wrong = (torch.eye(8, dtype=torch.float64) - torch.outer(x_hat, x_hat) / 8) / r0
    assert (wrong - auto).abs().max() > 0.1 * auto.abs().max()
    torch.testing.assert_close(norms.rms_norm_jacobian(x, eps=eps), auto)


def test_rms_norm_jacobian_batched_and_radial_direction(gen):
    x = torch.randn(3, 4, 10, generator=gen, dtype=torch.float64)
    jac = norms.rms_norm_jacobian(x, eps=0.0)
    assert jac.shape == (3, 4, 10, 10)
    for b in range(3):
        for t in range(4):
            torch.testing.assert_close(jac[b, t], jacobian(lambda v: norms.rms_norm(v, eps=0.0), x[b, t]))
    radial = (jac @ x.unsqueeze(-1)).squeeze(-1)  # scaling x does not change the output
    torch.testing.assert_close(radial, torch.zeros_like(x))


@pytest.mark.parametrize("eps", [0.0, 1e-5, 0.3])
def test_layer_norm_jacobian_matches_autograd(eps, gen):
    x = 1 + torch.randn(9, generator=gen, dtype=torch.float64)
    weight = torch.randn(9, generator=gen, dtype=torch.float64)
    auto = jacobian(lambda v: norms.layer_norm(v, weight, None, eps), x)
    torch.testing.assert_close(norms.layer_norm_jacobian(x, weight, eps), auto)
    ones = torch.ones(9, dtype=torch.float64)
    torch.testing.assert_close(norms.layer_norm_jacobian(x, eps=eps) @ ones, torch.zeros(9, dtype=torch.float64))


# --- errors ----------------------------------------------------------------------------------------------

def test_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"x's last dimension \(5\) must equal dim \(4\)"):
        norms.RMSNorm(4)(torch.zeros(2, 5))
    with pytest.raises(ValueError, match=r"weight must have shape \(D,\) = \(5,\)"):
        norms.rms_norm(torch.zeros(2, 5), torch.ones(4))
    with pytest.raises(ValueError, match="bias must have shape"):
        norms.layer_norm(torch.zeros(2, 5), torch.ones(5), torch.ones(3))
    with pytest.raises(ValueError, match=r"eps \(-1e-06\) must be non-negative"):
        norms.RMSNorm(4, eps=-1e-6)
    with pytest.raises(TypeError, match="eps must be a number"):
        norms.rms_norm(torch.zeros(3), eps="small")
    with pytest.raises(TypeError, match="dim must be an int"):
        norms.LayerNorm(4.0)
    with pytest.raises(ValueError, match=r"dim \(0\) must be positive"):
        norms.RMSNorm(0)
    with pytest.raises(TypeError, match="floating-point"):
        norms.layer_norm(torch.arange(4))
    with pytest.raises(ValueError, match="shape"):
        norms.rms_norm(torch.tensor(1.0))


# --- device ----------------------------------------------------------------------------------------------

def test_runs_on_the_course_device():
    device = get_device()
    x = torch.randn(2, 3, 16, device=device)
    for module, ref in [(norms.RMSNorm(16), nn.RMSNorm(16, eps=1e-6)), (norms.LayerNorm(16), nn.LayerNorm(16))]:
        module, ref = module.to(device), ref.to(device)
        out = module(x)
        assert out.device.type == device.type
        torch.testing.assert_close(out, ref(x))
    assert norms.rms_norm_jacobian(x).device.type == device.type


# --- the backward pass and merged statistics (exercise 5's references) ------------------------------

@pytest.mark.parametrize("eps", [0.0, 1e-6, 0.5])
@pytest.mark.parametrize("shape", [(8,), (3, 5, 16)])
def test_rms_norm_backward_matches_autograd(shape, eps):
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(shape, generator=gen, dtype=torch.float64, requires_grad=True)
    w = (1 + 0.5 * torch.randn(shape[-1], generator=gen, dtype=torch.float64)).requires_grad_()
    g = torch.randn(shape, generator=gen, dtype=torch.float64)
    norms.rms_norm(x, w, eps).backward(g)
    grad_x, grad_w = norms.rms_norm_backward(x.detach(), w.detach(), g, eps)
    torch.testing.assert_close(grad_x, x.grad, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad_w, w.grad, rtol=1e-12, atol=1e-12)


def test_rms_norm_backward_is_the_transposed_jacobian_applied_to_g():
    gen = torch.Generator().manual_seed(8)
    x, g = torch.randn(2, 6, generator=gen, dtype=torch.float64), torch.randn(2, 6, generator=gen, dtype=torch.float64)
    w = 1 + torch.rand(6, generator=gen, dtype=torch.float64)
    jac = norms.rms_norm_jacobian(x, w, 1e-6)  # (2, D, D)
    grad_x, _ = norms.rms_norm_backward(x, w, g, 1e-6)
    torch.testing.assert_close(grad_x, torch.einsum("bij,bi->bj", jac, g))


def test_rms_norm_backward_rejects_a_mismatched_grad():
    with pytest.raises(ValueError, match="grad_out must be a tensor of x's shape"):
        norms.rms_norm_backward(torch.ones(2, 4), torch.ones(4), torch.ones(4))


@pytest.mark.parametrize("sizes", [(1, 1), (3, 9), (128, 64)])
def test_merge_moments_equals_the_statistics_of_the_union(sizes):
    gen = torch.Generator().manual_seed(9)
    a = torch.randn(4, sizes[0], generator=gen, dtype=torch.float64)
    b = 3 + 2 * torch.randn(4, sizes[1], generator=gen, dtype=torch.float64)
    count, mean, var = norms.merge_moments(sizes[0], a.mean(1), a.var(1, unbiased=False),
                                           sizes[1], b.mean(1), b.var(1, unbiased=False))
    union = torch.cat([a, b], dim=1)
    assert count == sum(sizes)
    torch.testing.assert_close(mean, union.mean(1))
    torch.testing.assert_close(var, union.var(1, unbiased=False))


def test_merge_moments_rejects_bad_counts():
    z = torch.zeros(2)
    with pytest.raises(ValueError, match=r"count_b \(0\) must be a positive int"):
        norms.merge_moments(3, z, z, 0, z, z)
