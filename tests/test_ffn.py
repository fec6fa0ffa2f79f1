"""course_lib.ffn against torch's activations, Hugging Face's LlamaMLP, the published Llama widths and
mathematical properties (position-wise, explicit math = fast path)."""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from course_lib import ffn
from course_lib.device import get_device


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(0)


# --- activations against torch ------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_activations_match_torch(dtype, gen):
    x = 4 * torch.randn(1000, generator=gen, dtype=torch.float64).to(dtype)
    x = torch.cat([x, torch.tensor([0.0, -30.0, 30.0, -1e4, 1e4], dtype=dtype)])
    torch.testing.assert_close(ffn.gelu(x), F.gelu(x))
    torch.testing.assert_close(ffn.gelu(x, approximate="tanh"), F.gelu(x, approximate="tanh"))
    torch.testing.assert_close(ffn.silu(x), F.silu(x))
    torch.testing.assert_close(ffn.relu(x), F.relu(x))


def test_gelu_tanh_is_close_to_exact_but_not_equal():
    x = torch.linspace(-8, 8, 100_001, dtype=torch.float64)
    gap = (ffn.gelu(x) - ffn.gelu(x, approximate="tanh")).abs().max().item()
    assert 1e-4 < gap < 5e-4


def test_gelu_and_silu_by_hand():
    phi = lambda v: 0.5 * (1 + math.erf(v / math.sqrt(2)))  # noqa: E731
    for v in [-2.0, -0.5, 0.0, 1.0, 3.0]:
        t = torch.tensor(v, dtype=torch.float64)
        assert ffn.gelu(t).item() == pytest.approx(v * phi(v))
        assert ffn.silu(t).item() == pytest.approx(v / (1 + math.exp(-v)))


def test_relu_derivative_is_zero_for_negative_inputs_silu_only_at_its_minimum():
    x = torch.linspace(-6, 6, 1201, dtype=torch.float64, requires_grad=True)
    (g_relu,) = torch.autograd.grad(ffn.relu(x).sum(), x)
    (g_silu,) = torch.autograd.grad(ffn.silu(x).sum(), x)
    assert (g_relu[x.detach() < 0] == 0).all()
    assert (g_silu != 0).all()  # the one zero, x ≈ −1.2785, is not on this grid
    assert x.detach()[g_silu.abs().argmin()].item() == pytest.approx(-1.28, abs=0.01)


def test_activation_errors():
    with pytest.raises(ValueError, match="approximate must be 'none' or 'tanh'"):
        ffn.gelu(torch.zeros(2), approximate="erf")
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        ffn.silu([1.0, 2.0])
    with pytest.raises(TypeError, match="floating-point"):
        ffn.relu(torch.arange(3))


# --- SwiGLU ------------------------------------------------------------------------------------------

def test_swiglu_module_equals_explicit_math(gen):
    torch.manual_seed(0)
    module = ffn.SwiGLU(16, 40).double()
    x = torch.randn(3, 5, 16, generator=gen, dtype=torch.float64)
    explicit = ffn.swiglu(x, module.w_gate.weight.T, module.w_up.weight.T, module.w_down.weight.T)
    torch.testing.assert_close(module(x), explicit)
    by_hand = (F.silu(x @ module.w_gate.weight.T) * (x @ module.w_up.weight.T)) @ module.w_down.weight.T
    torch.testing.assert_close(explicit, by_hand)


