"""The chapter 7 checkers: correct solutions pass, each common mistake is named, delegation is refused,
in-place changes to x are caught, and no message leaks a reference value."""

from functools import partial

import pytest
import torch

from course_lib.block import TransformerBlock
from course_lib.config import ModelConfig
from course_lib.grading import check_post_norm_block, check_pre_norm_block, check_residual_updates
from course_lib.residual import PostNormResidual, PreNormResidual

from grading_helpers import expect_failure, no_values_leak


# --- correct solutions written independently of course_lib ------------------------------------------

def good_pre(x, attn_norm, attn, ffn_norm, ffn, cos, sin):
    h = x + attn(attn_norm(x), cos, sin)
    return h + ffn(ffn_norm(h))


def good_pre_residual_style(x, attn_norm, attn, ffn_norm, ffn, cos, sin):  # as many codebases write it
    residual = x
    x = attn_norm(x)
    x = attn(x, cos=cos, sin=sin)
    x = residual + x
    residual = x
    x = ffn_norm(x)
    x = ffn(x)
    return residual + x


def good_pre_float32(x, attn_norm, attn, ffn_norm, ffn, cos, sin):  # the stream kept as given
    return good_pre(x, attn_norm, attn, ffn_norm, ffn, cos, sin).to(x.dtype)


def good_post(x, attn_norm, attn, ffn_norm, ffn, cos, sin):
    h = attn_norm(x + attn(x, cos, sin))
    return ffn_norm(h + ffn(h))


def good_updates(x, attn_norm, attn, ffn_norm, ffn, cos, sin):
    a = attn(attn_norm(x), cos, sin)
    return a, ffn(ffn_norm(x + a))


def good_updates_as_list(x, attn_norm, attn, ffn_norm, ffn, cos, sin):
    return list(good_updates(x, attn_norm, attn, ffn_norm, ffn, cos, sin))


@pytest.mark.parametrize(
    "checker, solution",
    [(check_pre_norm_block, good_pre), (check_pre_norm_block, good_pre_residual_style),
     (check_pre_norm_block, good_pre_float32), (check_post_norm_block, good_post),
     (check_residual_updates, good_updates), (check_residual_updates, good_updates_as_list)],
)
def test_correct_solutions_pass(checker, solution):
    checker(solution)


# --- mistakes are named ----------------------------------------------------------------------------

# Messages may mention shapes and kinds, never tensor values or decimals.
expect = partial(expect_failure, no_leak=partial(no_values_leak, max_decimals=1))


PRE_MISTAKES = {
    "you built the post-norm block":
        lambda x, n1, a, n2, f, c, s: (lambda h: n2(h + f(h)))(n1(x + a(x, c, s))),
    "you normalised the sublayers' outputs":  # the seed's "post-LN" formula x + LN(F(x))
        lambda x, n1, a, n2, f, c, s: (lambda h: h + n2(f(h)))(x + n1(a(x, c, s))),
    "the residual stream was normalised":
        lambda x, n1, a, n2, f, c, s: (lambda h: n2(h) + f(n2(h)))(n1(x) + a(n1(x), c, s)),
    "the first residual starts from the normalised copy":
        lambda x, n1, a, n2, f, c, s: (lambda h: h + f(n2(h)))(n1(x) + a(n1(x), c, s)),
    "the second residual starts from the normalised copy":
        lambda x, n1, a, n2, f, c, s: (lambda h: n2(h) + f(n2(h)))(x + a(n1(x), c, s)),
    "you normalised the block's output":
        lambda x, n1, a, n2, f, c, s: n2(good_pre(x, n1, a, n2, f, c, s)),
    "the FFN reads the block's input x":  # the parallel block
        lambda x, n1, a, n2, f, c, s: x + a(n1(x), c, s) + f(n2(x)),
    "adds the FFN's output to x instead of to h":
        lambda x, n1, a, n2, f, c, s: x + f(n2(x + a(n1(x), c, s))),
    "the residual connection around attention is missing":
        lambda x, n1, a, n2, f, c, s: (lambda h: h + f(n2(h)))(a(n1(x), c, s)),
    "the residual connection around the FFN is missing":
        lambda x, n1, a, n2, f, c, s: f(n2(x + a(n1(x), c, s))),
    "both residual connections are missing":
        lambda x, n1, a, n2, f, c, s: f(n2(a(n1(x), c, s))),
    "the FFN reads ffn_norm":  # attn_norm used twice
        lambda x, n1, a, n2, f, c, s: (lambda h: h + f(n1(h)))(x + a(n1(x), c, s)),
    "attention must read attn_norm(x), not ffn_norm(x)":  # ffn_norm used twice
        lambda x, n1, a, n2, f, c, s: (lambda h: h + f(n2(h)))(x + a(n2(x), c, s)),
    "the two norms are swapped":
        lambda x, n1, a, n2, f, c, s: (lambda h: h + f(n1(h)))(x + a(n2(x), c, s)),
    "attention reads x without normalising it first":
        lambda x, n1, a, n2, f, c, s: (lambda h: h + f(n2(h)))(x + a(x, c, s)),
    "the FFN reads h without normalising it first":
        lambda x, n1, a, n2, f, c, s: (lambda h: h + f(h))(x + a(n1(x), c, s)),
    "without the RoPE tables":
        lambda x, n1, a, n2, f, c, s: (lambda h: h + f(n2(h)))(x + a(n1(x))),
}


