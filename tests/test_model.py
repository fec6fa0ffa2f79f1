"""DecoderLM: Hugging Face Llama/Mistral logits and greedy tokens reproduced, causality exact, cached
decoding equal to uncached, counts equal to numel, clear errors."""

import pytest
import torch

from course_lib import counting
from course_lib.config import PRESETS, ModelConfig
from course_lib.kv_cache import ConcatKVCache, KVCache
from course_lib.attention import attention_reference, causal_mask, repeat_kv
from course_lib.model import DecoderLM, config_from_hf, next_token_probs
from course_lib.positional import rope_cos_sin

HF_CASES = {
    # name: (model class, config kwargs)
    "llama-mha": ("llama", dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=4)),
    "llama-gqa": ("llama", dict(hidden_size=64, num_attention_heads=8, num_key_value_heads=2)),
    "llama-mqa-tied": ("llama", dict(hidden_size=48, num_attention_heads=6, num_key_value_heads=1,
                                     tie_word_embeddings=True)),
    "llama-theta-headdim": ("llama", dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                          head_dim=24, rope_theta=500_000.0, num_hidden_layers=3)),
    "mistral-window": ("mistral", dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                       sliding_window=5)),
}


def hf_model(kind: str, attn: str = "sdpa", seed: int = 0, **kwargs):
    from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM

    theta = kwargs.pop("rope_theta", 10_000.0)
    defaults = dict(vocab_size=97, intermediate_size=88, num_hidden_layers=2, max_position_embeddings=64,
                    rms_norm_eps=1e-5, rope_theta=theta,  # accepted by transformers 4.x and 5.x
                    eos_token_id=None)  # Hugging Face's generate would stop at an end-of-sequence token
    config_cls, model_cls = (LlamaConfig, LlamaForCausalLM) if kind == "llama" else (MistralConfig, MistralForCausalLM)
    config = config_cls(**{**defaults, **kwargs})
    config._attn_implementation = attn
    torch.manual_seed(seed)
    model = model_cls(config).eval()
    with torch.no_grad():  # norm gains start at 1: randomise them so a mixed-up norm cannot hide
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    return model


