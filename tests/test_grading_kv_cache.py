"""The chapter 10 checkers: correct solutions pass, each common mistake is named, delegation is refused,
and no message leaks a reference value."""

from functools import partial
import math

import pytest
import torch
import torch.nn.functional as F

from course_lib import counting
from course_lib.attention import repeat_kv
from course_lib.config import ModelConfig
from course_lib.grading import GradingError, check_attend_with_cache, check_kv_cache_bytes
from course_lib.kv_cache import KVCache

from grading_helpers import expect_failure, no_values_leak


# --- correct solutions written independently of course_lib -------------------------------------------

def good_bytes(n_layers, n_heads, n_kv_heads, head_dim, seq_len, batch, bytes_per_element):
    per_position = 2 * n_layers * n_kv_heads * head_dim  # K and V, every layer
    return per_position * seq_len * batch * bytes_per_element


def float_bytes(*args):
    return float(good_bytes(*args))


def rope_half(x, cos, sin):
    """(a, b) ↦ (a cos − b sin, a sin + b cos) with pair i = (x[i], x[i + D/2])."""
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


def student(*, rope_offset=True, write="offset", store_rotated=True, append=True, mask="positions",
            grouping="interleave", in_place=True, scale=True, rotate_v=False, rerotate=False):
    """An independent solution; each keyword turns one known mistake on."""

    def attend_with_cache(q, k, v, cache_k, cache_v, length, cos, sin):
        B, H, T, D_h = q.shape
        first = length if rope_offset else 0
        c, s = cos[first:first + T], sin[first:first + T]  # (T, D_h/2)
        q, k_rot = rope_half(q, c, s), rope_half(k, c, s)
        v_new = rope_half(v, c, s) if rotate_v else v
        start = {"offset": length, "zero": 0, "plus-one": length + 1}[write]
        if not in_place:
            cache_k, cache_v = cache_k.clone(), cache_v.clone()
        if append:
            cache_k[:, :, start:start + T] = k_rot if store_rotated else k
            cache_v[:, :, start:start + T] = v_new
            keys, values = cache_k[:, :, :length + T].clone(), cache_v[:, :, :length + T]
            keys[:, :, start:start + T] = k_rot
        else:
            keys, values = cache_k[:, :, :length], cache_v[:, :, :length]
        if rerotate:
            keys = rope_half(keys, cos[:keys.shape[2]], sin[:keys.shape[2]])
        if mask == "whole-buffer":
            keys, values = cache_k, cache_v
        S = keys.shape[2]
        if grouping == "interleave":
            index = torch.arange(H) // (H // keys.shape[1])  # kv head read by each query head
            keys, values = keys[:, index], values[:, index]
        elif grouping == "tile":
            keys, values = keys.repeat(1, H // keys.shape[1], 1, 1), values.repeat(1, H // keys.shape[1], 1, 1)
        scores = torch.einsum("bhtd,bhsd->bhts", q, keys)
        if scale:
            scores = scores / math.sqrt(D_h)
        if mask == "positions":
            allowed = torch.arange(length, length + T)[:, None] >= torch.arange(S)[None, :]
        elif mask == "tril":
            allowed = torch.ones(T, S, dtype=torch.bool).tril()
        else:
            allowed = torch.ones(T, S, dtype=torch.bool)
        scores = scores.masked_fill(~allowed, -math.inf)
        weights = scores.exp() / scores.exp().sum(-1, keepdim=True)
        return weights @ values

    return attend_with_cache


def float32_student(q, k, v, cache_k, cache_v, length, cos, sin):  # computing in float32 is fine
    out = torch.empty_like(q)
    ck, cv = cache_k.float(), cache_v.float()
    result = student()(q.float(), k.float(), v.float(), ck, cv, length, cos.float(), sin.float())
    cache_k.copy_(ck)
    cache_v.copy_(cv)
    out.copy_(result)
    return out


@pytest.mark.parametrize(
    "checker, solution",
    [(check_kv_cache_bytes, good_bytes), (check_kv_cache_bytes, float_bytes),
     (check_attend_with_cache, student()), (check_attend_with_cache, float32_student)],
)
def test_correct_solutions_pass(checker, solution):
    checker(solution)


def test_apply_rope_from_chapter_2_is_allowed():
    from course_lib.positional import apply_rope

    def with_apply_rope(q, k, v, cache_k, cache_v, length, cos, sin):
        T = q.shape[2]
        c, s = cos[length:length + T], sin[length:length + T]
        q_rot, k_rot = apply_rope(q, c, s), apply_rope(k, c, s)
        return student()(q, k, v, cache_k, cache_v, length, cos, sin) * 1.0 + 0 * (q_rot.sum() + k_rot.sum())

    check_attend_with_cache(with_apply_rope)


# --- mistakes are named ---------------------------------------------------------------------------------

# Messages may mention shapes, counts and positions, never tensor values or decimals.
expect = partial(expect_failure, no_leak=partial(no_values_leak, max_decimals=1))


BYTES_MISTAKES = {
    "counted the query heads": lambda n, h, hkv, d, s, b, e: good_bytes(n, h, h, d, s, b, e),
    "the factor 2 is missing": lambda *a: good_bytes(*a) // 2,
    "the batch is missing": lambda n, h, hkv, d, s, b, e: good_bytes(n, h, hkv, d, s, 1, e),
    "the layers are missing": lambda n, h, hkv, d, s, b, e: good_bytes(1, h, hkv, d, s, b, e),
    "bits, not bytes": lambda n, h, hkv, d, s, b, e: good_bytes(n, h, hkv, d, s, b, 8 * e),
}


@pytest.mark.parametrize("fragment", BYTES_MISTAKES)
def test_bytes_mistakes_are_named(fragment):
    expect(check_kv_cache_bytes, BYTES_MISTAKES[fragment], fragment)


STEP_MISTAKES = {
    "not in the cache when you attend": student(append=False),
    "as if they were at positions 0 … T − 1": student(rope_offset=False),
    "written at the start of the buffers": student(write="zero"),
    "off by one": student(write="plus-one"),
    "aligns the queries with the FIRST keys": student(mask="tril"),
    "no causal mask among the new tokens": student(mask="none"),
    "the kv heads are tiled": student(grouping="tile"),
    "the cache holds the keys before RoPE": student(store_rotated=False),
    "the values were rotated too": student(rotate_v=True),
    "rotated a second time": student(rerotate=True),
    "not changed in place": student(in_place=False),
    "including slots not filled yet": student(mask="whole-buffer"),
    "not scaled": student(scale=False),
}


@pytest.mark.parametrize("fragment", STEP_MISTAKES)
def test_step_mistakes_are_named(fragment):
    expect(check_attend_with_cache, STEP_MISTAKES[fragment], fragment)


def test_kv_heads_not_repeated_is_named():
    expect(check_attend_with_cache, student(grouping="none"), "the key/value heads are not repeated")


def test_wrong_shape_and_unrecognised_mistakes_get_hints():
    expect(check_attend_with_cache, lambda *a: student()(*a)[:, :, -1], "the output has the queries' shape")
    expect(check_attend_with_cache, lambda *a: student()(*a) + 0.01, "wrong values")
    expect(check_attend_with_cache, lambda *a: None, "should return the attention output")
    expect(check_kv_cache_bytes, lambda *a: good_bytes(*a) + 1, "wrong values")


def test_not_implemented_is_reported():
    def todo(*args):
        raise NotImplementedError()

    expect(check_attend_with_cache, todo, "not implemented yet")
    expect(check_kv_cache_bytes, todo, "not implemented yet")
    expect(check_attend_with_cache, "attention", "should be a function")


# --- delegation is refused -----------------------------------------------------------------------------------

def test_calling_the_references_is_refused():
    def via_counting(n, h, hkv, d, s, b, e):
        config = ModelConfig(vocab_size=8, d_model=h * d, n_layers=n, n_heads=h, n_kv_heads=hkv, d_ff=8)
        return counting.kv_cache_bytes(config, s, batch=b, bytes_per_element=e)

    expect(check_kv_cache_bytes, via_counting, "calls course_lib.counting.kv_cache_bytes")

    def via_sdpa(q, k, v, cache_k, cache_v, length, cos, sin):
        T = q.shape[2]
        c, s = cos[length:length + T], sin[length:length + T]
        cache_k[:, :, length:length + T] = rope_half(k, c, s)
        cache_v[:, :, length:length + T] = v
        mask = torch.arange(length, length + T)[:, None] >= torch.arange(length + T)[None, :]
        return F.scaled_dot_product_attention(rope_half(q, c, s), cache_k[:, :, :length + T],
                                              cache_v[:, :, :length + T], attn_mask=mask, enable_gqa=True)

    expect(check_attend_with_cache, via_sdpa, "calls torch.nn.functional.scaled_dot_product_attention")

    def via_repeat_kv(q, k, v, cache_k, cache_v, length, cos, sin):
        repeat_kv(k, 1)
        return student()(q, k, v, cache_k, cache_v, length, cos, sin)

    expect(check_attend_with_cache, via_repeat_kv, "calls course_lib.attention.repeat_kv")

    def via_cache(q, k, v, cache_k, cache_v, length, cos, sin):
        cache = KVCache(1, q.shape[0], k.shape[1], k.shape[3], cache_k.shape[2], dtype=k.dtype)
        cache.update(0, k, v)
        return student()(q, k, v, cache_k, cache_v, length, cos, sin)

    expect(check_attend_with_cache, via_cache, "calls course_lib.kv_cache.KVCache.update")


def test_grading_error_is_an_assertion_error():
    assert issubclass(GradingError, AssertionError)
