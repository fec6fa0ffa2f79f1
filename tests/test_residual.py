"""course_lib.residual against torch's nn.TransformerEncoderLayer (both placements), Hugging Face's
LlamaDecoderLayer, Jacobians from autograd, the chapter's worked examples, and the measurements."""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd.functional import jacobian

from course_lib import residual as res
from course_lib.device import get_device


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(0)


class MLP(nn.Module):
    def __init__(self, d, d_ff=None):
        super().__init__()
        self.w_up = nn.Linear(d, d_ff or 4 * d, bias=False)
        self.w_down = nn.Linear(d_ff or 4 * d, d, bias=False)

    def forward(self, x):
        return self.w_down(F.gelu(self.w_up(x)))


class Constant(nn.Module):
    """A sublayer that ignores its input: F(x) = c."""

    def __init__(self, c):
        super().__init__()
        self.register_buffer("c", c)

    def forward(self, x):
        return self.c.expand_as(x)


class Linear(nn.Module):
    """F(y) = y Aᵀ + b, with A given (no learning)."""

    def __init__(self, a, b=None):
        super().__init__()
        self.register_buffer("a", a)
        self.register_buffer("b", torch.zeros(a.shape[0], dtype=a.dtype) if b is None else b)

    def forward(self, y):
        return y @ self.a.T + self.b


def rms_norm_jacobian(x, eps=0.0):
    """(1/r)(I − x̂x̂ᵀ/D), r = sqrt(mean(x²) + ε), x̂ = x/r — written out here, independently of norms.py."""
    d = x.shape[-1]
    r = torch.sqrt(x.pow(2).mean() + eps)
    x_hat = x / r
    return (torch.eye(d, dtype=x.dtype) - torch.outer(x_hat, x_hat) / d) / r


# --- the definitions -----------------------------------------------------------------------------------

def test_pre_and_post_norm_are_the_formulas(gen):
    x = 3 * torch.randn(2, 5, 16, generator=gen)
    norm, f = nn.RMSNorm(16, eps=1e-6), MLP(16)
    torch.testing.assert_close(res.PreNormResidual(norm, f)(x), x + f(norm(x)))
    torch.testing.assert_close(res.PostNormResidual(norm, f)(x), norm(x + f(x)))
    assert isinstance(res.residual_sublayer("pre", norm, f), res.PreNormResidual)
    assert isinstance(res.residual_sublayer("post", norm, f), res.PostNormResidual)


@pytest.mark.parametrize("norm_first", [True, False])
def test_matches_torch_transformer_encoder_layer(norm_first, gen):
    """nn.TransformerEncoderLayer(norm_first=True) is pre-norm, norm_first=False is post-norm."""
    torch.manual_seed(0)
    d = 32
    layer = nn.TransformerEncoderLayer(d, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True,
                                       norm_first=norm_first).eval()

    class SelfAttention(nn.Module):
        def forward(self, y):
            return layer.self_attn(y, y, y, need_weights=False)[0]

    class FeedForward(nn.Module):
        def forward(self, y):
            return layer.linear2(layer.activation(layer.linear1(y)))

    placement = "pre" if norm_first else "post"
    ours = nn.Sequential(res.residual_sublayer(placement, layer.norm1, SelfAttention()),
                         res.residual_sublayer(placement, layer.norm2, FeedForward()))
    x = torch.randn(3, 7, d, generator=gen)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), layer(x))


def test_matches_hugging_face_llama_decoder_layer(gen):
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    config = LlamaConfig(hidden_size=64, intermediate_size=172, num_attention_heads=4, num_key_value_heads=2,
                         num_hidden_layers=1, vocab_size=100)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    layer = LlamaDecoderLayer(config, layer_idx=0).eval()
    B, T = 2, 6
    x = torch.randn(B, T, 64, generator=gen)
    position_ids = torch.arange(T)[None].expand(B, T)
    cos_sin = LlamaRotaryEmbedding(config)(x, position_ids)
    allowed = torch.ones(T, T, dtype=torch.bool).tril()  # True = may attend
    additive = torch.zeros(B, 1, T, T).masked_fill(~allowed, float("-inf"))  # HF eager takes an additive mask

    class Attention(nn.Module):  # HF's attention returns (output, weights) and takes RoPE tables
        def forward(self, y, position_embeddings, attention_mask):
            return layer.self_attn(y, position_embeddings=position_embeddings, attention_mask=attention_mask)[0]

    attn = res.PreNormResidual(layer.input_layernorm, Attention())
    ffn = res.PreNormResidual(layer.post_attention_layernorm, layer.mlp)
    with torch.no_grad():
        ours = ffn(attn(x, position_embeddings=cos_sin, attention_mask=additive))
        theirs = layer(x, attention_mask=additive, position_ids=position_ids, position_embeddings=cos_sin)
    theirs = theirs[0] if isinstance(theirs, tuple) else theirs
    torch.testing.assert_close(ours, theirs)


