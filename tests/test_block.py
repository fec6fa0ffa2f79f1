"""TransformerBlock: Hugging Face's LlamaDecoderLayer reproduced (eager with an explicit causal mask,
and sdpa), torch's nn.TransformerEncoderLayer reproduced for the LayerNorm/ReLU/GELU/bias variants in
both placements, every variant equal to its formula written out, exact causality, the identity term of
the pre-norm Jacobian, meta-device shapes, clear errors."""

import itertools

import pytest
import torch
from torch import nn

from course_lib import norms
from course_lib.block import TransformerBlock, build_norm
from course_lib.ffn import build_ffn
from course_lib.config import PRESETS, ModelConfig
from course_lib.device import get_device
from course_lib.ffn import FeedForward, SwiGLU
from course_lib.positional import rope_cos_sin


def config(**changes) -> ModelConfig:
    base = dict(vocab_size=16, d_model=32, n_layers=1, n_heads=4, n_kv_heads=2, d_ff=48)
    return ModelConfig(**{**base, **changes})


def randomised(block: nn.Module, seed: int = 0) -> nn.Module:
    """Norm gains in [0.5, 1.5] and non-zero shifts, so that a swapped or missing norm cannot hide."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in block.named_parameters():
            if "norm" in name:
                p.copy_(torch.rand_like(p) + 0.5 if name.endswith("weight") else 0.1 * torch.randn_like(p))
    return block.eval()


def tables(cfg: ModelConfig, positions: torch.Tensor, dtype=torch.float32):
    if cfg.positional != "rope":
        return None, None
    return rope_cos_sin(positions, cfg.head_dim, cfg.rope_theta, dtype=dtype)


# --- Hugging Face Llama ---------------------------------------------------------------------------

LLAMA_CASES = {
    "gqa": dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2),
    "mha": dict(hidden_size=48, num_attention_heads=4, num_key_value_heads=4),
    "mqa": dict(hidden_size=48, num_attention_heads=6, num_key_value_heads=1),
    "head-dim-theta": dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=24,
                           rope_theta=500_000.0),
}

HF_TO_OURS = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.o_proj.weight": "attn.w_o.weight",
    "mlp.gate_proj.weight": "ffn.w_gate.weight",
    "mlp.up_proj.weight": "ffn.w_up.weight",
    "mlp.down_proj.weight": "ffn.w_down.weight",
}


def llama_layer_and_block(case: str, attn: str):
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    kwargs = dict(LLAMA_CASES[case])
    theta = kwargs.pop("rope_theta", 10_000.0)
    hf_config = LlamaConfig(vocab_size=16, intermediate_size=88, num_hidden_layers=1, rms_norm_eps=1e-5,
                            max_position_embeddings=64,
                            rope_parameters={"rope_type": "default", "rope_theta": theta}, **kwargs)
    hf_config._attn_implementation = attn
    torch.manual_seed(0)
    layer = randomised(LlamaDecoderLayer(hf_config, layer_idx=0))
    rotary = LlamaRotaryEmbedding(hf_config)
    ours = ModelConfig(vocab_size=16, d_model=hf_config.hidden_size, n_layers=1,
                       n_heads=hf_config.num_attention_heads, n_kv_heads=hf_config.num_key_value_heads,
                       head_dim=hf_config.head_dim, d_ff=88, rope_theta=theta, norm_eps=1e-5)
    block = TransformerBlock(ours).eval()
    theirs = layer.state_dict()
    projections = [theirs.pop(f"self_attn.{n}_proj.weight") for n in "qkv"]
    state = {HF_TO_OURS[name]: tensor for name, tensor in theirs.items()}
    state["attn.w_qkv.weight"] = torch.cat(projections)  # q_proj, k_proj, v_proj stacked by rows
    block.load_state_dict(state, strict=True)  # every tensor has exactly one home
    return layer, rotary, block, ours


@pytest.mark.parametrize("case", sorted(LLAMA_CASES))
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_matches_hugging_face_llama_decoder_layer(case, attn):
    layer, rotary, block, cfg = llama_layer_and_block(case, attn)
    B, T, start = 2, 9, 5  # positions 5 … 13: RoPE must use the positions, not the indices
    x = torch.randn(B, T, cfg.d_model, generator=torch.Generator().manual_seed(1))
    positions = torch.arange(start, start + T)  # (T,)
    hf_cos, hf_sin = rotary(x, positions[None].expand(B, T))  # (B, T, D_h): each half repeated
    cos, sin = tables(cfg, positions)  # (T, D_h/2)
    half = cfg.head_dim // 2
    assert torch.allclose(hf_cos[0, :, :half], cos, atol=1e-6)
    assert torch.allclose(hf_sin[0, :, half:], sin, atol=1e-6)
    allowed = torch.ones(T, T, dtype=torch.bool).tril()  # (T, T), True = may attend
    additive = torch.zeros(T, T).masked_fill(~allowed, torch.finfo(torch.float32).min)
    hf_masks = [additive[None, None].expand(B, 1, T, T)]  # eager adds the mask to the scores
    if attn == "sdpa":
        hf_masks += [None, allowed[None, None].expand(B, 1, T, T)]  # None: causal under sdpa only
    with torch.no_grad():
        for hf_mask in hf_masks:
            expected = layer(x, attention_mask=hf_mask, position_embeddings=(hf_cos, hf_sin))
            for implementation in ("sdpa", "reference"):
                got = block(x, cos, sin, implementation=implementation)
                assert (got - expected).abs().max().item() < 1e-5, (case, attn, implementation)


# --- torch's nn.TransformerEncoderLayer -------------------------------------------------------------

@pytest.mark.parametrize("placement, ffn", list(itertools.product(["pre", "post"], ["relu", "gelu"])))
def test_matches_torch_transformer_encoder_layer(placement, ffn):
    """LayerNorm with shifts, biases everywhere, ReLU or exact GELU, both placements, causal mask."""
    D, H, F, T = 32, 4, 48, 7
    torch.manual_seed(0)
    reference = nn.TransformerEncoderLayer(D, H, F, dropout=0.0, activation=ffn, layer_norm_eps=1e-5,
                                           batch_first=True, norm_first=placement == "pre")
    randomised(reference)
    cfg = config(d_model=D, n_heads=H, n_kv_heads=H, d_ff=F, norm="layer", placement=placement, ffn=ffn,
                 positional="none", bias=True)
    block = TransformerBlock(cfg).eval()
    with torch.no_grad():
        block.attn.w_qkv.weight.copy_(reference.self_attn.in_proj_weight)  # both: W_q, W_k, W_v by rows
        block.attn.w_qkv.bias.copy_(reference.self_attn.in_proj_bias)
        pairs = [(block.attn.w_o, reference.self_attn.out_proj), (block.ffn.w_up, reference.linear1),
                 (block.ffn.w_down, reference.linear2), (block.attn_norm, reference.norm1),
                 (block.ffn_norm, reference.norm2)]
        for ours, theirs in pairs:
            ours.weight.copy_(theirs.weight)
            ours.bias.copy_(theirs.bias)
        x = torch.randn(2, T, D)
        causal = nn.Transformer.generate_square_subsequent_mask(T)  # float, -inf above the diagonal
        expected = reference(x, src_mask=causal, is_causal=True)
        got = block(x)
    assert (got - expected).abs().max().item() < 1e-5


# --- every variant is its formula ------------------------------------------------------------------

VARIANTS = list(itertools.product(["rms", "layer"], ["pre", "post"], ["swiglu", "gelu", "relu"],
                                  ["rope", "none"]))


@pytest.mark.parametrize("norm, placement, ffn, positional", VARIANTS)
def test_variant_computes_its_formula(norm, placement, ffn, positional):
    cfg = config(norm=norm, placement=placement, ffn=ffn, positional=positional)
    block = randomised(TransformerBlock(cfg).double())
    assert isinstance(block.attn_norm, norms.RMSNorm if norm == "rms" else norms.LayerNorm)
    assert isinstance(block.ffn, SwiGLU if ffn == "swiglu" else FeedForward)
    if ffn != "swiglu":
        assert block.ffn.activation == ffn
    x = torch.randn(3, 6, cfg.d_model, dtype=torch.float64)
    cos, sin = tables(cfg, torch.arange(6), dtype=torch.float64)
    n1, attn, n2, mlp = block.attn_norm, block.attn, block.ffn_norm, block.ffn
    with torch.no_grad():
        if placement == "pre":
            h = x + attn(n1(x), cos, sin)  # the stream plus what attention writes
            expected = h + mlp(n2(h))
        else:
            h = n1(x + attn(x, cos, sin))
            expected = n2(h + mlp(h))
        for implementation in ("sdpa", "reference"):
            got = block(x, cos, sin, implementation=implementation)
            assert torch.allclose(got, expected, rtol=1e-10, atol=1e-10), implementation


def test_norms_have_a_shift_only_with_biases():
    assert build_norm(config(norm="layer", ffn="gelu", bias=True)).bias is not None
    assert build_norm(config(norm="layer")).bias is None
    assert not hasattr(build_norm(config()), "bias")
    assert isinstance(TransformerBlock(config(ffn="relu")).ffn, FeedForward)
    assert TransformerBlock(config(ffn="gelu", bias=True)).ffn.w_up.bias is not None
    assert build_ffn("gelu", 8, 16, bias=True).w_down.bias is not None


def test_explicit_and_fused_attention_agree_in_float32():
    cfg = PRESETS["tiny"]
    block = randomised(TransformerBlock(cfg))
    x = torch.randn(2, 11, cfg.d_model)
    cos, sin = tables(cfg, torch.arange(11))
    with torch.no_grad():
        fused = block(x, cos, sin)
        explicit = block(x, cos, sin, implementation="reference")
    assert (fused - explicit).abs().max().item() < 1e-5


# --- causality ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("norm, placement, ffn, positional", VARIANTS[::3] + [VARIANTS[0]])
def test_future_positions_do_not_change_earlier_outputs(norm, placement, ffn, positional):
    cfg = config(norm=norm, placement=placement, ffn=ffn, positional=positional)
    block = randomised(TransformerBlock(cfg))
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(2, 10, cfg.d_model, generator=gen)
    changed = x.clone()
    changed[:, 6:] = 10 * torch.randn(2, 4, cfg.d_model, generator=gen)
    cos, sin = tables(cfg, torch.arange(10))
    with torch.no_grad():
        for implementation in ("sdpa", "reference"):
            a = block(x, cos, sin, implementation=implementation)
            b = block(changed, cos, sin, implementation=implementation)
            assert torch.equal(a[:, :6], b[:, :6])  # exactly, not approximately
            assert not torch.allclose(a[:, 6:], b[:, 6:])


def test_jacobian_is_block_lower_triangular():
    cfg = config(d_model=16, n_heads=2, n_kv_heads=1, d_ff=24)
    block = randomised(TransformerBlock(cfg).double())
    T = 5
    x = torch.randn(1, T, 16, dtype=torch.float64)
    cos, sin = tables(cfg, torch.arange(T), dtype=torch.float64)
    jac = torch.autograd.functional.jacobian(lambda y: block(y, cos, sin), x, vectorize=True)
    # jac: (1, T, D, 1, T, D)
    per_pair = jac[0, :, :, 0].abs().amax(dim=(1, 3))  # (T, T): largest |∂out[t]/∂x[u]|
    assert torch.all(per_pair.triu(1) == 0)  # no path from a later input to an earlier output
    below = torch.ones(T, T, dtype=torch.bool).tril()  # (T, T): u ≤ t
    assert torch.all(per_pair[below] > 0)


# --- the identity term of the pre-norm Jacobian --------------------------------------------------------

def silenced(placement: str, norm: str = "rms") -> TransformerBlock:
    """A block whose sublayers write nothing: the output projections w_o and w_down are zero."""
    cfg = config(d_model=16, n_heads=2, n_kv_heads=1, placement=placement, norm=norm, positional="none")
    block = randomised(TransformerBlock(cfg).double())
    with torch.no_grad():
        block.attn.w_o.weight.zero_()
        block.ffn.w_down.weight.zero_()
    return block


def jacobian_at(block: TransformerBlock, x: torch.Tensor) -> torch.Tensor:
    """∂out/∂x for one sequence, reshaped to (T·D, T·D)."""
    n = x.numel()
    return torch.autograd.functional.jacobian(block, x, vectorize=True).reshape(n, n)


@pytest.mark.parametrize("norm", ["rms", "layer"])
def test_silenced_pre_norm_block_has_exactly_the_identity_jacobian(norm):
    block = silenced("pre", norm)
    x = 3 * torch.randn(1, 4, 16, dtype=torch.float64)
    assert torch.equal(block(x), x)
    assert torch.equal(jacobian_at(block, x), torch.eye(x.numel(), dtype=torch.float64))


def test_silenced_post_norm_block_has_only_the_norms_jacobian():
    block = silenced("post")
    x = 3 * torch.randn(1, 4, 16, dtype=torch.float64)
    n1, n2 = block.attn_norm, block.ffn_norm
    per_position = [
        norms.rms_norm_jacobian(n1(xt), n2.weight.double(), n2.eps)
        @ norms.rms_norm_jacobian(xt, n1.weight.double(), n1.eps)
        for xt in x[0]
    ]  # chain rule through the two norms, position by position
    expected = torch.block_diag(*per_position)
    jac = jacobian_at(block, x)
    assert torch.allclose(jac, expected, atol=1e-10)
    assert (jac - torch.eye(x.numel(), dtype=torch.float64)).abs().max() > 0.1  # no identity term


def test_pre_norm_jacobian_is_identity_plus_branches_that_shrink_with_the_stream():
    """J = I + (branch terms ∝ 1/rms): scale the stream up and J → I; post-norm's J → 0 instead."""
    torch.manual_seed(1)
    x = torch.randn(1, 4, 16, dtype=torch.float64)
    eye = torch.eye(x.numel(), dtype=torch.float64)
    small = dict(d_model=16, n_heads=2, n_kv_heads=1, positional="none")
    pre = randomised(TransformerBlock(config(**small)).double())
    post = randomised(TransformerBlock(config(**small, placement="post")).double())
    branch = [(jacobian_at(pre, s * x) - eye).abs().max().item() for s in (1.0, 10.0, 100.0)]
    assert branch[0] > 10 * branch[2] and branch[2] < 0.05  # what remains is the identity
    whole_post = [jacobian_at(post, s * x).abs().max().item() for s in (1.0, 100.0)]
    assert whole_post[1] < 0.05 * whole_post[0]  # no identity term: the whole Jacobian fades