@pytest.mark.parametrize("case", sorted(HF_CASES))
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_from_hf_reproduces_logits(case, attn):
    kind, kwargs = HF_CASES[case]
    hf = hf_model(kind, attn, **kwargs)
    ours = DecoderLM.from_hf(hf)
    ids = torch.randint(0, 97, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = hf(ids).logits
        for implementation in ("sdpa", "reference"):
            got = ours(ids, implementation=implementation)
            assert (got - expected).abs().max().item() <= 1e-4, (case, implementation)


@pytest.mark.parametrize("case", ["llama-gqa", "llama-mqa-tied", "mistral-window"])
def test_greedy_generation_matches_hugging_face(case):
    kind, kwargs = HF_CASES[case]
    hf = hf_model(kind, "sdpa", **kwargs)
    ours = DecoderLM.from_hf(hf)
    prompt = torch.randint(0, 97, (2, 4), generator=torch.Generator().manual_seed(2))
    expected = hf.generate(prompt, max_new_tokens=12, do_sample=False, pad_token_id=0,
                           attention_mask=torch.ones_like(prompt))
    assert torch.equal(ours.generate(prompt, 12), expected)
    assert torch.equal(ours.generate(prompt, 12, use_cache=False), expected)


def test_from_hf_is_strict_and_ties_weights():
    kind, kwargs = HF_CASES["llama-mqa-tied"]
    ours = DecoderLM.from_hf(hf_model(kind, **kwargs))
    assert ours.lm_head.weight is ours.embed.weight
    assert config_from_hf(hf_model(kind, **kwargs).config).tie_embeddings
    hf = hf_model("llama", hidden_size=64, num_attention_heads=4)
    hf.register_buffer("extra", torch.zeros(1))  # a tensor DecoderLM has no place for
    with pytest.raises(ValueError, match="unexpected Hugging Face tensor 'extra'"):
        DecoderLM.from_hf(hf)
    hf = hf_model("llama", hidden_size=64, num_attention_heads=4)
    del hf.model.layers[0].self_attn.v_proj  # w_qkv's last rows would stay empty
    with pytest.raises(ValueError, match=r"blocks\.0\.attn\.w_qkv\.weight needs q_proj, k_proj and v_proj"):
        DecoderLM.from_hf(hf)


def test_from_hf_stacks_q_k_v_and_shares_every_other_tensor():
    """Every Hugging Face tensor lands in one place: q_proj, k_proj and v_proj as the three blocks
    of rows of a layer's w_qkv (a copy), everything else as the very same tensor."""
    kind, kwargs = HF_CASES["llama-gqa"]
    hf = hf_model(kind, **kwargs)
    ours = DecoderLM.from_hf(hf)
    theirs = hf.state_dict()
    ours_by_address = {t.data_ptr(): name for name, t in ours.state_dict().items()}
    for name, tensor in theirs.items():
        if name.split(".")[-2] in ("q_proj", "k_proj", "v_proj"):
            continue
        assert ours_by_address.get(tensor.data_ptr()) is not None, name
    for i, block in enumerate(ours.blocks):
        w_q, w_k, w_v = block.attn.w_qkv.weight.split(block.attn.qkv_sizes)
        for part, want in zip((w_q, w_k, w_v), "qkv"):
            assert torch.equal(part, theirs[f"model.layers.{i}.self_attn.{want}_proj.weight"])
    assert len(theirs) == len(list(ours.parameters())) + 2 * len(ours.blocks)  # 3 tensors → 1 per layer


def test_init_std_sets_the_initial_scale_and_comes_from_initializer_range():
    """config.init_std is σ of gpt2_init_: σ for the matrices (the tied table included) and
    σ/√(2N) for the residual output projections; Hugging Face calls it initializer_range."""
    base = ModelConfig(vocab_size=512, d_model=128, n_layers=2, n_heads=4, d_ff=256,
                       tie_embeddings=True)
    for std in (0.02, 0.1):
        torch.manual_seed(0)
        model = DecoderLM(base.replace(init_std=std))
        assert model.embed.weight.std().item() == pytest.approx(std, rel=0.03)
        assert model.blocks[1].attn.w_qkv.weight.std().item() == pytest.approx(std, rel=0.03)
        assert model.blocks[1].ffn.w_down.weight.std().item() == pytest.approx(std / 2, rel=0.03)
    assert base.init_std == 0.02
    kind, kwargs = HF_CASES["llama-mqa-tied"]
    assert config_from_hf(hf_model(kind, **kwargs).config).init_std == 0.02
    assert config_from_hf(hf_model(kind, **kwargs, initializer_range=0.05).config).init_std == 0.05


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(attention_bias=True), "attention_bias=True is not supported"),
        (dict(hidden_act="gelu"), "hidden_act must be 'silu'"),
        (dict(rope_scaling={"rope_type": "linear", "factor": 2.0}), "rope_type 'linear'"),
    ],
)
def test_from_hf_refuses_what_it_does_not_implement(kwargs, words):
    from transformers import LlamaConfig

    config = LlamaConfig(vocab_size=10, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, **kwargs)
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace("[", r"\[")):
        config_from_hf(config)


def _config_like(**rope_fields):
    """A Llama config as transformers 4.x or 5.x stores it, without importing either."""
    from types import SimpleNamespace

    return SimpleNamespace(model_type="llama", vocab_size=11, hidden_size=16, num_hidden_layers=1,
                           num_attention_heads=2, num_key_value_heads=1, intermediate_size=24,
                           max_position_embeddings=32, rms_norm_eps=1e-6, **rope_fields)


@pytest.mark.parametrize(
    "fields, theta",
    [
        (dict(rope_theta=500_000.0, rope_scaling=None), 500_000.0),  # transformers 4.x
        (dict(rope_theta=123.0), 123.0),  # 4.x without a rope_scaling attribute
        (dict(rope_parameters={"rope_type": "default", "rope_theta": 250_000.0}), 250_000.0),  # 5.x
        (dict(rope_parameters={"rope_theta": 77.0}), 77.0),  # 5.x, type left implicit
        (dict(rope_parameters=None), 10_000.0),  # neither: both lines' default
    ],
)
def test_config_from_hf_reads_rope_theta_from_either_transformers_line(fields, theta):
    config = config_from_hf(_config_like(**fields))
    assert config.rope_theta == theta and config.n_kv_heads == 1 and config.head_dim == 8