# --- Jacobians ------------------------------------------------------------------------------------------

def test_pre_norm_jacobian_is_identity_plus_branch(gen):
    d = 12
    x = 2 * torch.randn(d, generator=gen, dtype=torch.float64)
    f = MLP(d).double()
    norm = nn.RMSNorm(d, eps=1e-6).double()
    block = res.PreNormResidual(norm, f)
    autograd = jacobian(block, x)
    j_f = jacobian(f, norm(x).detach())
    explicit = torch.eye(d, dtype=torch.float64) + j_f @ rms_norm_jacobian(x, eps=1e-6)
    torch.testing.assert_close(autograd, explicit)


def test_post_norm_jacobian_passes_everything_through_the_norm(gen):
    d = 12
    x = 2 * torch.randn(d, generator=gen, dtype=torch.float64)
    f = MLP(d).double()
    block = res.PostNormResidual(nn.RMSNorm(d, eps=1e-6).double(), f)
    autograd = jacobian(block, x)
    s = (x + f(x)).detach()
    explicit = rms_norm_jacobian(s, eps=1e-6) @ (torch.eye(d, dtype=torch.float64) + jacobian(f, x))
    torch.testing.assert_close(autograd, explicit)


def test_a_sublayer_that_ignores_its_input_gives_exactly_the_identity(gen):
    d = 10
    x = torch.randn(d, generator=gen, dtype=torch.float64)
    block = res.PreNormResidual(nn.RMSNorm(d).double(), Constant(torch.randn(d, generator=gen, dtype=torch.float64)))
    assert torch.equal(jacobian(block, x), torch.eye(d, dtype=torch.float64))


def test_post_norm_gradient_halves_per_block_when_the_sum_doubles(gen):
    """Post-norm with constant sublayers b_ℓ ⊥ x_ℓ, rms(b_ℓ) = √3: rms(x_ℓ + b_ℓ) = 2 and a gradient
    orthogonal to every sum shrinks by exactly 1/2 per block. Pre-norm passes it through unchanged."""
    d, n_blocks = 32, 10
    x = torch.randn(d, generator=gen, dtype=torch.float64)
    x = x / x.pow(2).mean().sqrt()  # rms 1
    blocks, sums, state = [], [], x
    for _ in range(n_blocks):
        b = torch.randn(d, generator=gen, dtype=torch.float64)
        b = b - (b @ state) / (state @ state) * state  # ⊥ the block's input
        b = b * math.sqrt(3) / b.pow(2).mean().sqrt()
        blocks.append(res.PostNormResidual(nn.RMSNorm(d, eps=0.0).double(), Constant(b)))
        sums.append(state + b)
        state = blocks[-1](state).detach()
    post = res.ResidualStack(blocks)
    g = torch.randn(d, generator=gen, dtype=torch.float64)
    basis, _ = torch.linalg.qr(torch.stack(sums, 1))  # (d, n_blocks)
    g = g - basis @ (basis.T @ g)  # ⊥ every sum
    x0 = x.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad((post(x0) * g).sum(), x0)
    assert grad.norm() / g.norm() == pytest.approx(2.0 ** -n_blocks, rel=1e-10)
    pre = res.ResidualStack([res.PreNormResidual(nn.RMSNorm(d, eps=0.0).double(), b.sublayer) for b in blocks])
    x0 = x.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad((pre(x0) * g).sum(), x0)
    assert torch.equal(grad, g)


