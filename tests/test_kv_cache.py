"""KV caches: the protocol (positions at the cache's length, views not copies), cached == uncached for
several configs and chunk sizes, the same keys and values and logits as Hugging Face's cache, the
memory formula against the tensors, and clear errors."""

import pytest
import torch

from course_lib import counting
from course_lib.attention import causal_mask
from course_lib.config import PRESETS
from course_lib.kv_cache import ConcatKVCache, KVCache
from course_lib.model import DecoderLM

TINY = PRESETS["tiny"]  # V=256, D=64, N=2, H=4, H_kv=2, D_h=16
CONFIGS = {
    "gqa": TINY,
    "mha": TINY.replace(n_kv_heads=4),
    "mqa-3-layers": TINY.replace(n_kv_heads=1, n_layers=3),
    "head-dim-24-theta": TINY.replace(head_dim=24, rope_theta=500_000.0),
    "sliding-window": TINY.replace(sliding_window=5),
    "learned-positions-post-norm": TINY.replace(positional="learned", placement="post", norm="layer", ffn="gelu"),
    "sinusoidal": TINY.replace(positional="sinusoidal", ffn="relu"),
    "no-positions": TINY.replace(positional="none"),
}


def model_for(name, seed=0):
    torch.manual_seed(seed)
    model = DecoderLM(CONFIGS[name]).eval()
    with torch.no_grad():  # gains away from 1, so that a mixed-up norm could not hide
        for n, p in model.named_parameters():
            if "norm" in n and n.endswith("weight"):
                p.uniform_(0.5, 1.5)
    return model


def ids_for(batch, length, seed=1):
    return torch.randint(0, 256, (batch, length), generator=torch.Generator().manual_seed(seed))


def make_cache(kind, config, batch, max_len, dtype=torch.float32):
    if kind == "concat":
        return ConcatKVCache(config.n_layers)
    return KVCache.for_model(config, batch, max_len, dtype=dtype)


# --- the protocol --------------------------------------------------------------------------------------

def test_preallocated_update_writes_at_the_length_and_returns_views():
    cache = KVCache(n_layers=2, batch=2, n_kv_heads=3, head_dim=4, max_len=10)
    gen = torch.Generator().manual_seed(0)
    k1, v1 = torch.randn(2, 3, 4, 4, generator=gen), torch.randn(2, 3, 4, 4, generator=gen)
    keys, values = cache.update(0, k1, v1)
    assert keys.shape == (2, 3, 4, 4) and torch.equal(keys, k1) and torch.equal(values, v1)
    assert keys.data_ptr() == cache.k[0].data_ptr()  # a view of the buffer, no copy
    assert cache.length == 0  # update does not move the length: advance does, after the last layer
    cache.update(1, k1, v1)
    cache.advance(4)
    k2, v2 = torch.randn(2, 3, 1, 4, generator=gen), torch.randn(2, 3, 1, 4, generator=gen)
    keys, values = cache.update(0, k2, v2)
    assert keys.shape == (2, 3, 5, 4)
    assert torch.equal(keys[:, :, :4], k1) and torch.equal(keys[:, :, 4:], k2)  # history kept, new at slot 4
    assert torch.equal(values[:, :, 4:], v2)
    assert keys.data_ptr() == cache.k[0].data_ptr()
    assert torch.count_nonzero(cache.k[0][:, :, 5:]) == 0  # nothing written past length + T
    assert torch.count_nonzero(cache.k[1][:, :, 4:]) == 0  # layer 1 not yet updated for this step


def test_concatenating_update_copies_the_history_every_step():
    cache = ConcatKVCache(n_layers=1)
    k = torch.randn(1, 2, 3, 4)
    first, _ = cache.update(0, k, k)
    cache.advance(3)
    second, _ = cache.update(0, k[:, :, :1], k[:, :, :1])
    assert second.shape == (1, 2, 4, 4) and torch.equal(second[:, :, :3], first)
    assert second.data_ptr() != first.data_ptr()  # a new tensor: the whole history was copied
    assert cache.nbytes() == 2 * 1 * 2 * 4 * 4 * 4  # K and V, (1, 2, 4, 4) float32 each
    cache.reset()
    assert cache.length == 0 and cache.nbytes() == 0


