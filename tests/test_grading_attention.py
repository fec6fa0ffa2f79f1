"""The chapter 3 checkers beyond the catalogue (tests/mistakes/ex03.py): other correct formulations pass,
and the checkers refuse what they must, by any road, without leaking a value."""

import math

import pytest
import torch
import torch.nn.functional as F

from course_lib import attention as at
from course_lib.grading import (GradingError, check_attention_backward, check_attention_predictions,
                                check_gqa_forward, check_sliding_window_attention)

from grading_helpers import expect_failure, no_values_leak


def expect(checker, student, *fragments):
    return expect_failure(checker, student, *fragments, no_leak=no_values_leak)


# --- other correct formulations -------------------------------------------------------------------------

def loop_sliding_window(q, k, v, window):  # one query at a time, softmax by hand
    T, S = q.shape[-2], k.shape[-2]
    rows = []
    for t in range(T):
        i = S - T + t
        lo = max(0, i - window + 1)
        scores = (q[..., t:t + 1, :] @ k[..., lo:i + 1, :].transpose(-1, -2)) / math.sqrt(q.shape[-1])
        weights = (scores - scores.amax(-1, keepdim=True)).exp()
        rows.append((weights / weights.sum(-1, keepdim=True)) @ v[..., lo:i + 1, :])
    return torch.cat(rows, dim=-2)


def per_head_gqa(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads):  # a loop over heads, einsum
    B, T, _ = x.shape
    d_h = w_q.shape[0] // n_heads
    q, k, v = x @ w_q.T, x @ w_k.T, x @ w_v.T
    allowed = torch.arange(T)[:, None] >= torch.arange(T)[None, :]
    heads = []
    for h in range(n_heads):
        g = h // (n_heads // n_kv_heads)
        qh, kh, vh = q[..., h * d_h:(h + 1) * d_h], k[..., g * d_h:(g + 1) * d_h], v[..., g * d_h:(g + 1) * d_h]
        scores = torch.einsum("btd,bsd->bts", qh, kh) / math.sqrt(d_h)
        heads.append(scores.masked_fill(~allowed, -math.inf).softmax(-1) @ vh)
    return torch.cat(heads, dim=-1) @ w_o.T


def jacobian_backward(q, k, v, grad_out, mask=None):  # the softmax Jacobian diag(p) − p pᵀ, built
    n_rep = q.shape[1] // k.shape[1]
    k_all, v_all = k.repeat_interleave(n_rep, 1), v.repeat_interleave(n_rep, 1)
    scores = q @ k_all.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = torch.where(mask, scores, torch.tensor(-math.inf, dtype=q.dtype))
    p = scores.softmax(-1)
    jac = torch.diag_embed(p) - p[..., :, None] * p[..., None, :]  # (B, H, T, S, S)
    grad_p = grad_out @ v_all.transpose(-1, -2)
    grad_s = (jac @ grad_p[..., None])[..., 0]
    grad_q = grad_s @ k_all / math.sqrt(q.shape[-1])
    grad_k = grad_s.transpose(-1, -2) @ q / math.sqrt(q.shape[-1])
    grad_v = p.transpose(-1, -2) @ grad_out
    B, H_kv, S = k.shape[:3]
    return grad_q, grad_k.reshape(B, H_kv, n_rep, S, -1).sum(2), grad_v.reshape(B, H_kv, n_rep, S, -1).sum(2)


def test_other_correct_formulations_pass():
    check_sliding_window_attention(loop_sliding_window)
    check_gqa_forward(per_head_gqa)
    check_attention_backward(jacobian_backward)


def test_predictions_within_rounding_pass_and_wrong_types_are_named():
    check_attention_predictions(lambda: {"kv_head": 2, "score_std": 16.003, "causal_uniform_weight": 1 / 5,
                                         "score_gib": 8})
    with pytest.raises(GradingError, match="should return a dict"):
        check_attention_predictions(lambda: [2, 16, 0.2, 8])
    with pytest.raises(GradingError, match="has no value for"):
        check_attention_predictions(lambda: {"kv_head": 2})
    with pytest.raises(GradingError, match="still empty"):
        check_attention_predictions(lambda: {"kv_head": ..., "score_std": 16, "causal_uniform_weight": 0.2,
                                             "score_gib": 8})
    expect(check_attention_predictions,
           lambda: {"kv_head": 2, "score_std": 16, "causal_uniform_weight": 0.2, "score_gib": 3.0},
           "`score_gib` is not what happens")