def test_the_identity_term_does_not_bound_the_gradient_from_below(gen):
    """A sublayer F(y) = −(rms(x)/γ)·y cancels the stream: the Jacobian is x̂x̂ᵀ/D and every gradient
    orthogonal to x is lost. Two such blocks (with a bias b ⊥ x) make ∂x_2/∂x_0 = 0 exactly."""
    d = 8
    x = torch.randn(d, generator=gen, dtype=torch.float64)
    r = x.pow(2).mean().sqrt()
    eye = torch.eye(d, dtype=torch.float64)
    block = res.PreNormResidual(nn.RMSNorm(d, eps=0.0).double(), Linear(-r * eye))
    g = torch.randn(d, generator=gen, dtype=torch.float64)
    g = g - (g @ x) / (x @ x) * x
    x0 = x.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad((block(x0) * g).sum(), x0)
    assert grad.abs().max() < 1e-12 and g.norm() > 0.1

    b = torch.randn(d, generator=gen, dtype=torch.float64)
    b = b - (b @ x) / (x @ x) * x  # the first block outputs b ⊥ x
    first = res.PreNormResidual(nn.RMSNorm(d, eps=0.0).double(), Linear(-r * eye, b))
    second = res.PreNormResidual(nn.RMSNorm(d, eps=0.0).double(), Linear(-b.pow(2).mean().sqrt() * eye))
    stack = res.ResidualStack([first, second])
    assert jacobian(stack, x).abs().max() < 1e-12


# --- stacks and measurements ------------------------------------------------------------------------------

def make_stack(placement, n_layers, d=16, seed=0):
    torch.manual_seed(seed)
    return res.build_stack(placement, n_layers, lambda: nn.RMSNorm(d, eps=1e-6), lambda: [MLP(d), MLP(d)])


def test_build_stack_structure():
    pre, post = make_stack("pre", 3), make_stack("post", 3)
    assert pre.n_layers == post.n_layers == 3 and len(pre.blocks[0]) == 2
    assert isinstance(pre.blocks[0][0], res.PreNormResidual) and isinstance(post.blocks[2][1], res.PostNormResidual)
    assert isinstance(pre.final_norm, nn.RMSNorm) and post.final_norm is None


def test_stream_skip_and_final_norm(gen):
    stack = make_stack("pre", 4)
    x = torch.randn(2, 3, 16, generator=gen)
    states = stack.stream(x)
    assert len(states) == 5 and states[0] is x
    manual = x
    for block in stack.blocks:
        manual = block(manual)
    torch.testing.assert_close(stack(x), stack.final_norm(manual))
    skipped = stack.stream(x, skip={1})
    torch.testing.assert_close(skipped[2], skipped[1])  # block 1 left out: the stream passes unchanged
    torch.testing.assert_close(skipped[1], states[1])


def test_depth_profile_matches_autograd(gen):
    stack = make_stack("pre", 3)
    x = torch.randn(2, 5, 16, generator=gen)
    g = torch.randn(2, 5, 16, generator=gen)
    profile = res.depth_profile(stack, x, g)
    assert profile.activation_rms.shape == (4,) and profile.grad_norm.shape == (4,)
    assert profile.weight_grad_norm.shape == (3,) and profile.grad_ratio.shape == (3,)
    x0 = x.clone().requires_grad_(True)
    h1 = stack.blocks[0](x0)
    loss = (stack.final_norm(stack.blocks[2](stack.blocks[1](h1))) * g).sum()
    gx, gh1, *gw = torch.autograd.grad(loss, [x0, h1, *stack.blocks[0].parameters()])
    torch.testing.assert_close(profile.grad_norm[0], gx.norm())
    torch.testing.assert_close(profile.grad_norm[1], gh1.norm())
    torch.testing.assert_close(profile.weight_grad_norm[0], torch.stack([w.pow(2).sum() for w in gw]).sum().sqrt())
    torch.testing.assert_close(profile.activation_rms[0], x.pow(2).mean().sqrt())
    torch.testing.assert_close(profile.grad_ratio[0], gx.norm() / gh1.norm())
    torch.testing.assert_close(profile.grad_growth, profile.grad_ratio.prod())
    assert x.grad is None and not x.requires_grad  # the input is left alone


def test_post_norm_output_gradient_is_the_cotangent(gen):
    stack = make_stack("post", 2)
    x, g = torch.randn(4, 16, generator=gen), torch.randn(4, 16, generator=gen)
    profile = res.depth_profile(stack, x, g)
    torch.testing.assert_close(profile.grad_norm[-1], g.norm())
    torch.testing.assert_close(profile.activation_rms[1:], torch.ones(2), atol=1e-3, rtol=0)  # normalized


