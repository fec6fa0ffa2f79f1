"""The chapter 3 checkers: correct solutions pass, each common mistake is named, delegation is refused,
and no message leaks a reference value."""

from functools import partial
import math

import pytest
import torch
import torch.nn.functional as F

import course_lib
from course_lib.grading import (
    GradingError,
    check_causal_mask,
    check_gqa_forward,
    check_scaled_dot_product_attention,
)

from grading_helpers import expect_failure, no_values_leak


# --- correct solutions written independently of course_lib -----------------------------------------

def good_sdpa(q, k, v, mask=None):
    scores = torch.einsum("...td,...sd->...ts", q, k) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = torch.where(mask, scores, torch.full_like(scores, -math.inf))
    scores = scores - scores.amax(-1, keepdim=True)
    weights = scores.exp() / scores.exp().sum(-1, keepdim=True)
    return weights @ v


def float32_sdpa(q, k, v, mask=None):  # computing in float32 is fine
    return good_sdpa(q.float(), k.float(), v.float(), mask)


def good_mask(n_queries, n_keys, offset):
    return torch.ones(n_queries, n_keys, dtype=torch.bool).tril(diagonal=offset)


def good_mask_by_loops(n_queries, n_keys, offset):
    mask = torch.zeros(n_queries, n_keys, dtype=torch.bool)
    for i in range(n_queries):
        mask[i, : offset + i + 1] = True
    return mask


def good_gqa(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads):
    B, T, _ = x.shape
    d_h = w_q.shape[0] // n_heads
    q = (x @ w_q.T).reshape(B, T, n_heads, d_h).permute(0, 2, 1, 3)
    k = (x @ w_k.T).reshape(B, T, n_kv_heads, d_h).permute(0, 2, 1, 3)
    v = (x @ w_v.T).reshape(B, T, n_kv_heads, d_h).permute(0, 2, 1, 3)
    group = torch.arange(n_heads) // (n_heads // n_kv_heads)  # kv head read by each query head
    k, v = k[:, group], v[:, group]
    allowed = torch.arange(T)[:, None] >= torch.arange(T)[None, :]
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(d_h)
    weights = scores.masked_fill(~allowed, -math.inf).softmax(-1)
    out = (weights @ v).permute(0, 2, 1, 3).reshape(B, T, n_heads * d_h)
    return out @ w_o.T


def float32_gqa(x, *args):
    return good_gqa(x.float(), *[a.float() if torch.is_tensor(a) else a for a in args])


@pytest.mark.parametrize(
    "checker, solution",
    [(check_scaled_dot_product_attention, good_sdpa), (check_scaled_dot_product_attention, float32_sdpa),
     (check_causal_mask, good_mask), (check_causal_mask, good_mask_by_loops),
     (check_gqa_forward, good_gqa), (check_gqa_forward, float32_gqa)],
)
def test_correct_solutions_pass(checker, solution):
    checker(solution)


# --- mistakes are named ----------------------------------------------------------------------------

# Messages may mention shapes, counts and offsets, never tensor values or decimals.
expect = partial(expect_failure, no_leak=partial(no_values_leak, max_decimals=1))


def sdpa_with(*, scale=None, dim=-1, fill=-math.inf, invert=False, ignore=False, after=False, weights=False):
    def student(q, k, v, mask=None):
        s = scale(q, v) if scale else 1 / math.sqrt(q.shape[-1])
        scores = q @ k.transpose(-2, -1) * s
        m = None if (mask is None or ignore) else (~mask if invert else mask)
        if m is not None and not after:
            scores = scores.masked_fill(~m, fill)
        w = scores.softmax(dim)
        if m is not None and after:
            w = w * m
        return w if weights else w @ v
    return student


SDPA_MISTAKES = {
    "not scaled": sdpa_with(scale=lambda q, v: 1.0),
    "divided the scores by d_k": sdpa_with(scale=lambda q, v: 1 / q.shape[-1]),
    "width of the values": sdpa_with(scale=lambda q, v: 1 / math.sqrt(v.shape[-1])),
    "wrong dimension": sdpa_with(dim=-2),
    "mask is inverted": sdpa_with(invert=True),
    "mask is ignored": sdpa_with(ignore=True),
    "set to 0": sdpa_with(fill=0.0),
    "after the softmax": sdpa_with(after=True),
    "returned the attention weights": sdpa_with(weights=True),
}


@pytest.mark.parametrize("fragment", SDPA_MISTAKES)
def test_sdpa_mistakes_are_named(fragment):
    expect(check_scaled_dot_product_attention, SDPA_MISTAKES[fragment], fragment)


def positions(n_queries, n_keys, first):
    return torch.arange(first, first + n_queries)[:, None] >= torch.arange(n_keys)[None, :]


MASK_MISTAKES = {
    "offset is ignored": lambda T, S, offset: torch.tril(torch.ones(T, S)).bool(),
    "convention is inverted": lambda T, S, offset: ~good_mask(T, S, offset),
    "its own position": lambda T, S, offset: torch.arange(offset, offset + T)[:, None] > torch.arange(S)[None, :],
    "wrong sign": lambda T, S, offset: good_mask(T, S, -offset),
    "off by one": lambda T, S, offset: positions(T, S, offset + 1),
    "whatever the offset": lambda T, S, offset: good_mask(T, S, S - T),
    "must return a bool tensor": lambda T, S, offset: good_mask(T, S, offset).float(),
    "rows are queries": lambda T, S, offset: good_mask(T, S, offset).T,
}


