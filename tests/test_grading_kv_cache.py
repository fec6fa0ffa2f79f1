"""The chapter 10 checkers beyond the catalogue (tests/mistakes/ex10.py): other correct formulations pass,
the references the checkers compare with are right, and the checkers refuse what they must."""

from functools import partial
import math

import pytest
import torch

from course_lib import counting
from course_lib.attention import attention_reference, repeat_kv
from course_lib.config import PRESETS
from course_lib.grading import (GradingError, check_attend_with_cache, check_attend_with_window,
                                check_kv_cache_bytes, check_kv_cache_class, check_kv_predictions)
from course_lib.grading import kv_cache as grading
from course_lib.kv_cache import KVCache
from course_lib.positional import apply_rope, rope_cos_sin

from grading_helpers import expect_failure, no_values_leak

expect = partial(expect_failure, no_leak=partial(no_values_leak, max_decimals=1))


# --- correct solutions written differently from the exercise's ------------------------------------------

def rope_half(x, cos, sin):
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


def einsum_step(q, k, v, cache_k, cache_v, length, cos, sin):
    """Grouped heads by reshaping the queries (no repeat), -inf added by torch.where, exp-normalise."""
    B, H, T, D_h = q.shape
    H_kv = k.shape[1]
    end = length + T
    c, s = cos[length:end], sin[length:end]
    cache_k[:, :, length:end] = rope_half(k, c, s)
    cache_v[:, :, length:end] = v
    q = rope_half(q, c, s).view(B, H_kv, H // H_kv, T, D_h)  # query head h = (h // n_rep, h % n_rep)
    scores = torch.einsum("bgrtd,bgsd->bgrts", q, cache_k[:, :, :end]) / math.sqrt(D_h)
    allowed = torch.arange(length, end)[:, None] >= torch.arange(end)[None, :]
    scores = torch.where(allowed, scores, torch.full_like(scores, -math.inf))
    weights = (scores - scores.amax(-1, keepdim=True)).exp()
    weights = weights / weights.sum(-1, keepdim=True)
    out = torch.einsum("bgrts,bgsd->bgrtd", weights, cache_v[:, :, :end])
    return out.reshape(B, H, T, D_h)


def float32_step(q, k, v, cache_k, cache_v, length, cos, sin):
    """Computes in float32 and casts back: fine within the tolerances."""
    ck, cv = cache_k.float(), cache_v.float()
    out = einsum_step(q.float(), k.float(), v.float(), ck, cv, length, cos.float(), sin.float())
    cache_k.copy_(ck)
    cache_v.copy_(cv)
    return out.to(q.dtype)


def sorted_window(q, k, v, cache_k, cache_v, position, cos, sin):
    """A ring read back in position order, with an explicit window mask: also right."""
    B, H, _, D_h = q.shape
    W = cache_k.shape[2]
    c, s = cos[position:position + 1], sin[position:position + 1]
    cache_k[:, :, position % W] = rope_half(k, c, s)[:, :, 0]
    cache_v[:, :, position % W] = v[:, :, 0]
    slot_pos = torch.tensor([position - ((position - j) % W) for j in range(W)])  # position held by slot j
    allowed = (slot_pos >= 0) & (slot_pos > position - W)  # (W,)
    n_rep = H // k.shape[1]
    keys = cache_k.repeat_interleave(n_rep, 1)
    values = cache_v.repeat_interleave(n_rep, 1)
    scores = rope_half(q, c, s) @ keys.transpose(-2, -1) / math.sqrt(D_h)
    scores = scores.masked_fill(~allowed, -math.inf)
    return torch.softmax(scores, -1) @ values


class ConcatCache:
    """The concatenating design is a right answer to Task 4 too."""

    def __init__(self, n_layers, batch, n_kv_heads, head_dim, max_len, dtype=torch.float32):
        self.k, self.v, self.length, self.dtype = [None] * n_layers, [None] * n_layers, 0, dtype

    def update(self, layer, k, v):
        k, v = k.to(self.dtype), v.to(self.dtype)
        if self.k[layer] is not None:
            k, v = torch.cat([self.k[layer], k], 2), torch.cat([self.v[layer], v], 2)
        self.k[layer], self.v[layer] = k, v
        return k, v

    def advance(self, n):
        self.length += n


def test_other_correct_formulations_pass():
    check_attend_with_cache(einsum_step)
    check_attend_with_cache(float32_step)
    check_kv_cache_class(ConcatCache)
    check_attend_with_window(sorted_window)
    check_kv_cache_bytes(lambda windows, h, hkv, d, s, b, e: sum(
        math.prod((2, hkv, d, s if w is None or w > s else w, b, e)) for w in windows))
    check_kv_predictions(lambda: {"llama2_70b_gib": 1.25, "llama2_7b_gib": 2, "mistral_window_gib": 0.5,
                                  "positions_without_cache": 60.0})


def test_course_libs_apply_rope_is_allowed_but_repeat_kv_is_not():
    def with_apply_rope(q, k, v, cache_k, cache_v, length, cos, sin):
        T = q.shape[2]
        c, s = cos[length:length + T], sin[length:length + T]
        assert torch.allclose(apply_rope(q, c, s), rope_half(q, c, s))
        return einsum_step(q, k, v, cache_k, cache_v, length, cos, sin)

    check_attend_with_cache(with_apply_rope)

    def with_repeat_kv(q, k, v, cache_k, cache_v, position, cos, sin):
        repeat_kv(k, 1)
        return sorted_window(q, k, v, cache_k, cache_v, position, cos, sin)

    expect(check_attend_with_window, with_repeat_kv, "course_lib.attention.repeat_kv")


# --- the references are right ---------------------------------------------------------------------------

@pytest.mark.parametrize("position", [0, 2, 3, 4, 9, 17])
def test_the_window_reference_is_attention_over_the_last_w_positions(position):
    """The ring-buffer step equals explicit attention of the new query over the positions
    max(0, p − W + 1) … p, rotated at their own positions (course_lib's attention_reference)."""
    gen = torch.Generator().manual_seed(position)
    B, H, H_kv, D_h, W = 2, 4, 2, 8, 4
    keys = torch.randn(B, H_kv, position + 1, D_h, generator=gen, dtype=torch.float64)
    values = torch.randn(B, H_kv, position + 1, D_h, generator=gen, dtype=torch.float64)
    q = torch.randn(B, H, 1, D_h, generator=gen, dtype=torch.float64)
    cos, sin = rope_cos_sin(torch.arange(position + 1), D_h, 100.0, dtype=torch.float64)
    rotated = apply_rope(keys, cos, sin)
    ring_k = torch.randn(B, H_kv, W, D_h, generator=gen, dtype=torch.float64)  # leftovers
    ring_v = torch.randn(B, H_kv, W, D_h, generator=gen, dtype=torch.float64)
    for j in range(max(0, position - W + 1), position):  # the window before the new token
        ring_k[:, :, j % W], ring_v[:, :, j % W] = rotated[:, :, j], values[:, :, j]
    got = grading._window_step(q, keys[:, :, -1:], values[:, :, -1:], ring_k, ring_v, position, cos, sin)
    first = max(0, position - W + 1)
    q_rot = apply_rope(q, cos[position:], sin[position:])
    want = attention_reference(q_rot, repeat_kv(rotated[:, :, first:], H // H_kv),
                               repeat_kv(values[:, :, first:], H // H_kv))
    assert torch.allclose(got[:want.numel()].view_as(want), want)


def test_the_cache_reference_returns_what_the_model_reads():
    args = grading._cache_cases(torch.Generator().manual_seed(0))[0].args
    n_layers, batch, n_kv_heads, head_dim, max_len, dtype, chunks = args
    got = grading._cache_reference(*args)
    pieces, seen = [], [[] for _ in range(n_layers)]
    for chunk in chunks:
        for layer, (k, v) in enumerate(chunk):
            seen[layer].append((k, v))
            pieces += [torch.cat([kk for kk, _ in seen[layer]], 2), torch.cat([vv for _, vv in seen[layer]], 2)]
    assert torch.equal(got, torch.cat([p.reshape(-1) for p in pieces]))


def test_the_predictions_are_the_formula():
    truth = grading._true_predictions()
    assert truth["llama2_70b_gib"] == 1.25 and truth["llama2_7b_gib"] == 2.0
    assert truth["mistral_window_gib"] == 0.5 and PRESETS["mistral-7b"].sliding_window == 4096
    assert truth["positions_without_cache"] == 60


# --- refusals and messages ----------------------------------------------------------------------------------

def test_counting_by_building_a_model_is_refused():
    def on_meta(windows, h, hkv, d, s, b, e):
        layer = torch.nn.Linear(d, 2 * hkv * d, device="meta")
        slots = sum(s if w is None else min(w, s) for w in windows)
        return slots * b * e * layer.weight.shape[0]

    expect(check_kv_cache_bytes, on_meta, "building an nn.Module")

    def by_counting(windows, h, hkv, d, s, b, e):
        config = PRESETS["tiny"].replace(n_layers=1, n_heads=h, n_kv_heads=hkv, head_dim=d)
        return sum(counting.kv_cache_bytes(config, s if w is None else min(w, s), batch=b, bytes_per_element=e)
                   for w in windows)

    expect(check_kv_cache_bytes, by_counting, "course_lib.counting.kv_cache_bytes")


def test_the_local_and_global_reference_is_the_chapters_formula_per_layer():
    """With every layer global the count is the chapter's formula; a local layer keeps min(W, max_len)."""
    config = PRESETS["llama-3-8b"]
    assert grading._hybrid_bytes([None] * config.n_layers, config.n_heads, config.n_kv_heads, config.head_dim,
                                 8192, 2, 2) == counting.kv_cache_bytes(config, 8192, batch=2, bytes_per_element=2)
    mistral = PRESETS["mistral-7b"]
    ring = grading._hybrid_bytes([mistral.sliding_window] * mistral.n_layers, mistral.n_heads, mistral.n_kv_heads,
                                 mistral.head_dim, 32768, 1, 2)
    assert ring == counting.kv_cache_bytes(mistral, mistral.sliding_window)
    assert grading._hybrid_bytes([9], 1, 1, 1, 5, 1, 1) == grading._hybrid_bytes([None], 1, 1, 1, 5, 1, 1)


def test_attention_through_aten_is_refused():
    def aten(q, k, v, cache_k, cache_v, length, cos, sin):
        T, end = q.shape[2], length + q.shape[2]
        c, s = cos[length:end], sin[length:end]
        cache_k[:, :, length:end] = rope_half(k, c, s)
        cache_v[:, :, length:end] = v
        n_rep = q.shape[1] // k.shape[1]
        mask = torch.arange(length, end)[:, None] >= torch.arange(end)[None, :]
        return torch.ops.aten._scaled_dot_product_attention_math(
            rope_half(q, c, s), cache_k[:, :, :end].repeat_interleave(n_rep, 1),
            cache_v[:, :, :end].repeat_interleave(n_rep, 1), attn_mask=mask)[0]

    expect(check_attend_with_cache, aten, "scaled_dot_product_attention")


def test_a_cache_that_keeps_using_the_course_cache_is_refused():
    class Wrapper:
        def __init__(self, n_layers, batch, n_kv_heads, head_dim, max_len, dtype=torch.float32):
            self.inner = KVCache(n_layers, batch, n_kv_heads, head_dim, max_len, dtype=dtype)
            self.length = 0

        def update(self, layer, k, v):
            return self.inner.update(layer, k, v)

        def advance(self, n):
            self.inner.advance(n)
            self.length += n

    expect(check_kv_cache_class, Wrapper, "course_lib.kv_cache.KVCache")


def test_cache_class_messages():
    class NoAdvance:
        def __init__(self, *args, dtype=torch.float32):
            pass

        def update(self, layer, k, v):
            return k, v

    expect(check_kv_cache_class, NoAdvance, "no method `advance`")

    class OtherSignature(ConcatCache):
        def __init__(self, n_layers, max_len):
            super().__init__(n_layers, 1, 1, 1, max_len)

    expect(check_kv_cache_class, OtherSignature, "could not be built")

    class ReturnsOne(ConcatCache):
        def update(self, layer, k, v):
            return super().update(layer, k, v)[0]

    expect(check_kv_cache_class, ReturnsOne, "should return two tensors")


def test_shapes_kinds_and_grouping_errors_are_named():
    expect(check_attend_with_cache, lambda *a: einsum_step(*a)[:, :, -1], "the output has the queries' shape")
    expect(check_attend_with_cache, lambda *a: None, "should return the attention output")
    expect(check_attend_with_cache, lambda *a: einsum_step(*a) + 0.01, "wrong values")

    def no_repeat(q, k, v, cache_k, cache_v, length, cos, sin):
        end = length + q.shape[2]
        c, s = cos[length:end], sin[length:end]
        cache_k[:, :, length:end] = rope_half(k, c, s)
        cache_v[:, :, length:end] = v
        scores = rope_half(q, c, s) @ cache_k[:, :, :end].transpose(-2, -1) / math.sqrt(q.shape[-1])
        mask = torch.arange(length, end)[:, None] >= torch.arange(end)[None, :]
        return torch.softmax(scores.masked_fill(~mask, -math.inf), -1) @ cache_v[:, :, :end]

    expect(check_attend_with_cache, no_repeat, "the key/value heads are not repeated")


def test_predictions_of_the_wrong_kind_are_named():
    with pytest.raises(GradingError, match="should return a dict"):
        check_kv_predictions(lambda: [1.25, 2.0, 0.5, 60])
    with pytest.raises(GradingError, match="has no value for"):
        check_kv_predictions(lambda: {"llama2_70b_gib": 1.25})
    with pytest.raises(GradingError, match="still empty"):
        check_kv_predictions(lambda: {"llama2_70b_gib": ..., "llama2_7b_gib": 2.0, "mistral_window_gib": 0.5,
                                      "positions_without_cache": 60})


def test_not_implemented_is_reported():
    def todo(*args, **kwargs):
        raise NotImplementedError()

    for checker in (check_attend_with_cache, check_attend_with_window, check_kv_cache_bytes, check_kv_cache_class):
        expect(checker, todo, "not implemented yet")


def test_each_task_of_the_catalogue_is_named_nine_times_in_ten():
    """tests/test_mistake_catalogue.py checks the share for the whole assignment; here, task by task."""
    from collections import Counter

    from mistakes import ex10

    total, named = Counter(w.answer for w in ex10.WRONG), Counter(w.answer for w in ex10.WRONG if w.expect)
    assert all(named[a] >= 0.9 * total[a] for a in total), (named, total)


# --- mistakes nobody catalogued are named from what the output gets wrong ----------------------------------

def test_a_write_one_slot_late_is_read_off_the_buffers():
    def late(q, k, v, cache_k, cache_v, length, cos, sin):
        T = q.shape[2]
        out = einsum_step(q, k, v, cache_k.clone(), cache_v.clone(), length, cos, sin)
        c, s = cos[length:length + T], sin[length:length + T]
        cache_k[:, :, length + 1:length + 1 + T] = rope_half(k, c, s)
        cache_v[:, :, length + 1:length + 1 + T] = v
        return out

    expect(check_attend_with_cache, late, "written 1 slot after where they belong")


def test_a_query_rotated_a_position_late_is_found_by_its_scores():
    def late_query(q, k, v, cache_k, cache_v, position, cos, sin):
        B, H, _, D_h = q.shape
        W = cache_k.shape[2]
        c, s = cos[position:position + 1], sin[position:position + 1]
        cache_k[:, :, position % W] = rope_half(k, c, s)[:, :, 0]
        cache_v[:, :, position % W] = v[:, :, 0]
        n = min(position + 1, W)
        n_rep = H // k.shape[1]
        q_rot = rope_half(q, cos[position + 1:position + 2], sin[position + 1:position + 2])
        keys = cache_k[:, :, :n].repeat_interleave(n_rep, 1)
        values = cache_v[:, :, :n].repeat_interleave(n_rep, 1)
        return torch.softmax(q_rot @ keys.transpose(-2, -1) / math.sqrt(D_h), -1) @ values

    expect(check_attend_with_window, late_query, "the query is rotated at a position 1 after its own")