@pytest.mark.parametrize("fragment", PRE_MISTAKES)
def test_pre_norm_mistakes_are_named(fragment):
    expect(check_pre_norm_block, PRE_MISTAKES[fragment], fragment)


POST_MISTAKES = {
    "you built the pre-norm block": good_pre,
    "Post-norm normalises the SUM":  # the seed's formula
        lambda x, n1, a, n2, f, c, s: (lambda h: h + n2(f(h)))(x + n1(a(x, c, s))),
    "attention reads a normalised copy of x":
        lambda x, n1, a, n2, f, c, s: (lambda h: n2(h + f(h)))(n1(x + a(n1(x), c, s))),
    "the residual connection around attention is missing":
        lambda x, n1, a, n2, f, c, s: (lambda h: n2(h + f(h)))(n1(a(x, c, s))),
    "the residual connection around the FFN is missing":
        lambda x, n1, a, n2, f, c, s: n2(f(n1(x + a(x, c, s)))),
    "the FFN reads the block's input x":
        lambda x, n1, a, n2, f, c, s: n2(n1(x + a(x, c, s)) + f(x)),
    "the second through ffn_norm":  # attn_norm twice
        lambda x, n1, a, n2, f, c, s: (lambda h: n1(h + f(h)))(n1(x + a(x, c, s))),
    "the first sum goes through attn_norm, not ffn_norm":  # ffn_norm twice
        lambda x, n1, a, n2, f, c, s: (lambda h: n2(h + f(h)))(n2(x + a(x, c, s))),
    "the two norms are swapped":
        lambda x, n1, a, n2, f, c, s: (lambda h: n1(h + f(h)))(n2(x + a(x, c, s))),
    "the second sum is not normalised":
        lambda x, n1, a, n2, f, c, s: (lambda h: h + f(h))(n1(x + a(x, c, s))),
    "the first sum is not normalised":
        lambda x, n1, a, n2, f, c, s: (lambda h: n2(h + f(h)))(x + a(x, c, s)),
    "without the RoPE tables":
        lambda x, n1, a, n2, f, c, s: (lambda h: n2(h + f(h)))(n1(x + a(x))),
}


@pytest.mark.parametrize("fragment", POST_MISTAKES)
def test_post_norm_mistakes_are_named(fragment):
    expect(check_post_norm_block, POST_MISTAKES[fragment], fragment)