# --- shapes, devices, errors -------------------------------------------------------------------------

def test_full_size_block_on_the_meta_device():
    cfg = PRESETS["llama-2-7b"]
    with torch.device("meta"):
        block = TransformerBlock(cfg)
    x = torch.empty(32, 2048, cfg.d_model, device="meta")
    cos, sin = rope_cos_sin(torch.arange(2048), cfg.head_dim, device="meta")
    out = block(x, cos, sin)
    assert out.shape == x.shape and out.device.type == "meta"
    assert sum(p.numel() for p in block.parameters()) == 4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096


def test_runs_on_the_device():
    device = get_device()
    cfg = PRESETS["tiny"]
    block = TransformerBlock(cfg).to(device)
    x = torch.randn(2, 5, cfg.d_model, device=device)
    cos, sin = rope_cos_sin(torch.arange(5), cfg.head_dim, device=device)
    assert block(x, cos, sin).device.type == device.type


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda b, x, c, s: TransformerBlock("tiny"), TypeError, "config must be a ModelConfig"),
        (lambda b, x, c, s: b(x.tolist(), c, s), TypeError, "x must be a torch.Tensor"),
        (lambda b, x, c, s: b(x.long(), c, s), TypeError, "floating-point"),
        (lambda b, x, c, s: b(x[..., :16], c, s), ValueError, "D = d_model (32)"),
        (lambda b, x, c, s: b(x[0], c, s), ValueError, "shape (B, T, D)"),
        (lambda b, x, c, s: b(x), ValueError, "pass the RoPE tables cos and sin"),
        (lambda b, x, c, s: b(x, c, None), ValueError, "pass the RoPE tables cos and sin"),
        (lambda b, x, c, s: b(x, c, s, mask=torch.ones(5, 5)), TypeError, "bool"),
        (lambda b, x, c, s: b(x, c, s, implementation="flash"), ValueError, "implementation must be"),
        (lambda b, x, c, s: TransformerBlock(config(positional="none"))(x, c, s), ValueError,
         "built without RoPE"),
    ],
)
def test_bad_input_raises_a_clear_error(call, error, words):
    cfg = config()
    block = TransformerBlock(cfg)
    x = torch.randn(2, 5, cfg.d_model)
    cos, sin = tables(cfg, torch.arange(5))
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        call(block, x, cos, sin)