def test_swiglu_matches_hugging_face_llama_mlp(gen):
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaMLP

    config = LlamaConfig(hidden_size=32, intermediate_size=88, hidden_act="silu", mlp_bias=False)
    hf = LlamaMLP(config).double()
    ours = ffn.SwiGLU(32, 88).double()
    ours.w_gate.weight.data.copy_(hf.gate_proj.weight)
    ours.w_up.weight.data.copy_(hf.up_proj.weight)
    ours.w_down.weight.data.copy_(hf.down_proj.weight)
    x = torch.randn(2, 7, 32, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(ours(x), hf(x))
    assert sum(p.numel() for p in hf.parameters()) == ffn.ffn_params(32, 88, "swiglu")


def test_swiglu_zero_gate_switches_features_off(gen):
    x = torch.randn(4, 8, generator=gen, dtype=torch.float64)
    w_up = torch.randn(8, 6, generator=gen, dtype=torch.float64)
    w_down = torch.eye(6, 8, dtype=torch.float64)
    w_gate = torch.zeros(8, 6, dtype=torch.float64)  # SiLU(0) = 0: every feature is off
    assert ffn.swiglu(x, w_gate, w_up, w_down).abs().max() == 0


@pytest.mark.parametrize("forward, backward", [(ffn.swiglu, ffn.swiglu_backward), (ffn.geglu, ffn.geglu_backward)])
@pytest.mark.parametrize("shape", [(6,), (4, 6), (2, 3, 6)])
def test_gated_backward_matches_autograd(forward, backward, shape, gen):
    x = torch.randn(shape, generator=gen, dtype=torch.float64).requires_grad_()
    weights = [torch.randn(r, c, generator=gen, dtype=torch.float64).requires_grad_()
               for r, c in ((6, 10), (6, 10), (10, 6))]
    grad_out = torch.randn(shape, generator=gen, dtype=torch.float64)
    forward(x, *weights).backward(grad_out)
    grads = backward(x.detach(), *(w.detach() for w in weights), grad_out)
    for mine, leaf in zip(grads, (x, *weights)):
        assert mine.shape == leaf.shape
        torch.testing.assert_close(mine, leaf.grad)


def test_geglu_is_swiglu_with_a_gelu_gate(gen):
    x = torch.randn(3, 8, generator=gen)
    w_gate, w_up, w_down = torch.randn(8, 12, generator=gen), torch.randn(8, 12, generator=gen), torch.randn(12, 8, generator=gen)
    torch.testing.assert_close(ffn.geglu(x, w_gate, w_up, w_down), (F.gelu(x @ w_gate) * (x @ w_up)) @ w_down)
    with pytest.raises(ValueError, match="grad_out must be a tensor of x's shape"):
        ffn.swiglu_backward(x, w_gate, w_up, w_down, torch.zeros(3, 7))


def test_swiglu_errors():
    x = torch.zeros(2, 8)
    w = torch.zeros(8, 6)
    with pytest.raises(ValueError, match=r"w_down must have shape \(F, D\)"):
        ffn.swiglu(x, w, w, torch.zeros(8, 6))
    with pytest.raises(ValueError, match="w_up must have the shape of w_gate"):
        ffn.swiglu(x, w, torch.zeros(8, 5), torch.zeros(6, 8))
    with pytest.raises(ValueError, match=r"x's last dimension \(7\) must equal D = 8"):
        ffn.swiglu(torch.zeros(2, 7), w, w, torch.zeros(6, 8))
    with pytest.raises(ValueError, match="d_model = 8"):
        ffn.SwiGLU(8, 6)(torch.zeros(2, 7))
    with pytest.raises(TypeError, match="d_ff must be an int"):
        ffn.SwiGLU(8, 6.0)
    with pytest.raises(ValueError, match=r"d_model \(0\) must be positive"):
        ffn.SwiGLU(0, 6)


# --- FeedForward ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("activation, torch_act", [("relu", nn.ReLU()), ("gelu", nn.GELU()),
                                                   ("gelu_tanh", nn.GELU(approximate="tanh"))])
