"""The chapter 7 checkers beyond the catalogue (tests/mistakes/ex07.py): other correct formulations pass,
the given parts run unwatched, and the checkers refuse what they must."""

import math
from functools import partial

import pytest
import torch

import course_lib
from course_lib.grading import (GradingError, check_block_predictions, check_packed_block,
                                check_pre_norm_block_backward, check_res_post_norm_block_backward)
from course_lib.positional import rope_cos_sin
from course_lib.residual import PreNormResidual
from grading_helpers import expect_failure, no_values_leak

expect = partial(expect_failure, no_leak=no_values_leak)


# --- Task 1: packed_block -----------------------------------------------------------------------------

def packed_by_documents(x, doc_ids, attn_norm, attn, ffn_norm, ffn, cos, sin):
    """Each document through the block on its own, positions from 0: slow, and right."""
    out = torch.empty_like(x)
    for b in range(x.shape[0]):
        ids = doc_ids[b]
        starts = [0] + [t for t in range(1, len(ids)) if ids[t] != ids[t - 1]] + [len(ids)]
        for s, e in zip(starts[:-1], starts[1:]):
            part = x[b:b + 1, s:e]
            c, si = (cos[:e - s], sin[:e - s]) if cos is not None else (None, None)
            h = part + attn(attn_norm(part), c, si)
            out[b:b + 1, s:e] = h + ffn(ffn_norm(h))
    return out


def packed_with_restarted_positions(x, doc_ids, attn_norm, attn, ffn_norm, ffn, cos, sin):
    """The mask, and RoPE positions that restart at each document (not needed, and not wrong)."""
    B, T, _ = x.shape
    pos = torch.arange(T).expand(B, T)
    new_doc = torch.ones(B, T, dtype=torch.bool)
    new_doc[:, 1:] = doc_ids[:, 1:] != doc_ids[:, :-1]
    start = torch.where(new_doc, pos, torch.zeros_like(pos)).cummax(dim=1).values
    if cos is not None:
        cos, sin = rope_cos_sin(pos - start, attn.head_dim, dtype=x.dtype)  # (B, 1, T, D_h/2)
    allowed = (doc_ids[:, :, None] == doc_ids[:, None, :]) & (pos[:, None, :] <= pos[:, :, None])
    h = x + attn(attn_norm(x), cos, sin, allowed.unsqueeze(1))
    return h + ffn(ffn_norm(h))


@pytest.mark.parametrize("solution", [packed_by_documents, packed_with_restarted_positions])
def test_other_packed_solutions_pass(solution):
    check_packed_block(solution)


def test_the_given_modules_can_be_inspected():
    def reads_attributes(x, doc_ids, attn_norm, attn, ffn_norm, ffn, cos, sin):
        assert attn.n_heads % attn.n_kv_heads == 0 and attn_norm.weight.shape == x.shape[-1:]
        return packed_by_documents(x, doc_ids, attn_norm, attn, ffn_norm, ffn, cos, sin)

    check_packed_block(reads_attributes)


def test_the_library_residual_wrappers_are_refused():
    class Call(torch.nn.Module):  # a sublayer module around a given callable
        def __init__(self, fn):
            super().__init__()
            self.fn = fn

        def forward(self, h, *args):
            return self.fn(h, *args)

    def via_pre_residual(x, doc_ids, attn_norm, attn, ffn_norm, ffn, cos, sin):
        T = x.shape[1]
        mask = ((doc_ids[:, :, None] == doc_ids[:, None, :]) & torch.ones(T, T, dtype=torch.bool).tril())
        h = PreNormResidual(attn_norm, Call(attn))(x, cos, sin, mask[:, None])
        return PreNormResidual(ffn_norm, Call(ffn))(h)

    expect(check_packed_block, via_pre_residual, "course_lib.residual.PreNormResidual")


def test_packed_unfinished_and_wrong_kinds_are_reported():
    def todo(x, doc_ids, attn_norm, attn, ffn_norm, ffn, cos, sin):
        raise NotImplementedError()

    expect(check_packed_block, todo, "not implemented yet")
    expect(check_packed_block, "x + attn + ffn", "should be a function")
    expect(check_packed_block, lambda x, *rest: x[..., :1], "shape")


def test_packing_with_the_rows_positions_equals_each_document_alone():
    """What task 1 asks the student to work out: RoPE scores depend on differences of positions only, so
    the row's tables give each document what it gets alone (the reference runs documents alone)."""
    from course_lib.grading.block import PACKED_BLOCK, _packed

    for case in PACKED_BLOCK.cases(torch.Generator().manual_seed(PACKED_BLOCK.seed)):
        with torch.no_grad():
            masked = _packed(*case.args)
        alone = PACKED_BLOCK.reference(*case.args)
        tol = 1e-10 if masked.dtype == torch.float64 else 1e-5
        assert torch.allclose(masked, alone, rtol=tol, atol=tol), case.label