UPDATE_MISTAKES = {
    "you returned the stream after each sublayer":
        lambda x, n1, a, n2, f, c, s: (lambda u, v: (x + u, x + u + v))(*good_updates(x, n1, a, n2, f, c, s)),
    "the updates are in the wrong order":
        lambda *args: good_updates(*args)[::-1],
    "computed from the block's input x":
        lambda x, n1, a, n2, f, c, s: (a(n1(x), c, s), f(n2(x))),
    "computed from attention's update alone":
        lambda x, n1, a, n2, f, c, s: (lambda u: (u, f(n2(u))))(a(n1(x), c, s)),
    "the FFN reads h without normalising it first":
        lambda x, n1, a, n2, f, c, s: (lambda u: (u, f(x + u)))(a(n1(x), c, s)),
    "the FFN reads ffn_norm(h), not attn_norm(h)":
        lambda x, n1, a, n2, f, c, s: (lambda u: (u, f(n1(x + u))))(a(n1(x), c, s)),
    "attention reads x without normalising it first":
        lambda x, n1, a, n2, f, c, s: (lambda u: (u, f(n2(x + u))))(a(x, c, s)),
    "without the RoPE tables":
        lambda x, n1, a, n2, f, c, s: (lambda u: (u, f(n2(x + u))))(a(n1(x))),
}


@pytest.mark.parametrize("fragment", UPDATE_MISTAKES)
def test_residual_updates_mistakes_are_named(fragment):
    expect(check_residual_updates, UPDATE_MISTAKES[fragment], fragment)


def test_returning_one_tensor_or_wrong_shapes_is_explained():
    expect(check_residual_updates, lambda x, n1, a, n2, f, c, s: good_pre(x, n1, a, n2, f, c, s),
           "should return a pair (attention_update, ffn_update)")
    expect(check_residual_updates, lambda *args: tuple(t[:, :1] for t in good_updates(*args)),
           "both must have x's shape")


def test_in_place_changes_to_x_are_refused():
    def in_place(x, attn_norm, attn, ffn_norm, ffn, cos, sin):
        x += attn(attn_norm(x), cos, sin)
        return x + ffn(ffn_norm(x))

    expect(check_pre_norm_block, in_place, "changed its input x in place")


def test_not_implemented_and_wrong_types_are_explained():
    def todo(*args):
        raise NotImplementedError()

    expect(check_pre_norm_block, todo, "not implemented yet")
    expect(check_post_norm_block, 42, "should be a function")
    expect(check_residual_updates, lambda *args: "out", "should return a pair")


# --- delegation is refused -------------------------------------------------------------------------

def via_residual_modules(x, attn_norm, attn, ffn_norm, ffn, cos, sin):
    h = PreNormResidual(attn_norm, attn)(x, cos, sin)
    return PreNormResidual(ffn_norm, ffn)(h)


def via_post_residual_modules(x, attn_norm, attn, ffn_norm, ffn, cos, sin):
    h = PostNormResidual(attn_norm, attn)(x, cos, sin)
    return PostNormResidual(ffn_norm, ffn)(h)


def via_transformer_block(x, attn_norm, attn, ffn_norm, ffn, cos, sin):
    config = ModelConfig(vocab_size=1, d_model=attn.d_model, n_layers=1, n_heads=attn.n_heads,
                         n_kv_heads=attn.n_kv_heads, head_dim=attn.head_dim, d_ff=1,
                         positional="rope" if cos is not None else "none")
    block = TransformerBlock(config)
    block.attn_norm, block.attn, block.ffn_norm, block.ffn = attn_norm, attn, ffn_norm, ffn
    return block(x, cos, sin)


@pytest.mark.parametrize(
    "checker, student, name",
    [(check_pre_norm_block, via_residual_modules, "course_lib.residual.PreNormResidual"),
     (check_post_norm_block, via_post_residual_modules, "course_lib.residual.PostNormResidual"),
     (check_pre_norm_block, via_transformer_block, "course_lib.block.TransformerBlock")],
)
def test_delegating_scores_nothing(checker, student, name):
    expect(checker, student, name, "scores no points")
