"""course_lib.counting and config: exact counts against Hugging Face models built on the meta device,
published totals, FLOPs against torch's FlopCounterMode, and clear config errors."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from course_lib import counting
from course_lib.config import PRESETS, ModelConfig, get_preset

# Totals of the released checkpoints (the sum of their tensors' sizes).
PUBLISHED = {
    "llama-2-7b": 6_738_415_616,
    "llama-2-70b": 68_976_648_192,
    "llama-3-8b": 8_030_261_248,
    "mistral-7b": 7_241_732_096,
}


def hf_model_on_meta(cfg: ModelConfig):
    from transformers import LlamaConfig, LlamaForCausalLM

    hf = LlamaConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.d_model, intermediate_size=cfg.d_ff,
        num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads,
        num_key_value_heads=cfg.n_kv_heads, head_dim=cfg.head_dim,
        max_position_embeddings=cfg.max_seq_len, rms_norm_eps=cfg.norm_eps,
        tie_word_embeddings=cfg.tie_embeddings,
    )
    with torch.device("meta"):
        return LlamaForCausalLM(hf)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_counts_match_published_totals_and_hugging_face(name):
    cfg = PRESETS[name]
    count = counting.count_params(cfg)
    assert count.total == PUBLISHED[name]
    hf = hf_model_on_meta(cfg)
    assert count.total == sum(p.numel() for p in hf.parameters())
    assert count.lm_head == hf.lm_head.weight.numel()
    layer = hf.model.layers[0]
    assert count.per_block["attention"] == sum(p.numel() for p in layer.self_attn.parameters())
    assert count.per_block["ffn"] == sum(p.numel() for p in layer.mlp.parameters())


def test_tied_and_untied_differ_by_the_head():
    cfg = PRESETS["tiny"]
    tied = cfg.replace(tie_embeddings=True)
    assert counting.count_params(cfg).total - counting.count_params(tied).total == cfg.vocab_size * cfg.d_model
    assert sum(p.numel() for p in hf_model_on_meta(tied).parameters()) == counting.count_params(tied).total


def test_gpt3_is_175_billion():
    total = counting.count_params(PRESETS["gpt-3-175b"]).total
    assert 174e9 < total < 176e9


def test_breakdown_sums_to_total():
    for cfg in PRESETS.values():
        count = counting.count_params(cfg)
        parts = {k: v for k, v in count.as_dict().items() if k != "total"}
        assert sum(parts.values()) == count.total
        assert count.attention + count.ffn == cfg.n_layers * (count.per_block["attention"] + count.per_block["ffn"])


def test_rule_of_thumb_is_exact_for_its_assumptions():
    cfg = ModelConfig(vocab_size=1000, d_model=64, n_layers=3, n_heads=4, d_ff=256, ffn="gelu", norm="layer")
    count = counting.count_params(cfg)
    assert counting.approx_params(cfg) == count.total - count.norms


def test_gqa_saves_attention_parameters():
    gqa = PRESETS["llama-2-70b"]
    mha = gqa.replace(n_kv_heads=gqa.n_heads)
    saved = 1 - counting.count_params(gqa).per_block["attention"] / counting.count_params(mha).per_block["attention"]
    # K and V shrink 8×: (2 + 2/8) / 4 of the MHA attention parameters remain
    assert saved == pytest.approx(1 - (2 + 2 / 8) / 4)


def test_crossover_length_of_llama_3_8b():
    t = counting.crossover_length(PRESETS["llama-3-8b"])
    assert round(t) == 21_296
    flops = counting.block_flops(PRESETS["llama-3-8b"], seq_len=round(t))
    core = flops["qk"] + flops["softmax"] + flops["av"]
    ffn = flops["ffn_gate"] + flops["ffn_up"] + flops["ffn_down"]
    assert core / ffn == pytest.approx(1.0, rel=1e-4)


def test_matmul_flops_match_torch_flop_counter():
    cfg = ModelConfig(vocab_size=100, d_model=64, n_layers=1, n_heads=4, n_kv_heads=2, d_ff=96)
    b, t = 2, 10
    x = torch.randn(b, t, cfg.d_model)
    w = {n: torch.randn(i, o) for n, (i, o) in {
        "q": (64, 64), "k": (64, 32), "v": (64, 32), "o": (64, 64),
        "gate": (64, 96), "up": (64, 96), "down": (96, 64)}.items()}
    with FlopCounterMode(display=False) as counter:
        q = (x @ w["q"]).view(b, t, 4, 16).transpose(1, 2)  # (B, H, T, D_h)
        k = (x @ w["k"]).view(b, t, 2, 16).transpose(1, 2).repeat_interleave(2, dim=1)  # (B, H, T, D_h)
        v = (x @ w["v"]).view(b, t, 2, 16).transpose(1, 2).repeat_interleave(2, dim=1)  # (B, H, T, D_h)
        scores = q @ k.transpose(-2, -1)  # (B, H, T, T)
        out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, 64) @ w["o"]
        (F.silu(out @ w["gate"]) * (out @ w["up"])) @ w["down"]
    expected = counting.block_flops(cfg, seq_len=t, batch=b)
    measured = counter.get_total_flops()
    assert measured == sum(v for k, v in expected.items() if k != "softmax")


def test_kv_cache_bytes_of_llama_3_8b_at_8k():
    cfg = PRESETS["llama-3-8b"]
    n = counting.kv_cache_bytes(cfg, seq_len=8192)
    assert n == 2 * 32 * 8 * 128 * 8192 * 2 == 1 << 30  # exactly 1 GiB
    assert counting.kv_cache_bytes(cfg.replace(n_kv_heads=32), seq_len=8192) == 4 * n


def test_memory_helpers():
    cfg = PRESETS["llama-2-7b"]
    assert counting.weight_bytes(cfg) == 2 * PUBLISHED["llama-2-7b"]
    assert counting.training_bytes(cfg) == 16 * PUBLISHED["llama-2-7b"]


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        (dict(n_heads=6, n_kv_heads=4), ValueError, "n_heads (6) must be divisible by n_kv_heads (4)"),
        (dict(d_model=100, n_heads=3), ValueError, "d_model (100) must be divisible by n_heads (3)"),
        (dict(n_layers=0), ValueError, "n_layers (0) must be positive"),
        (dict(d_ff=2.5), TypeError, "d_ff must be an int"),
        (dict(norm="batch"), ValueError, "norm must be one of"),
        (dict(ffn="swish"), ValueError, "ffn must be one of"),
        (dict(head_dim=15, d_model=60, n_heads=4), ValueError, "head_dim (15) must be even for RoPE"),
        (dict(rope_theta=0.0), ValueError, "rope_theta (0.0) must be positive"),
        (dict(tie_embeddings=1), TypeError, "tie_embeddings must be True or False"),
        (dict(init_std=0.0), ValueError, "init_std (0.0) must be positive and finite"),
        (dict(init_std=float("nan")), ValueError, "init_std (nan) must be positive and finite"),
        (dict(init_std="0.02"), TypeError, "init_std must be a number"),
    ],
)
def test_config_errors_name_the_argument(kwargs, error, words):
    base = dict(vocab_size=100, d_model=64, n_layers=2, n_heads=4, d_ff=128)
    with pytest.raises(error) as info:
        ModelConfig(**{**base, **kwargs})
    assert words in str(info.value)


def test_config_defaults_and_presets():
    cfg = ModelConfig(vocab_size=10, d_model=64, n_layers=1, n_heads=8, d_ff=10)
    assert cfg.n_kv_heads == 8 and cfg.head_dim == 8 and cfg.n_rep == 1
    assert ModelConfig(vocab_size=10, d_model=64, n_layers=1, n_heads=8, d_ff=10, head_dim=32).head_dim == 32
    assert get_preset("llama-3-8b").n_rep == 4
    with pytest.raises(ValueError, match="unknown preset 'gpt-5'"):
        get_preset("gpt-5")
    with pytest.raises(ValueError, match="kv_len"):
        counting.block_flops(cfg, seq_len=10, kv_len=5)
    assert math.isfinite(counting.crossover_length(PRESETS["gpt-3-175b"]))


def test_replace_derives_again_what_was_left_to_its_default_and_keeps_what_was_given():
    mha = ModelConfig(vocab_size=10, d_model=96, n_layers=1, n_heads=4, d_ff=10)  # D_h 24, H_kv 4
    three = mha.replace(n_heads=3)
    assert (three.head_dim, three.n_kv_heads) == (32, 3)  # not the old 24 and 4
    assert mha.replace(d_model=128).head_dim == 32
    assert mha.replace(d_ff=20).head_dim == 24  # unrelated changes keep the derived values
    gqa = ModelConfig(vocab_size=10, d_model=96, n_layers=1, n_heads=4, n_kv_heads=2, head_dim=16, d_ff=10)
    assert (gqa.replace(n_heads=8).n_kv_heads, gqa.replace(n_heads=8).head_dim) == (2, 16)  # given: kept
    assert mha.replace(n_heads=3, head_dim=24).head_dim == 24
    assert three == ModelConfig(vocab_size=10, d_model=96, n_layers=1, n_heads=3, d_ff=10)


# --- the breakdown, component by component, against DecoderLM on the meta device -------------------

@pytest.mark.parametrize("name", sorted(PRESETS))
def test_breakdown_equals_decoder_lm_modules_on_meta(name):
    from course_lib.model import DecoderLM

    cfg = PRESETS[name]
    with torch.device("meta"):
        model = DecoderLM(cfg)

    def numel(modules):
        return sum(p.numel() for m in modules for p in m.parameters())

    count = counting.count_params(cfg)
    assert count.total == sum(p.numel() for p in model.parameters())  # shared (tied) tensors once
    assert count.embedding == model.embed.weight.numel()
    assert count.positional == (model.pos_embed.weight.numel() if cfg.positional == "learned" else 0)
    assert count.attention == numel(b.attn for b in model.blocks)
    assert count.ffn == numel(b.ffn for b in model.blocks)
    assert count.norms == numel([m for b in model.blocks for m in (b.attn_norm, b.ffn_norm)] + [model.norm])
    assert count.lm_head == (0 if cfg.tie_embeddings else model.lm_head.weight.numel())
    block = model.blocks[0]
    assert count.per_block == {"attention": numel([block.attn]), "ffn": numel([block.ffn]),
                               "norms": numel([block.attn_norm, block.ffn_norm])}


# --- FLOPs of a real block against torch's counter ---------------------------------------------------

@pytest.mark.parametrize("variant", ["swiglu-gqa", "gelu-bias-mha", "relu-mqa-headdim"])
def test_block_flops_match_flop_counter_on_a_real_block(variant):
    from course_lib.block import TransformerBlock
    from course_lib.positional import rope_cos_sin

    cfg = {
        "swiglu-gqa": PRESETS["tiny"],
        "gelu-bias-mha": ModelConfig(vocab_size=50, d_model=48, n_layers=1, n_heads=4, d_ff=192, ffn="gelu",
                                     norm="layer", bias=True, positional="learned"),
        "relu-mqa-headdim": ModelConfig(vocab_size=50, d_model=32, n_layers=1, n_heads=4, n_kv_heads=1,
                                        head_dim=12, d_ff=80, ffn="relu"),
    }[variant]
    from course_lib.device import get_device

    device = get_device()  # CPU here; the counts are the same on a GPU
    b, t = 3, 12
    block = TransformerBlock(cfg).to(device)
    x = torch.randn(b, t, cfg.d_model, device=device)
    cos = sin = None
    if cfg.positional == "rope":
        cos, sin = rope_cos_sin(torch.arange(t, device=device), cfg.head_dim, cfg.rope_theta, device=device)
    with FlopCounterMode(display=False) as counter:
        block(x, cos, sin, implementation="reference")  # explicit math: every product is an aten op
    by_module = {name: sum(ops.values()) for name, ops in counter.get_flop_counts().items()}
    expected = counting.block_flops(cfg, seq_len=t, batch=b)
    # w_qkv's one product does the work of the three projections the formula itemises
    qkv = expected["q_proj"] + expected["k_proj"] + expected["v_proj"]
    assert qkv == by_module["TransformerBlock.attn.w_qkv"]
    for ours, module in [("o_proj", "attn.w_o"), ("ffn_up", "ffn.w_up"), ("ffn_down", "ffn.w_down")]:
        assert expected[ours] == by_module[f"TransformerBlock.{module}"], ours
    core = counter.get_flop_counts()["TransformerBlock"]
    assert sum(v for op, v in core.items() if "bmm" in str(op)) == expected["qk"] + expected["av"]
    assert counter.get_total_flops() == sum(v for k, v in expected.items() if k != "softmax")


def test_causal_pairs_equal_the_mask_and_move_the_crossover():
    cfg = PRESETS["llama-3-8b"]
    for t, s in [(7, 7), (5, 9), (1, 30)]:
        q_pos, k_pos = torch.arange(s - t, s), torch.arange(s)
        kept = int((q_pos[:, None] >= k_pos[None, :]).sum())  # pairs a causal mask keeps
        dense = counting.block_flops(cfg, seq_len=t, kv_len=s)
        causal = counting.block_flops(cfg, seq_len=t, kv_len=s, causal=True)
        assert causal["qk"] * (t * s) == dense["qk"] * kept
        assert causal["softmax"] == 5 * cfg.n_heads * kept
        assert causal["ffn_up"] == dense["ffn_up"] and causal["q_proj"] == dense["q_proj"]
    dense_t = counting.crossover_length(cfg)
    causal_t = counting.crossover_length(cfg, causal=True)
    assert causal_t == pytest.approx(2 * dense_t - 1)
    flops = counting.block_flops(cfg, seq_len=round(causal_t), causal=True)
    core = flops["qk"] + flops["softmax"] + flops["av"]
    assert core / (flops["ffn_gate"] + flops["ffn_up"] + flops["ffn_down"]) == pytest.approx(1.0, rel=1e-4)


def test_crossover_does_not_depend_on_kv_heads_and_uses_two_matrices_without_a_gate():
    cfg = PRESETS["llama-3-8b"]
    assert counting.crossover_length(cfg) == counting.crossover_length(cfg.replace(n_kv_heads=32))
    gelu = PRESETS["gpt-3-175b"]
    expected = 4 * gelu.d_model * gelu.d_ff / ((4 * gelu.head_dim + 5) * gelu.n_heads)
    assert counting.crossover_length(gelu) == pytest.approx(expected)


def test_forward_flops_per_token_are_twice_the_block_parameters():
    # every weight is used in one multiply-add per token: 2 FLOPs per parameter (biases and norms aside)
    cfg = PRESETS["llama-2-70b"]
    flops = counting.block_flops(cfg, seq_len=1)
    matrices = sum(v for k, v in flops.items() if k.endswith("_proj") or k.startswith("ffn_"))
    count = counting.count_params(cfg)
    assert matrices == 2 * (count.per_block["attention"] + count.per_block["ffn"])


@pytest.mark.parametrize("fn", [counting.count_params, counting.approx_params, counting.crossover_length,
                                lambda c: counting.block_flops(c, 4), lambda c: counting.kv_cache_bytes(c, 4)])
def test_counting_functions_refuse_what_is_not_a_config(fn):
    with pytest.raises(TypeError, match="config must be a ModelConfig"):
        fn({"d_model": 64})


@pytest.mark.parametrize("t, window", [(1, None), (7, None), (12, 5), (5, 5), (4, 9), (30, 1)])
def test_attention_core_flops_count_the_scores_a_causal_window_keeps(t, window):
    cfg = PRESETS["mistral-7b"]
    i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
    keep = (j <= i) if window is None else (j <= i) & (i - j < window)  # the mask itself
    kept = int(keep.sum())
    assert counting.attention_core_flops(cfg, t, window=window) == (4 * cfg.head_dim + 5) * cfg.n_heads * kept
    if window is None:  # block_flops' causal count agrees
        flops = counting.block_flops(cfg, seq_len=t, causal=True)
        assert counting.attention_core_flops(cfg, t) == flops["qk"] + flops["softmax"] + flops["av"]


def test_attention_core_flops_grow_linearly_past_the_window_and_refuse_bad_arguments():
    cfg = PRESETS["mistral-7b"]
    w = cfg.sliding_window
    steps = [counting.attention_core_flops(cfg, t, window=w) for t in (2 * w, 3 * w, 4 * w)]
    assert steps[2] - steps[1] == steps[1] - steps[0] == (4 * cfg.head_dim + 5) * cfg.n_heads * w * w
    for bad in [dict(seq_len=0), dict(seq_len=4, window=0), dict(seq_len=2.5)]:
        with pytest.raises(ValueError):
            counting.attention_core_flops(cfg, **bad)


def test_moe_params_match_mixtral_on_meta_and_its_published_size():
    from transformers import MixtralConfig, MixtralForCausalLM

    cfg = PRESETS["mistral-7b"]  # Mixtral 8x7B is Mistral 7B's shape with 8 experts, 2 per token
    total, active = counting.moe_params(cfg, n_experts=8, top_k=2)
    assert total == 46_702_792_704  # the released checkpoint's tensors
    assert round(active / 1e8) == 129  # "12.9B active parameters"
    hf = MixtralConfig(vocab_size=cfg.vocab_size, hidden_size=cfg.d_model, intermediate_size=cfg.d_ff,
                       num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads,
                       num_key_value_heads=cfg.n_kv_heads, num_local_experts=8, num_experts_per_tok=2)
    with torch.device("meta"):
        model = MixtralForCausalLM(hf)
    assert sum(p.numel() for p in model.parameters()) == total
    dense = counting.count_params(cfg).total
    assert counting.moe_params(cfg, 1, 1) == (dense + cfg.n_layers * cfg.d_model,) * 2  # plus a router
    with pytest.raises(ValueError, match="top_k"):
        counting.moe_params(cfg, 4, 5)
    with pytest.raises(ValueError, match="SwiGLU"):
        counting.moe_params(PRESETS["gpt-3-175b"], 8, 2)