@pytest.mark.parametrize(
    "fields",
    [
        dict(rope_theta=1e4, rope_scaling={"type": "linear", "factor": 2.0}),  # 4.x, older key
        dict(rope_theta=1e4, rope_scaling={"rope_type": "llama3", "factor": 8.0}),  # 4.x
        dict(rope_parameters={"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0}),  # 5.x
    ],
)
def test_config_from_hf_refuses_rope_scaling_from_either_transformers_line(fields):
    with pytest.raises(ValueError, match="only plain RoPE"):
        config_from_hf(_config_like(**fields))


# --- properties ---------------------------------------------------------------------------------------

CONFIGS = {
    "tiny": PRESETS["tiny"],
    "mha-tied": PRESETS["tiny"].replace(n_kv_heads=4, tie_embeddings=True),
    "mqa-3-layers": PRESETS["tiny"].replace(n_kv_heads=1, n_layers=3),
    "window": PRESETS["tiny"].replace(sliding_window=4),
    "post-layer-gelu-learned": PRESETS["tiny"].replace(norm="layer", placement="post", ffn="gelu",
                                                       positional="learned"),
    "sinusoidal-relu": PRESETS["tiny"].replace(ffn="relu", positional="sinusoidal"),
}


def model_for(name):
    torch.manual_seed(0)
    return DecoderLM(CONFIGS[name]).eval()


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_parameter_count_equals_numel_on_meta(name):
    with torch.device("meta"):
        model = DecoderLM(CONFIGS[name])
    assert sum(p.numel() for p in model.parameters()) == counting.count_params(CONFIGS[name]).total


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_future_tokens_do_not_change_earlier_logits(name):
    model = model_for(name)
    ids = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(3))
    changed = ids.clone()
    changed[:, 9:] = torch.randint(0, 256, (2, 7), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        a, b = model(ids), model(changed)
    assert torch.equal(a[:, :9], b[:, :9])  # exactly, not approximately
    assert not torch.allclose(a[:, 9:], b[:, 9:])


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_cached_decoding_equals_uncached(name):
    model = model_for(name)
    prompt = torch.randint(0, 256, (2, 5), generator=torch.Generator().manual_seed(5))
    uncached = model.generate(prompt, 20, use_cache=False)
    for kind in ("preallocated", "concat"):
        assert torch.equal(model.generate(prompt, 20, cache=kind), uncached), kind
    # logits too, step by step, against a full forward pass of the final sequence
    cache = KVCache.for_model(model.config, batch=2, max_len=25)
    with torch.no_grad():
        full = model(uncached)
        steps = [model(uncached[:, :5], cache=cache)]
        steps += [model(uncached[:, t:t + 1], cache=cache) for t in range(5, 25)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
    assert cache.length == 25


def test_a_single_token_equals_the_first_position():
    model = model_for("tiny")
    ids = torch.randint(0, 256, (1, 12), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        torch.testing.assert_close(model(ids[:, :1])[0, 0], model(ids)[0, 0], atol=1e-6, rtol=0)


def test_identical_tokens_give_identical_outputs_with_or_without_rope():
    """A run of one repeated token: every value vector is the same, so any attention weights average it
    to itself, and every position ends with the same logits, RoPE or not. RoPE changes the weights only."""
    model = model_for("tiny")
    same = torch.full((1, 6), 7)
    no_positions = DecoderLM(CONFIGS["tiny"].replace(positional="none")).eval()
    no_positions.load_state_dict(model.state_dict())
    with torch.no_grad():
        logits, flat = model(same)[0], no_positions(same)[0]
        torch.testing.assert_close(logits, logits[:1].expand_as(logits), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(logits, flat, atol=1e-5, rtol=1e-5)
        assert torch.equal(logits[0], flat[0])  # position 0: RoPE is the identity, exactly
        # the attention weights of the first block do depend on the position with RoPE
        block = model.blocks[0]
        x = block.attn_norm(model.embed(same))
        weights = {}
        for name, tables in (("rope", rope_cos_sin(6, 16)), ("none", (None, None))):
            q, k, _ = block.attn.project_qkv(x, *tables)
            k = repeat_kv(k, block.attn.n_rep)
            _, weights[name] = attention_reference(q, k, k, causal_mask(6), return_weights=True)
        uniform = causal_mask(6) / torch.arange(1, 7)[:, None]  # (T, S): 1/(t+1) on the allowed keys
        torch.testing.assert_close(weights["none"][0, 0], uniform, atol=1e-6, rtol=0)
        assert (weights["rope"] - weights["none"]).abs().max() > 1e-4
    # absolute positions added to the embeddings do make identical tokens distinguishable
    sinusoidal = DecoderLM(CONFIGS["tiny"].replace(positional="sinusoidal")).eval()
    sinusoidal.load_state_dict(model.state_dict())
    with torch.no_grad():
        out = sinusoidal(same)[0]
    assert (out - out[0]).abs().max() > 1e-3


def test_rope_makes_the_order_of_distinct_tokens_matter():
    model = model_for("tiny")
    no_positions = DecoderLM(CONFIGS["tiny"].replace(positional="none")).eval()
    no_positions.load_state_dict(model.state_dict())
    ids = torch.randint(0, 256, (1, 8), generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        a, b = model(ids)[0], no_positions(ids)[0]
    assert torch.equal(a[0], b[0])  # position 0 is not rotated
    assert (a[1:] - b[1:]).abs().amax(-1).min() > 1e-4  # every later position differs


@pytest.mark.parametrize("name", ["tiny", "window", "mqa-3-layers"])
def test_rope_models_ignore_a_uniform_shift_of_positions(name):
    model = model_for(name)
    ids = torch.randint(0, 256, (2, 10), generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        base = model(ids)
        assert torch.equal(model(ids, positions=torch.arange(10)), base)
        for shift in (1, 7, 300):
            torch.testing.assert_close(model(ids, positions=shift + torch.arange(10)), base, atol=2e-5, rtol=0)
        spread = model(ids, positions=2 * torch.arange(10))  # relative distances doubled: not a shift
    assert (spread - base).abs().max() > 1e-3


@pytest.mark.parametrize("name", ["post-layer-gelu-learned", "sinusoidal-relu"])
def test_absolute_positions_see_a_shift(name):
    model = model_for(name)
    ids = torch.randint(0, 256, (1, 10), generator=torch.Generator().manual_seed(10))
    with torch.no_grad():
        assert (model(ids, positions=5 + torch.arange(10)) - model(ids)).abs().max() > 1e-3


@pytest.mark.parametrize("case", ["llama-gqa", "mistral-window"])
def test_positions_match_hugging_face_position_ids(case):
    kind, kwargs = HF_CASES[case]
    hf = hf_model(kind, "eager", **kwargs)
    ours = DecoderLM.from_hf(hf)
    ids = torch.randint(0, 97, (2, 12), generator=torch.Generator().manual_seed(11))
    positions = 20 + torch.arange(12)
    with torch.no_grad():
        expected = hf(ids, position_ids=positions[None].expand(2, -1)).logits
        assert (ours(ids, positions=positions) - expected).abs().max().item() <= 1e-4


def test_next_token_probs():
    gen = torch.Generator().manual_seed(12)
    logits = 3 * torch.randn(3, 5, 11, generator=gen, dtype=torch.float64)
    probs = next_token_probs(logits)
    torch.testing.assert_close(probs, torch.softmax(logits[:, -1], dim=-1))
    torch.testing.assert_close(probs.sum(-1), torch.ones(3, dtype=torch.float64))
    lengths = torch.tensor([5, 1, 3])
    padded = next_token_probs(logits, temperature=0.5, lengths=lengths)
    for b, n in enumerate(lengths.tolist()):
        torch.testing.assert_close(padded[b], torch.softmax(logits[b, n - 1] / 0.5, dim=-1))
    half = next_token_probs(logits.half())
    assert half.dtype == torch.float32 and torch.isfinite(half).all()
    # a very low temperature concentrates everything on the argmax
    cold = next_token_probs(logits, temperature=1e-3)
    assert torch.equal(cold.argmax(-1), logits[:, -1].argmax(-1)) and (cold.max(-1).values > 0.999).all()


def test_explicit_and_fused_attention_agree():
    model = model_for("mqa-3-layers")
    ids = torch.randint(0, 256, (3, 20), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        torch.testing.assert_close(model(ids, implementation="reference"), model(ids), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_layer_norm_is_fused_on_the_default_path_and_explicit_on_the_reference_path(placement):
    """A GPT-2-style model: PyTorch's LayerNorm kernel on the "sdpa" path (the speed of GPT-2's own
    code), course_lib's explicit math on "reference" (chapter 11 counts its saved tensors); the two agree,
    gradients included."""
    from unittest import mock

    torch.manual_seed(0)
    cfg = PRESETS["tiny"].replace(norm="layer", placement=placement, ffn="gelu", positional="learned",
                                  bias=True)
    model = DecoderLM(cfg)
    ids = torch.randint(0, cfg.vocab_size, (2, 9), generator=torch.Generator().manual_seed(3))
    outputs = {}
    kernel = torch.nn.functional.layer_norm
    for path in ("sdpa", "reference"):
        with mock.patch("torch.nn.functional.layer_norm", wraps=kernel) as calls:
            logits = model(ids, implementation=path)
        n_norms = 2 * cfg.n_layers + (placement == "pre")  # a final norm in pre-norm only
        assert calls.call_count == (n_norms if path == "sdpa" else 0), path
        grads = torch.autograd.grad(logits.pow(2).mean(), list(model.parameters()))
        outputs[path] = (logits, *grads)
    for fused, explicit in zip(outputs["sdpa"], outputs["reference"]):
        torch.testing.assert_close(fused, explicit, atol=1e-5, rtol=1e-4)


def test_runs_on_the_device():
    from course_lib.device import get_device

    device = get_device()
    model = model_for("tiny").to(device)
    ids = torch.randint(0, 256, (1, 4), device=device)
    assert model.generate(ids, 3).device == device


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: DecoderLM(PRESETS["tiny"].replace(positional="alibi")), ValueError, "positional='alibi'"),
        (lambda: model_for("tiny")(torch.zeros(5, dtype=torch.long)), ValueError, "ids must be a (B, T) tensor"),
        (lambda: model_for("tiny").generate(torch.zeros(1, 2, dtype=torch.long), -1), ValueError, "max_new_tokens"),
        (lambda: model_for("tiny").generate(torch.zeros(1, 2, dtype=torch.long), 2, cache="paged"), ValueError,
         "cache must be"),
        (lambda: DecoderLM({"d_model": 64}), TypeError, "config must be a ModelConfig"),
        (lambda: KVCache(2, 1, 2, 16, 4).update(0, torch.zeros(1, 2, 5, 16), torch.zeros(1, 2, 5, 16)),
         ValueError, "max_len (4)"),
        (lambda: KVCache(2, 1, 2, 16, 4).update(2, torch.zeros(1, 2, 1, 16), torch.zeros(1, 2, 1, 16)),
         ValueError, "layer (2)"),
        (lambda: ConcatKVCache(0), ValueError, "n_layers (0)"),
        (lambda: model_for("tiny")(torch.zeros(1, 3, dtype=torch.long), positions=torch.arange(4)), ValueError,
         "positions must have shape (T,) = (3,)"),
        (lambda: model_for("tiny")(torch.zeros(1, 3, dtype=torch.long), positions=torch.tensor([0, 2, 1])),
         ValueError, "positions must be strictly increasing"),
        (lambda: model_for("tiny")(torch.zeros(1, 3, dtype=torch.long), positions=torch.arange(3.0)), TypeError,
         "positions must hold integers"),
        (lambda: model_for("tiny")(torch.zeros(1, 3, dtype=torch.long), positions=torch.arange(3),
                                   cache=ConcatKVCache(2)), ValueError, "give positions or a cache, not both"),
        (lambda: next_token_probs(torch.zeros(2, 3, 5), temperature=0.0), ValueError, "temperature (0.0)"),
        (lambda: next_token_probs(torch.zeros(2, 5)), ValueError, "logits must be a floating-point (B, T, V)"),
        (lambda: next_token_probs(torch.zeros(2, 3, 5), lengths=torch.tensor([1, 4])), ValueError,
         "lengths must lie in [1, T] = [1, 3]"),
        (lambda: next_token_probs(torch.zeros(2, 3, 5), lengths=torch.tensor([1])), ValueError,
         "lengths must be an integer tensor of shape (B,) = (2,)"),
        (lambda: ModelConfig(vocab_size=9, d_model=8, n_layers=1, n_heads=2, d_ff=8, bias=True), ValueError,
         "bias=True goes with ffn"),
    ],
)
def test_bad_input_raises_a_clear_error(call, error, words):
    with pytest.raises(error) as info:
        call()
    assert words in str(info.value)