@pytest.mark.parametrize("bias", [False, True])
def test_feed_forward_matches_nn_sequential(activation, torch_act, bias, gen):
    torch.manual_seed(1)
    ours = ffn.FeedForward(12, 48, activation=activation, bias=bias).double()
    ref = nn.Sequential(nn.Linear(12, 48, bias=bias), torch_act, nn.Linear(48, 12, bias=bias)).double()
    ref.load_state_dict({k.replace("w_up", "0").replace("w_down", "2"): v for k, v in ours.state_dict().items()})
    x = torch.randn(2, 9, 12, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(ours(x), ref(x))
    # explicit math beside the module's fast path
    hidden = ffn.ACTIVATIONS[activation](x @ ours.w_up.weight.T + (ours.w_up.bias if bias else 0))
    explicit = hidden @ ours.w_down.weight.T + (ours.w_down.bias if bias else 0)
    torch.testing.assert_close(ours(x), explicit)
    assert sum(p.numel() for p in ours.parameters()) == ffn.ffn_params(12, 48, activation.split("_")[0], bias)


@pytest.mark.parametrize("variant", ffn.FFN_VARIANTS)
def test_every_variant_is_position_wise(variant, gen):
    torch.manual_seed(2)
    module = ffn.build_ffn(variant, 16, 32).double()
    x = torch.randn(2, 6, 16, generator=gen, dtype=torch.float64)
    out = module(x)
    one_at_a_time = torch.stack([torch.stack([module(x[b, t]) for t in range(6)]) for b in range(2)])
    torch.testing.assert_close(out, one_at_a_time)
    perm = torch.randperm(6, generator=gen)
    torch.testing.assert_close(module(x[:, perm]), out[:, perm])  # permuting tokens permutes outputs
    assert sum(p.numel() for p in module.parameters()) == ffn.ffn_params(16, 32, variant)


def test_feed_forward_errors():
    with pytest.raises(ValueError, match="activation must be one of"):
        ffn.FeedForward(8, 16, activation="tanh")
    with pytest.raises(ValueError, match="variant must be one of"):
        ffn.build_ffn("geglu", 8, 16)
    with pytest.raises(TypeError, match="bias must be a bool"):
        ffn.FeedForward(8, 16, bias=1)


# --- the hidden width rule and parameter counts --------------------------------------------------------

@pytest.mark.parametrize(
    "name, d_model, multiple_of, multiplier, published",
    [
        ("Llama 2 7B", 4096, 256, None, 11008),
        ("Llama 2 13B", 5120, 256, None, 13824),
        ("Llama 2 70B", 8192, 4096, 1.3, 28672),
        ("Llama 3 8B", 4096, 1024, 1.3, 14336),
        ("Llama 3 70B", 8192, 4096, 1.3, 28672),
        ("Llama 3.1 405B", 16384, 4096, 1.2, 53248),
    ],
)
def test_hidden_dim_reproduces_published_llama_widths(name, d_model, multiple_of, multiplier, published):
    assert ffn.swiglu_hidden_dim(d_model, multiple_of, multiplier) == published, name


def test_hidden_dim_rounds_up_to_the_multiple():
    for d in range(1, 600, 7):
        width = ffn.swiglu_hidden_dim(d, multiple_of=64)
        assert width % 64 == 0 and width >= int(8 * d / 3) > width - 64


def test_hidden_dim_errors():
    with pytest.raises(ValueError, match="multiple_of"):
        ffn.swiglu_hidden_dim(4096, multiple_of=0)
    with pytest.raises(ValueError, match="ffn_dim_multiplier"):
        ffn.swiglu_hidden_dim(4096, ffn_dim_multiplier=-1.0)
    with pytest.raises(TypeError, match="d_model must be an int"):
        ffn.swiglu_hidden_dim(4096.0)


def test_parameter_counts_of_the_chapter_table():
    d = 4096
    assert ffn.ffn_params(d, 4 * d, "gelu") == 8 * d * d
    assert ffn.ffn_params(d, 4 * d, "swiglu") == 12 * d * d
    assert ffn.ffn_params(d, 11008, "swiglu") == 3 * 4096 * 11008 == 135_266_304
    assert ffn.ffn_params(d, 14336, "swiglu") == 176_160_768
    with pytest.raises(ValueError, match="bias=True is not supported"):
        ffn.ffn_params(d, 11008, "swiglu", bias=True)


def test_counts_match_modules_built_on_meta():
    with torch.device("meta"):
        module = ffn.SwiGLU(4096, 11008)
    assert sum(p.numel() for p in module.parameters()) == ffn.ffn_params(4096, 11008)


# --- device --------------------------------------------------------------------------------------------

def test_runs_on_the_course_device():
    device = get_device()
    torch.manual_seed(3)
    module = ffn.SwiGLU(8, 24).to(device)
    x = torch.randn(2, 3, 8, device=device)
    out = module(x)
    assert out.device.type == device.type and out.shape == x.shape
    explicit = ffn.swiglu(x, module.w_gate.weight.T, module.w_up.weight.T, module.w_down.weight.T)
    torch.testing.assert_close(out, explicit)
    assert ffn.build_ffn("gelu", 8, 16).to(device)(x).device.type == device.type