# --- refusals ------------------------------------------------------------------------------------------------

def test_delegating_to_the_course_or_to_torch_is_refused_by_any_road():
    def via_course(q, k, v, window):
        return at.attention_reference(q, k, v, at.sliding_window_mask(q.shape[-2], k.shape[-2], window=window))

    def via_aten(q, k, v, window):
        T, S = q.shape[-2], k.shape[-2]
        mask = torch.ones(T, S, dtype=torch.bool).tril(S - T) & ~torch.ones(T, S, dtype=torch.bool).tril(S - T - window)
        return torch.ops.aten.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    def via_module(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads):
        layer = at.GroupedQueryAttention(x.shape[-1], n_heads, n_kv_heads, head_dim=w_q.shape[0] // n_heads)
        return layer.to(x.dtype)(x)

    expect(check_sliding_window_attention, via_course, "course_lib.attention")
    expect(check_sliding_window_attention, via_aten, "scaled_dot_product_attention")
    expect(check_gqa_forward, via_module, "course_lib.attention")
    expect(check_attention_backward, lambda q, k, v, g, mask=None: at.attention_backward(q, k, v, g, mask),
           "course_lib.attention.attention_backward")


def test_autograd_is_refused_in_the_backward_task_by_any_road():
    def via_func(q, k, v, grad_out, mask=None):
        n_rep = q.shape[1] // k.shape[1]

        def forward(q, k, v):
            scores = q @ k.repeat_interleave(n_rep, 1).transpose(-1, -2) / math.sqrt(q.shape[-1])
            if mask is not None:
                scores = scores.masked_fill(~mask, -math.inf)
            return scores.softmax(-1) @ v.repeat_interleave(n_rep, 1)

        _, pullback = torch.func.vjp(forward, q, k, v)
        return pullback(grad_out)

    def via_backward(q, k, v, grad_out, mask=None):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        n_rep = q.shape[1] // k.shape[1]
        scores = leaves[0] @ leaves[1].repeat_interleave(n_rep, 1).transpose(-1, -2) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask, -math.inf)
        (scores.softmax(-1) @ leaves[2].repeat_interleave(n_rep, 1)).backward(grad_out)
        return tuple(t.grad for t in leaves)

    expect(check_attention_backward, via_func, "torch.func")
    expect(check_attention_backward, via_backward, "backward")


def test_contracts_dtype_mutation_and_missing_work():
    def float32_always(q, k, v, window):
        return loop_sliding_window(q.float(), k.float(), v.float(), window)

    def mutating(q, k, v, window):
        q /= math.sqrt(q.shape[-1])  # scale in place
        return loop_sliding_window(q * math.sqrt(q.shape[-1]), k, v, window)

    def not_done(*args):
        raise NotImplementedError()

    expect(check_sliding_window_attention, float32_always, "should be float64")
    expect(check_sliding_window_attention, mutating, "changed its input `q` in place")
    with pytest.raises(GradingError, match="not implemented yet"):
        check_gqa_forward(not_done)


def test_a_wrong_answer_outside_the_catalogue_gets_the_hint_and_no_values():
    message = expect(check_sliding_window_attention,
                     lambda q, k, v, window: 1.01 * loop_sliding_window(q, k, v, window), "wrong")
    assert "tensor(" not in message
    def per_query_head(q, k, v, grad_out, mask=None):  # right for MHA, one gradient per query head with GQA
        n_rep = q.shape[1] // k.shape[1]
        k_all, v_all = k.repeat_interleave(n_rep, 1), v.repeat_interleave(n_rep, 1)
        return jacobian_backward(q, k_all, v_all, grad_out, mask)

    shape_only = expect(check_attention_backward, per_query_head, "grad_k must have k's shape")
    assert "SUMS" in shape_only


def test_the_sdpa_kernel_used_inside_the_reference_is_not_the_students():
    # the reference runs before the student's function, outside the watch: a correct solution that happens to
    # use F.softmax (allowed) passes, and F.scaled_dot_product_attention stays refused
    def softmax_by_functional(q, k, v, window):
        T, S = q.shape[-2], k.shape[-2]
        i, j = torch.arange(S - T, S)[:, None], torch.arange(S)[None, :]
        scores = (q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])).masked_fill((j > i) | (i - j >= window),
                                                                                -math.inf)
        return F.softmax(scores, dim=-1) @ v

    check_sliding_window_attention(softmax_by_functional)