# --- Tasks 2 and 3: the backward passes ------------------------------------------------------------------

def jacobian_norm_backward(norm, v, g):  # through the D × D Jacobian: O(D²) per position, but right
    d = v.shape[-1]
    r = torch.sqrt(v.pow(2).mean(-1, keepdim=True) + norm.eps)
    v_hat = v / r
    eye = torch.eye(d, dtype=v.dtype)
    jac = norm.weight[:, None] * (eye - torch.einsum("...i,...j->...ij", v_hat, v_hat) / d)
    return torch.einsum("...i,...ij->...j", g, jac / r.unsqueeze(-1))


def pre_backward_via_jacobians(x, grad_out, attn_norm, attn, attn_backward, ffn_norm, ffn, ffn_backward):
    u1 = attn_norm(x)
    h = x + attn(u1)
    grad_h = grad_out + jacobian_norm_backward(ffn_norm, h, ffn_backward(ffn_norm(h), grad_out))
    return grad_h + jacobian_norm_backward(attn_norm, x, attn_backward(u1, grad_h))


def res_post_backward_via_jacobians(x, grad_out, attn_norm, attn, attn_backward, ffn_norm, ffn,
                                    ffn_backward):
    a = attn(x)
    h = x + attn_norm(a)
    grad_h = grad_out + ffn_backward(h, jacobian_norm_backward(ffn_norm, ffn(h), grad_out))
    return grad_h + attn_backward(x, jacobian_norm_backward(attn_norm, a, grad_h))


@pytest.mark.parametrize("checker, solution", [(check_pre_norm_block_backward, pre_backward_via_jacobians),
                                               (check_res_post_norm_block_backward,
                                                res_post_backward_via_jacobians)])
def test_other_backward_formulations_pass(checker, solution):
    """The given backward passes use autograd inside: they run unwatched, so a solution calling them passes."""
    checker(solution)


def test_backward_through_autograd_or_the_library_is_refused():
    def via_vjp(x, grad_out, attn_norm, attn, attn_backward, ffn_norm, ffn, ffn_backward):
        def block(v):
            h = v + attn(attn_norm(v))
            return h + ffn(ffn_norm(h))

        _, pullback = torch.func.vjp(block, x)
        return pullback(grad_out)[0]

    expect(check_pre_norm_block_backward, via_vjp, "torch.func")

    def via_course_lib(x, grad_out, attn_norm, attn, attn_backward, ffn_norm, ffn, ffn_backward):
        def norm_backward(norm, v, g):
            return course_lib.norms.rms_norm_backward(v, norm.weight, g, norm.eps)[0]

        a = attn(x)
        h = x + attn_norm(a)
        grad_h = grad_out + ffn_backward(h, norm_backward(ffn_norm, ffn(h), grad_out))
        return grad_h + attn_backward(x, norm_backward(attn_norm, a, grad_h))

    expect(check_res_post_norm_block_backward, via_course_lib, "course_lib.norms.rms_norm_backward")


def test_backward_wrong_kinds_are_reported():
    expect(check_pre_norm_block_backward, lambda x, g, *rest: (g, g), "should return a tensor")
    expect(check_res_post_norm_block_backward, lambda x, g, *rest: g.float(), "should be float64")


# --- Task 4: predictions ------------------------------------------------------------------------------

def test_the_predictions_truth_matches_the_reasoning():
    from course_lib.grading.block import _true_predictions

    truth = _true_predictions()
    assert math.isclose(truth["res_post_rms"], math.sqrt(11))
    assert math.isclose(truth["post_block_gain"], 0.25, rel_tol=1e-9)  # 1 / rms(x), then 1 / 1
    assert truth["silenced_post_rank"] == 63 and truth["packed_allowed"] == 3 * 4 / 2 + 5 * 6 / 2


def test_predictions_within_rounding_pass_and_wrong_types_are_named():
    check_block_predictions(lambda: {"res_post_rms": 3.3166, "post_block_gain": 0.25, "silenced_post_rank": 63,
                                     "packed_allowed": torch.tensor(21)})
    with pytest.raises(GradingError, match="should return a dict"):
        check_block_predictions(lambda: (3.3166, 0.25, 63, 21))
    with pytest.raises(GradingError, match="has no value for"):
        check_block_predictions(lambda: {"packed_allowed": 21})
