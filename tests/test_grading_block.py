"""The chapter 7 checkers beyond the catalogue (tests/mistakes/ex07.py): other correct formulations pass,
the given modules run unwatched, and the checkers refuse what they must."""

from functools import partial

import pytest
import torch

from course_lib.grading import (GradingError, check_block_predictions, check_parallel_block, check_pre_norm_block,
                                check_res_post_norm_block)
from course_lib.residual import PostNormResidual, PreNormResidual
from grading_helpers import expect_failure, no_values_leak

expect = partial(expect_failure, no_leak=no_values_leak)


# --- other correct formulations ------------------------------------------------------------------------

def pre_residual_style(x, attn_norm, attn, ffn_norm, ffn, cos, sin):  # as many codebases write it
    residual = x
    h = attn_norm(x)
    h = attn(h, cos=cos, sin=sin)
    h = residual + h
    residual = h
    h = ffn_norm(h)
    h = ffn(h)
    return residual + h


def res_post_in_steps(x, attn_norm, attn, ffn_norm, ffn, cos, sin):
    writes = [attn_norm(attn(x, cos, sin))]
    h = x + writes[0]
    writes.append(ffn_norm(ffn(h)))
    return x + sum(writes)


def parallel_with_keywords(x, norm, attn, ffn, cos, sin):
    normed = norm(x)
    return x + ffn(normed) + attn(normed, cos=cos, sin=sin)


@pytest.mark.parametrize("checker, solution", [(check_pre_norm_block, pre_residual_style),
                                               (check_res_post_norm_block, res_post_in_steps),
                                               (check_parallel_block, parallel_with_keywords)])
def test_other_correct_formulations_pass(checker, solution):
    checker(solution)


def test_the_given_modules_can_be_inspected():
    def reads_attributes(x, attn_norm, attn, ffn_norm, ffn, cos, sin):
        assert attn.n_heads % attn.n_kv_heads == 0 and attn_norm.weight.shape == x.shape[-1:]
        return pre_residual_style(x, attn_norm, attn, ffn_norm, ffn, cos, sin)

    check_pre_norm_block(reads_attributes)


# --- refusals ------------------------------------------------------------------------------------------

def test_the_library_residual_wrappers_are_refused():
    class Call(torch.nn.Module):  # a sublayer module around a given callable
        def __init__(self, fn):
            super().__init__()
            self.fn = fn

        def forward(self, h, *args):
            return self.fn(h, *args)

    def via_pre_residual(x, attn_norm, attn, ffn_norm, ffn, cos, sin):
        h = PreNormResidual(attn_norm, Call(attn))(x, cos, sin)
        return PreNormResidual(ffn_norm, Call(ffn))(h)

    def via_post_residual(x, attn_norm, attn, ffn_norm, ffn, cos, sin):
        h = PostNormResidual(attn_norm, Call(attn))(x, cos, sin)
        return PostNormResidual(ffn_norm, Call(ffn))(h)

    expect(check_pre_norm_block, via_pre_residual, "course_lib.residual.PreNormResidual")
    expect(check_res_post_norm_block, via_post_residual, "course_lib.residual.PostNormResidual")


def test_a_torch_encoder_layer_is_refused():
    def via_torch(x, attn_norm, attn, ffn_norm, ffn, cos, sin):
        layer = torch.nn.TransformerEncoderLayer(x.shape[-1], 2, 16, dropout=0.0, batch_first=True,
                                                 norm_first=True).to(x.dtype)
        return layer(x)

    expect(check_pre_norm_block, via_torch, "TransformerEncoderLayer")


def test_wrong_kinds_and_unfinished_tasks_are_reported():
    def todo(x, norm, attn, ffn, cos, sin):
        raise NotImplementedError()

    expect(check_parallel_block, todo, "not implemented yet")
    expect(check_parallel_block, "x + attn + ffn", "should be a function")
    expect(check_parallel_block, lambda x, norm, attn, ffn, cos, sin: x[..., :1], "shape")


def test_predictions_within_rounding_pass_and_wrong_types_are_named():
    check_block_predictions(lambda: {"silenced_pre_rms": 3, "silenced_post_rms": 0.9999, "kv_head": 1,
                                     "scores_gib": 1.0004})
    with pytest.raises(GradingError, match="should return a dict"):
        check_block_predictions(lambda: (3.0, 1.0, 1, 1.0))
    with pytest.raises(GradingError, match="has no value for"):
        check_block_predictions(lambda: {"kv_head": 1})