@pytest.mark.parametrize("fragment", MASK_MISTAKES)
def test_mask_mistakes_are_named(fragment):
    expect(check_causal_mask, MASK_MISTAKES[fragment], fragment)


def gqa_with(*, tile=False, causal=True, split_wrong=False, merge_wrong=False, scale="head", no_out=False):
    def student(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads):
        B, T, D = x.shape
        d_h = w_q.shape[0] // n_heads
        n_rep = n_heads // n_kv_heads

        def split(y, n):
            return y.reshape(B, n, T, d_h) if split_wrong else y.reshape(B, T, n, d_h).transpose(1, 2)

        q, k, v = split(x @ w_q.T, n_heads), split(x @ w_k.T, n_kv_heads), split(x @ w_v.T, n_kv_heads)
        if tile:
            k, v = torch.cat([k] * n_rep, dim=1), torch.cat([v] * n_rep, dim=1)
        else:
            k, v = k.repeat_interleave(n_rep, dim=1), v.repeat_interleave(n_rep, dim=1)
        s = {"head": d_h ** -0.5, "model": D ** -0.5, "none": 1.0}[scale]
        scores = q @ k.transpose(-1, -2) * s
        if causal:
            scores = scores.masked_fill(torch.ones(T, T).triu(1).bool(), -math.inf)
        out = scores.softmax(-1) @ v
        out = out.reshape(B, T, -1) if merge_wrong else out.transpose(1, 2).reshape(B, T, -1)
        return out if no_out else out @ w_o.T
    return student


GQA_MISTAKES = {
    "the grouping is tiled": gqa_with(tile=True),
    "causal mask is missing": gqa_with(causal=False),
    "heads are split wrongly": gqa_with(split_wrong=True),
    "heads are merged wrongly": gqa_with(merge_wrong=True),
    "scores are not scaled": gqa_with(scale="none"),
    "1/√d_model": gqa_with(scale="model"),
    "output projection w_o is missing": gqa_with(no_out=True),
}


@pytest.mark.parametrize("fragment", GQA_MISTAKES)
def test_gqa_mistakes_are_named(fragment):
    expect(check_gqa_forward, GQA_MISTAKES[fragment], fragment)


def test_unrecognised_wrong_answer_gets_a_generic_hint():
    message = expect(check_scaled_dot_product_attention, lambda q, k, v, mask=None: good_sdpa(q, k, v, mask) + 0.01,
                     "wrong values")
    assert "a single query (1, 2) over three keys" in message  # the first case, described by shape


def test_not_implemented_and_crashes_are_reported():
    def todo(*args):
        raise NotImplementedError()

    expect(check_gqa_forward, todo, "not implemented yet")
    expect(check_causal_mask, todo, "not implemented yet")
    expect(check_scaled_dot_product_attention, lambda q, k, v, mask=None: q @ k, "raised RuntimeError")
    expect(check_causal_mask, 42, "should be a function")
    expect(check_gqa_forward, lambda *args: "attention", "should return a tensor")


# --- delegation is refused -------------------------------------------------------------------------

def test_calling_the_reference_is_refused():
    ref = course_lib.attention
    expect(check_scaled_dot_product_attention, ref.attention_reference, "calls course_lib.attention.attention_reference")
    expect(check_scaled_dot_product_attention, lambda q, k, v, mask=None: ref.attention(q, k, v, mask),
           "scores no points")
    expect(check_causal_mask, lambda T, S, offset: ref.causal_mask(T, S, offset=offset),
           "calls course_lib.attention.causal_mask")

    def via_module(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads):
        attn = ref.GroupedQueryAttention(x.shape[-1], n_heads, n_kv_heads, head_dim=w_q.shape[0] // n_heads)
        attn = attn.to(x.dtype)
        with torch.no_grad():
            for lin, w in ((attn.w_q, w_q), (attn.w_k, w_k), (attn.w_v, w_v), (attn.w_o, w_o)):
                lin.weight.copy_(w)
        return attn(x)

    expect(check_gqa_forward, via_module, "calls course_lib.attention.GroupedQueryAttention")


def test_aliased_repeat_kv_is_refused():
    from course_lib.attention import repeat_kv as share

    def sneaky(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads):
        B, T, _ = x.shape
        d_h = w_q.shape[0] // n_heads
        k = (x @ w_k.T).view(B, T, n_kv_heads, d_h).transpose(1, 2)
        share(k, n_heads // n_kv_heads)
        return good_gqa(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads)

    expect(check_gqa_forward, sneaky, "calls course_lib.attention.repeat_kv")


def test_torch_attention_is_refused():
    expect(check_scaled_dot_product_attention,
           lambda q, k, v, mask=None: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
           "calls torch.nn.functional.scaled_dot_product_attention")

    def torch_gqa(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads):
        B, T, _ = x.shape
        d_h = w_q.shape[0] // n_heads
        q = (x @ w_q.T).view(B, T, n_heads, d_h).transpose(1, 2)
        k = (x @ w_k.T).view(B, T, n_kv_heads, d_h).transpose(1, 2)
        v = (x @ w_v.T).view(B, T, n_kv_heads, d_h).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return out.transpose(1, 2).reshape(B, T, -1) @ w_o.T

    expect(check_gqa_forward, torch_gqa, "calls torch.nn.functional.scaled_dot_product_attention")


def test_the_watcher_is_removed_after_a_check():
    import sys

    before = sys.getprofile()
    check_causal_mask(good_mask)
    with pytest.raises(GradingError):
        check_scaled_dot_product_attention(course_lib.attention.attention_reference)
    assert sys.getprofile() is before
