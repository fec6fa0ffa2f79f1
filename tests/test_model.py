"""DecoderLM: Hugging Face Llama/Mistral logits and greedy tokens reproduced, causality exact, cached
decoding equal to uncached, counts equal to numel, clear errors."""

import pytest
import torch

from course_lib import counting
from course_lib.config import PRESETS, ModelConfig
from course_lib.kv_cache import ConcatKVCache, KVCache
from course_lib.model import DecoderLM, config_from_hf

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
                    rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": theta})
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


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(attention_bias=True), "attention_bias=True is not supported"),
        (dict(hidden_act="gelu"), "hidden_act must be 'silu'"),
        (dict(rope_parameters={"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0}), "rope_type 'linear'"),
    ],
)
def test_from_hf_refuses_what_it_does_not_implement(kwargs, words):
    from transformers import LlamaConfig

    config = LlamaConfig(vocab_size=10, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, **kwargs)
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace("[", r"\[")):
        config_from_hf(config)


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


def test_rope_makes_identical_tokens_position_aware():
    model = model_for("tiny")
    same = torch.full((1, 6), 7)
    with torch.no_grad():
        logits = model(same)[0]
        no_positions = DecoderLM(CONFIGS["tiny"].replace(positional="none"))
        no_positions.load_state_dict(model.state_dict())
        flat = no_positions.eval()(same)[0]
    assert not torch.allclose(logits[0], logits[5])  # the same token at different positions
    torch.testing.assert_close(flat[0], flat[5], atol=1e-5, rtol=1e-5)  # without positions: identical
    torch.testing.assert_close(logits[0], flat[0], atol=1e-6, rtol=0)  # position 0: RoPE is the identity


def test_explicit_and_fused_attention_agree():
    model = model_for("mqa-3-layers")
    ids = torch.randint(0, 256, (3, 20), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        torch.testing.assert_close(model(ids, implementation="reference"), model(ids), atol=1e-5, rtol=1e-5)


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
        (lambda: ModelConfig(vocab_size=9, d_model=8, n_layers=1, n_heads=2, d_ff=8, bias=True), ValueError,
         "bias=True goes with ffn"),
    ],
)
def test_bad_input_raises_a_clear_error(call, error, words):
    with pytest.raises(error) as info:
        call()
    assert words in str(info.value)
