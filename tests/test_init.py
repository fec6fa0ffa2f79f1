"""course_lib.init: GPT-2's initialisation by role, checked statistically, against Hugging Face's GPT-2
(which uses the same 0.02 / √(2N)), on Hugging Face Llama's names, and for its error messages."""

import math

import pytest
import torch
import torch.nn as nn

from course_lib import init
from course_lib.device import get_device


class Block(nn.Module):
    def __init__(self, d, d_ff, bias):
        super().__init__()
        self.attn_norm = nn.RMSNorm(d)
        self.w_q, self.w_k = nn.Linear(d, d, bias=bias), nn.Linear(d, d, bias=bias)
        self.w_v, self.w_o = nn.Linear(d, d, bias=bias), nn.Linear(d, d, bias=bias)
        self.ffn_norm = nn.LayerNorm(d)
        self.w_up, self.w_down = nn.Linear(d, d_ff, bias=bias), nn.Linear(d_ff, d, bias=bias)


class TinyLM(nn.Module):
    def __init__(self, n_layers, d=64, d_ff=256, vocab=300, bias=True):
        super().__init__()
        self.embed = nn.Embedding(vocab, d, padding_idx=0)
        self.blocks = nn.ModuleList(Block(d, d_ff, bias) for _ in range(n_layers))
        self.final_norm = nn.RMSNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)


def rms(p):
    return p.detach().pow(2).mean().sqrt().item()


def test_residual_std_is_sigma_over_root_2n():
    assert init.residual_std(0.02, 12) == pytest.approx(0.02 / math.sqrt(24))
    assert init.residual_std(0.02, 1) == pytest.approx(0.02 / math.sqrt(2))
    assert init.residual_std(1.0, 8) == pytest.approx(0.25)


@pytest.mark.parametrize("n_layers", [1, 4, 12])
def test_stds_by_role(n_layers):
    model = TinyLM(n_layers)
    gen = torch.Generator().manual_seed(n_layers)
    assert init.gpt2_init_(model, n_layers, generator=gen) is model
    scaled = 0.02 / math.sqrt(2 * n_layers)
    for name, p in model.named_parameters():
        role = name.split(".")[-2]
        if "norm" in name:  # gains stay 1, shifts 0
            expected = torch.ones_like(p) if name.endswith("weight") else torch.zeros_like(p)
            assert torch.equal(p.detach(), expected), name
        elif name.endswith("bias"):
            assert torch.equal(p.detach(), torch.zeros_like(p)), name
        elif role in ("w_o", "w_down"):
            assert rms(p) == pytest.approx(scaled, rel=0.06), name
            assert abs(p.mean().item()) < 4 * scaled / math.sqrt(p.numel()), name
        elif role == "embed":
            assert p[0].abs().max() == 0  # the padding row
            assert rms(p[1:]) == pytest.approx(0.02, rel=0.06)
        else:
            assert rms(p) == pytest.approx(0.02, rel=0.06), name


def test_unscaled_scheme_and_custom_std():
    model = init.gpt2_init_(TinyLM(6), 6, std=0.1, residual_projections=())
    assert rms(model.blocks[3].w_o.weight) == pytest.approx(0.1, rel=0.06)
    assert rms(model.blocks[3].w_down.weight) == pytest.approx(0.1, rel=0.06)


def test_generator_makes_it_reproducible():
    a = init.gpt2_init_(TinyLM(2), 2, generator=torch.Generator().manual_seed(5))
    b = init.gpt2_init_(TinyLM(2), 2, generator=torch.Generator().manual_seed(5))
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(p, q), name


def test_variance_of_the_stream_stays_bounded_with_the_scaling():
    """2N random branches with unit-variance inputs add variance 2N·D_in·σ² to the stream, or D_in·σ²
    once scaled: the reason for 1/√(2N)."""
    d, n_layers, std = 256, 32, 0.02
    gen = torch.Generator().manual_seed(0)
    projections = [nn.Linear(d, d, bias=False) for _ in range(2 * n_layers)]
    holder = nn.ModuleDict({"w_o": nn.Linear(d, d)})
    holder.blocks = nn.ModuleList(nn.ModuleDict({"w_o": p}) for p in projections)
    x = torch.randn(512, d, generator=gen)
    for names, expected in [((), 2 * n_layers * d * std ** 2), (("w_o",), d * std ** 2)]:
        init.gpt2_init_(holder, n_layers, std=std, residual_projections=names, generator=gen)
        added = sum(p(torch.randn(512, d, generator=gen)) for p in projections)  # each branch reads a fresh input
        stream = x + added.detach()
        assert stream.var().item() - 1 == pytest.approx(expected, rel=0.15)


def test_hugging_face_gpt2_uses_the_same_scaled_std():
    from transformers import GPT2Config, GPT2LMHeadModel

    n_layer = 6
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=n_layer, n_embd=256, n_head=4, vocab_size=512, n_positions=64))
    block = model.transformer.h[3]
    expected = init.residual_std(model.config.initializer_range, n_layer)
    assert rms(block.attn.c_proj.weight) == pytest.approx(expected, rel=0.05)
    assert rms(block.mlp.c_proj.weight) == pytest.approx(expected, rel=0.05)
    assert rms(block.mlp.c_fc.weight) == pytest.approx(0.02, rel=0.05)


def test_works_with_hugging_face_llama_names():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=128, intermediate_size=344, num_attention_heads=4, num_key_value_heads=2,
                         num_hidden_layers=4, vocab_size=256)
    model = LlamaForCausalLM(config)
    init.gpt2_init_(model, 4, residual_projections=("o_proj", "down_proj"))
    layer = model.model.layers[2]
    assert rms(layer.self_attn.o_proj.weight) == pytest.approx(0.02 / math.sqrt(8), rel=0.06)
    assert rms(layer.mlp.down_proj.weight) == pytest.approx(0.02 / math.sqrt(8), rel=0.06)
    assert rms(layer.mlp.up_proj.weight) == pytest.approx(0.02, rel=0.06)
    assert torch.equal(layer.input_layernorm.weight.detach(), torch.ones(128))
    with pytest.raises(ValueError, match=r"no nn.Linear in the model has that name"):
        init.gpt2_init_(model, 4)  # course_lib's names do not exist in a Hugging Face model


def test_works_on_the_device():
    device = get_device()
    model = TinyLM(2).to(device)
    gen = torch.Generator(device=device).manual_seed(0)
    init.gpt2_init_(model, 2, generator=gen)
    assert rms(model.blocks[0].w_down.weight) == pytest.approx(0.01, rel=0.06)


def test_errors_name_the_argument():
    model = TinyLM(1)
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(ValueError, match=r"residual_projections names \['c_proj'\]"):
        init.gpt2_init_(model, 1, residual_projections=("c_proj",))
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))  # nothing changed
    with pytest.raises(TypeError, match="not a single string"):
        init.gpt2_init_(model, 1, residual_projections="w_o")
    with pytest.raises(ValueError, match=r"n_layers \(0\) must be at least 1"):
        init.gpt2_init_(model, 0)
    with pytest.raises(TypeError, match="n_layers must be an int"):
        init.gpt2_init_(model, 2.0)
    with pytest.raises(ValueError, match=r"std \(-0.02\) must be positive"):
        init.gpt2_init_(model, 1, std=-0.02)
    with pytest.raises(TypeError, match="model must be an nn.Module"):
        init.gpt2_init_([model], 1)
    with pytest.raises(TypeError, match="generator must be a torch.Generator"):
        init.gpt2_init_(model, 1, generator=0)
    with pytest.raises(ValueError, match="std"):
        init.residual_std(float("nan"), 4)