def test_reset_reuses_the_buffers_and_gives_the_same_logits():
    model = model_for("gqa")
    ids = ids_for(1, 6)
    cache = KVCache.for_model(model.config, batch=1, max_len=6)
    pointer = cache.k[0].data_ptr()
    with torch.no_grad():
        first = model(ids, cache=cache)
        cache.reset()
        second = model(ids, cache=cache)
    assert cache.k[0].data_ptr() == pointer and cache.length == 6
    assert torch.equal(first, second)


def test_for_model_shapes_and_defaults():
    cache = KVCache.for_model(TINY, batch=3)
    assert cache.max_len == TINY.max_seq_len and cache.n_layers == TINY.n_layers
    assert cache.k[0].shape == (3, TINY.n_kv_heads, TINY.max_seq_len, TINY.head_dim)
    assert len(cache.k) == len(cache.v) == TINY.n_layers


# --- cached == uncached ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("kind", ["preallocated", "concat"])
def test_cached_logits_equal_the_full_forward_for_any_chunking(name, kind):
    """Feeding the sequence in chunks of 1, 3 or 7 tokens through a cache reproduces the logits of one
    full forward pass: positions, RoPE and the causal mask all sit at the cache's offset."""
    model = model_for(name)
    ids = ids_for(2, 17)
    with torch.no_grad():
        full = model(ids)
        for chunk in (1, 3, 7):
            cache = make_cache(kind, model.config, batch=2, max_len=17)
            pieces = [model(ids[:, start:start + chunk], cache=cache) for start in range(0, 17, chunk)]
            torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=2e-5, rtol=2e-5)
            assert cache.length == 17


@pytest.mark.parametrize("name", ["gqa", "mqa-3-layers", "sliding-window", "learned-positions-post-norm"])
def test_cached_generation_gives_the_same_tokens(name):
    model = model_for(name)
    prompt = ids_for(3, 4, seed=2)
    uncached = model.generate(prompt, 24, use_cache=False)
    assert torch.equal(model.generate(prompt, 24, cache="preallocated"), uncached)
    assert torch.equal(model.generate(prompt, 24, cache="concat"), uncached)


def test_cached_explicit_and_fused_attention_agree():
    model = model_for("mqa-3-layers")
    ids = ids_for(2, 9)
    with torch.no_grad():
        outs = []
        for implementation in ("reference", "sdpa"):
            cache = KVCache.for_model(model.config, batch=2, max_len=9)
            steps = [model(ids[:, :4], cache=cache, implementation=implementation)]
            steps += [model(ids[:, t:t + 1], cache=cache, implementation=implementation) for t in range(4, 9)]
            outs.append(torch.cat(steps, dim=1))
    torch.testing.assert_close(outs[0], outs[1], atol=1e-5, rtol=1e-5)


def test_a_top_left_causal_mask_breaks_cached_decoding():
    """The mistake the offset prevents: aligning the new queries with the FIRST keys (tril of a (T, S)
    matrix, or is_causal=True when T < S) hides every cached key after the first T."""
    model = model_for("gqa")
    ids = ids_for(1, 8)
    with torch.no_grad():
        full = model(ids)
        cache = KVCache.for_model(model.config, batch=1, max_len=8)
        model(ids[:, :7], cache=cache)
        right_mask = causal_mask(1, 8)  # (1, 8): the new query is at position 7
        wrong_mask = torch.ones(1, 8, dtype=torch.bool).tril()  # (1, 8): only key 0 allowed
        assert right_mask.all() and wrong_mask.sum() == 1
        x = model.embed(ids[:, 7:])
        from course_lib.positional import rope_cos_sin

        cos, sin = rope_cos_sin(torch.tensor([7]), model.config.head_dim, model.config.rope_theta)
        for i, block in enumerate(model.blocks):
            x = block(x, cos, sin, mask=wrong_mask, cache=cache, layer=i)
        wrong = model.lm_head(model.norm(x))
    assert not torch.allclose(wrong[0, -1], full[0, -1], atol=1e-3)