def test_scaled_branches_keep_the_pre_norm_stream_bounded(gen):
    """Stream variance grows linearly with depth unless the branches shrink like 1/√(2N)."""
    d, n = 32, 32
    x, g = torch.randn(8, d, generator=gen), torch.randn(8, d, generator=gen)
    rms = {}
    for scale in (1.0, 1 / math.sqrt(2 * n)):
        stack = res.build_stack("pre", n, lambda: nn.RMSNorm(d), lambda: [MLP(d), MLP(d)])
        with torch.no_grad():
            for name, p in stack.named_parameters():
                if name.endswith("w_down.weight"):
                    p.mul_(scale * 3)
        rms[scale] = res.depth_profile(stack, x, g).activation_rms[-1].item()
    assert rms[1.0] > 2 * rms[1 / math.sqrt(2 * n)]


def test_block_deletion_effect(gen):
    stack = make_stack("pre", 4)
    x = torch.randn(3, 16, generator=gen)
    effect = res.block_deletion_effect(stack, x)
    full = stack(x)
    torch.testing.assert_close(effect[2], (stack(x, skip={2}) - full).norm() / full.norm())
    with torch.no_grad():
        for p in stack.blocks[1].parameters():
            p.zero_()  # block 1's branches output 0: deleting it changes nothing
    assert res.block_deletion_effect(stack, x)[1] == 0


def test_extra_arguments_reach_the_sublayer(gen):
    class Masked(nn.Module):
        def forward(self, y, mask=None, *, scale=1.0):
            return scale * y * mask

    x = torch.randn(4, 6, generator=gen)
    mask = (torch.arange(6) < 3).float()
    pre = res.PreNormResidual(nn.Identity(), Masked())
    torch.testing.assert_close(pre(x, mask, scale=2.0), x + 2.0 * x * mask)
    post = res.PostNormResidual(nn.Identity(), Masked())
    torch.testing.assert_close(post(x, mask=mask), x + x * mask)


def test_works_on_the_device(gen):
    device = get_device()
    stack = make_stack("pre", 2).to(device)
    x = torch.randn(2, 4, 16, generator=gen).to(device)
    profile = res.depth_profile(stack, x, torch.ones_like(x))
    assert profile.grad_norm.device.type == device.type
    assert res.block_deletion_effect(stack, x).shape == (2,)


# --- errors ----------------------------------------------------------------------------------------------

def test_errors_name_the_argument():
    norm, f = nn.RMSNorm(8), MLP(8)
    with pytest.raises(ValueError, match="placement must be one of"):
        res.residual_sublayer("middle", norm, f)
    with pytest.raises(TypeError, match="norm must be an nn.Module"):
        res.PreNormResidual(lambda x: x, f)
    with pytest.raises(TypeError, match="sublayer must be an nn.Module"):
        res.PostNormResidual(norm, F.gelu)
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        res.PreNormResidual(norm, f)([1.0] * 8)
    with pytest.raises(ValueError, match="must return the shape of its input"):
        res.PreNormResidual(norm, nn.Linear(8, 4))(torch.randn(2, 8))
    with pytest.raises(ValueError, match="n_layers \\(0\\) must be at least 1"):
        res.build_stack("pre", 0, lambda: nn.RMSNorm(8), lambda: [MLP(8)])
    with pytest.raises(TypeError, match="make_sublayers\\(\\) must return"):
        res.build_stack("pre", 2, lambda: nn.RMSNorm(8), lambda: MLP(8))
    with pytest.raises(TypeError, match="blocks must be a non-empty sequence"):
        res.ResidualStack([])
    stack = make_stack("post", 2, d=8)
    x = torch.randn(3, 8)
    with pytest.raises(ValueError, match="block indices run from 0 to 1"):
        stack(x, skip={2})
    with pytest.raises(TypeError, match="skip must be a collection"):
        stack(x, skip=1)
    with pytest.raises(ValueError, match="cotangent must have the output's shape"):
        res.depth_profile(stack, x, torch.ones(3, 4))
    with pytest.raises(TypeError, match="stack must be a ResidualStack"):
        res.depth_profile(nn.Sequential(), x, x)