# --- against Hugging Face's cache -------------------------------------------------------------------------

def hf_llama(n_heads=4, n_kv_heads=2, seed=0):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=88, num_hidden_layers=2,
                         num_attention_heads=n_heads, num_key_value_heads=n_kv_heads, max_position_embeddings=64,
                         rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 10_000.0})
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).eval()


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
def test_cache_holds_hugging_faces_keys_and_values_and_logits(n_kv_heads):
    hf = hf_llama(n_kv_heads=n_kv_heads)
    ours = DecoderLM.from_hf(hf)
    ids = torch.randint(0, 97, (2, 9), generator=torch.Generator().manual_seed(3))
    cache = KVCache.for_model(ours.config, batch=2, max_len=9)
    with torch.no_grad():
        hf_out = hf(ids[:, :6], use_cache=True)
        past = hf_out.past_key_values
        our_logits = [ours(ids[:, :6], cache=cache)]
        hf_logits = [hf_out.logits]
        for t in range(6, 9):  # decode three tokens one at a time
            hf_step = hf(ids[:, t:t + 1], past_key_values=past, use_cache=True)
            hf_logits.append(hf_step.logits)
            our_logits.append(ours(ids[:, t:t + 1], cache=cache))
    torch.testing.assert_close(torch.cat(our_logits, 1), torch.cat(hf_logits, 1), atol=1e-4, rtol=1e-4)
    assert cache.length == past.get_seq_length() == 9
    for layer in range(2):  # the very tensors: keys after RoPE, values, (B, H_kv, S, D_h)
        torch.testing.assert_close(cache.k[layer], past.layers[layer].keys, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(cache.v[layer], past.layers[layer].values, atol=1e-5, rtol=1e-5)


# --- memory ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_nbytes_is_the_formula(dtype):
    config = TINY.replace(n_layers=3)
    cache = KVCache.for_model(config, batch=2, max_len=40, dtype=dtype)
    element = torch.finfo(dtype).bits // 8
    formula = 2 * config.n_layers * config.n_kv_heads * config.head_dim * 40 * 2 * element  # 2·N·H_kv·D_h·S·B·bytes
    assert cache.nbytes() == formula == counting.kv_cache_bytes(config, 40, batch=2, bytes_per_element=element)


def test_llama_3_8b_at_8k_tokens_in_16_bit_is_one_gibibyte():
    config = PRESETS["llama-3-8b"]
    cache = KVCache.for_model(config, batch=1, max_len=8192, dtype=torch.bfloat16, device="meta")  # no memory
    assert cache.nbytes() == counting.kv_cache_bytes(config, 8192) == 2**30
    mha = KVCache.for_model(config.replace(n_kv_heads=config.n_heads), batch=1, max_len=8192,
                            dtype=torch.bfloat16, device="meta")
    assert mha.nbytes() == config.n_heads // config.n_kv_heads * cache.nbytes()  # GQA's saving: H / H_kv


def test_concatenating_cache_grows_to_the_same_bytes():
    model = model_for("gqa")
    ids = ids_for(2, 12)
    concat, prealloc = ConcatKVCache(TINY.n_layers), KVCache.for_model(TINY, batch=2, max_len=12)
    with torch.no_grad():
        model(ids, cache=concat)
        model(ids, cache=prealloc)
    assert concat.nbytes() == prealloc.nbytes() == counting.kv_cache_bytes(TINY, 12, batch=2, bytes_per_element=4)


# --- device and errors ------------------------------------------------------------------------------------

def test_runs_on_the_device():
    from course_lib.device import get_device

    device = get_device()
    model = model_for("gqa").to(device)
    cache = KVCache.for_model(model.config, batch=1, max_len=8, device=device)
    ids = ids_for(1, 8).to(device)
    with torch.no_grad():
        full = model(ids)
        steps = torch.cat([model(ids[:, :5], cache=cache)] + [model(ids[:, t:t + 1], cache=cache)
                                                             for t in range(5, 8)], dim=1)
    assert cache.k[0].device.type == device.type
    torch.testing.assert_close(steps, full, atol=1e-4, rtol=1e-4)


def z(*shape, dtype=torch.float32):
    return torch.zeros(shape, dtype=dtype)


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: KVCache(0, 1, 2, 4, 8), ValueError, "n_layers (0) must be a positive int"),
        (lambda: KVCache(1, 1, 2, 4, True), ValueError, "max_len (True)"),
        (lambda: KVCache(1, 1, 2, 4, 8, dtype=torch.int64), TypeError, "dtype must be a floating-point"),
        (lambda: KVCache(2, 1, 2, 4, 8).update(-1, z(1, 2, 1, 4), z(1, 2, 1, 4)), ValueError, "layer (-1)"),
        (lambda: KVCache(2, 1, 2, 4, 8).update(0, z(1, 2, 1, 4), z(1, 2, 2, 4)), ValueError,
         "k and v must have the same shape (B, H_kv, T, D_h)"),
        (lambda: KVCache(2, 1, 2, 4, 8).update(0, z(1, 2, 4), z(1, 2, 4)), ValueError, "(B, H_kv, T, D_h)"),
        (lambda: KVCache(2, 1, 2, 4, 8).update(0, z(1, 4, 1, 4), z(1, 4, 1, 4)), ValueError,
         "the cache holds (B, H_kv, ·, D_h) = (1, 2, '·', 4)"),
        (lambda: KVCache(2, 1, 2, 4, 8).update(0, z(1, 2, 1, 4, dtype=torch.float64),
                                               z(1, 2, 1, 4, dtype=torch.float64)), TypeError,
         "the cache holds torch.float32"),
        (lambda: KVCache(2, 1, 2, 4, 8).update(0, z(1, 2, 1, 4), z(1, 2, 1, 4, dtype=torch.float64)), TypeError,
         "k and v must have the same dtype"),
        (lambda: KVCache(2, 1, 2, 4, 8).update(0, z(1, 2, 9, 4), z(1, 2, 9, 4)), ValueError,
         "max_len (8) positions; 0 are used and 9 more do not fit"),
        (lambda: KVCache(2, 1, 2, 4, 8).advance(9), ValueError, "cannot advance past max_len (8)"),
        (lambda: KVCache(2, 1, 2, 4, 8).advance(-1), ValueError, "n (-1) must be a non-negative int"),
        (lambda: KVCache(2, 1, 2, 4, 8).update(0, [0.0], [0.0]), TypeError, "k and v must be tensors"),
        (lambda: ConcatKVCache(2).update(2, z(1, 2, 1, 4), z(1, 2, 1, 4)), ValueError, "layer (2)"),
        (lambda: ConcatKVCache(True), ValueError, "n_layers (True)"),
    ],
)
def test_bad_input_raises_a_clear_error(call, error, words):
    with pytest.raises(error) as info:
        call()
    assert words in str(info.value)


def test_concatenating_cache_refuses_a_mismatched_step():
    cache = ConcatKVCache(1)
    cache.update(0, z(1, 2, 3, 4), z(1, 2, 3, 4))
    with pytest.raises(ValueError, match=r"layer 0 holds \(B, H_kv, ·, D_h\) = \(1, 2, ·, 4\)"):
        cache.update(0, z(1, 3, 1, 4), z(1, 3, 1, 4))


def test_model_refuses_a_cache_that_is_too_short():
    model = model_for("gqa")
    cache = KVCache.for_model(model.config, batch=1, max_len=4)
    with pytest.raises(ValueError, match=r"max_len \(4\)"):
        model(ids_for(1, 5), cache=cache)


def test_generated_ids_are_ordinary_tensors():
    """generate runs under inference_mode for speed; what it returns must still work with autograd."""
    model = model_for("gqa").train()
    out = model.generate(ids_for(1, 3), 4)
    assert not out.is_inference()
    model(out).sum().backward()  # embedding saves the ids for backward: must not raise
    assert model.embed.weight.grad is not None
