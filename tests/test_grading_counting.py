"""The chapter 8 checkers: correct solutions pass, each common mistake is named, delegation is refused,
and no message leaks a reference value."""

from functools import partial
import re

import pytest
import torch

import course_lib
from course_lib.grading import GradingError, check_count_params, check_crossover_length

from grading_helpers import expect_failure


# --- correct solutions written independently of course_lib -----------------------------------------

def good_count(config):
    d, h_d = config.d_model, config.head_dim
    per_block = (
        d * config.n_heads * h_d  # w_q
        + 2 * d * config.n_kv_heads * h_d  # w_k, w_v
        + config.n_heads * h_d * d  # w_o
        + 3 * d * config.d_ff  # w_gate, w_up, w_down
        + 2 * d  # two RMSNorm gains
    )
    tables = config.vocab_size * d * (1 if config.tie_embeddings else 2)
    return config.n_layers * per_block + tables + d  # + the final norm


def good_count_by_matrices(config):  # list every matrix's shape, then multiply out
    d, q, kv, f = config.d_model, config.n_heads * config.head_dim, config.n_kv_heads * config.head_dim, config.d_ff
    shapes = [(q, d), (kv, d), (kv, d), (d, q), (f, d), (f, d), (d, f), (d,), (d,)] * config.n_layers
    shapes += [(config.vocab_size, d), (d,)] + ([] if config.tie_embeddings else [(config.vocab_size, d)])
    total = 0
    for shape in shapes:
        n = 1
        for s in shape:
            n *= s
        total += n
    return total


def good_count_as_tensor(config):  # a 0-d tensor is accepted too
    return torch.tensor(good_count(config))


def good_crossover(config):
    ffn_matrices = 3 if config.ffn == "swiglu" else 2
    ffn_per_token = ffn_matrices * 2 * config.d_model * config.d_ff
    core_per_pair = config.n_heads * (2 * config.head_dim + 5 + 2 * config.head_dim)  # QKᵀ, softmax, AV
    return ffn_per_token / core_per_pair


@pytest.mark.parametrize(
    "checker, solution",
    [(check_count_params, good_count), (check_count_params, good_count_by_matrices),
     (check_count_params, good_count_as_tensor), (check_crossover_length, good_crossover)],
)
def test_correct_solutions_pass(checker, solution):
    checker(solution)


# --- mistakes are named ----------------------------------------------------------------------------

def assert_no_values_leak(message):
    """Messages describe configs by kind; they never contain a count or a length."""
    assert "tensor(" not in message
    assert not re.search(r"\d\.\d{3,}", message), message
    assert not re.search(r"\d{4,}", message.replace(",", "")), message


expect = partial(expect_failure, no_leak=assert_no_values_leak)


def _without(config, *, kv_full=False, head=None, block_norms=2, final_norm=True, ffn=3, q_width=None,
             norm_size=1, layers=None):
    d = config.d_model
    q = config.n_heads * config.head_dim if q_width is None else q_width
    kv = q if kv_full else config.n_kv_heads * config.head_dim
    block = 2 * d * q + 2 * d * kv + ffn * d * config.d_ff + block_norms * norm_size * d
    head = (not config.tie_embeddings) if head is None else head
    return ((config.n_layers if layers is None else layers) * block + config.vocab_size * d * (2 if head else 1)
            + (norm_size * d if final_norm else 0))


COUNT_MISTAKES = {
    "the key and value projections": lambda c: _without(c, kv_full=True),
    "need not equal D": lambda c: _without(c, q_width=c.d_model),
    "SwiGLU has three matrices": lambda c: _without(c, ffn=2),
    "count it once, not twice": lambda c: _without(c, head=True),
    "its own (V, D) output table": lambda c: _without(c, head=False),
    "the final norm": lambda c: _without(c, final_norm=False),
    "each with a gain of D, and the model a final one": lambda c: _without(c, block_norms=0, final_norm=False),
    "two RMSNorms of D parameters, not one": lambda c: _without(c, block_norms=1),
    "no shift": lambda c: _without(c, norm_size=2),
    "you counted one block": lambda c: _without(c, layers=1),
}


@pytest.mark.parametrize("fragment", COUNT_MISTAKES)
def test_count_mistakes_are_named(fragment):
    expect(check_count_params, COUNT_MISTAKES[fragment], fragment)


def _cross(c, *, matmul=4, softmax=5, heads=None, m=None, causal=False, projections=False, head_dim=None):
    d_h = c.head_dim if head_dim is None else head_dim
    m = (6 if c.ffn == "swiglu" else 4) if m is None else m
    linear = m * c.d_model * c.d_ff
    if projections:
        linear -= 2 * c.d_model * (2 * c.n_heads + 2 * c.n_kv_heads) * c.head_dim
    t = linear / ((matmul * d_h + softmax) * (c.n_heads if heads is None else heads))
    return 2 * t - 1 if causal else t


CROSSOVER_MISTAKES = {
    "the softmax": lambda c: _cross(c, softmax=0),
    "Read config.ffn": lambda c: _cross(c, m=6),  # always three matrices
    "all n_heads query heads": lambda c: _cross(c, heads=c.n_kv_heads),
    "each FFN matrix costs": lambda c: _cross(c, m=3 if c.ffn == "swiglu" else 2),
    "4·D_h in all": lambda c: _cross(c, matmul=2),
    "halved them for the causal mask": lambda c: _cross(c, causal=True),
    "are not part of the core": lambda c: _cross(c, projections=True),
    "use head_dim for D_h": lambda c: _cross(c, head_dim=c.d_model // c.n_heads),
}


@pytest.mark.parametrize("fragment", CROSSOVER_MISTAKES)
def test_crossover_mistakes_are_named(fragment):
    expect(check_crossover_length, CROSSOVER_MISTAKES[fragment], fragment)


def test_unrecognised_wrong_answer_gets_a_generic_hint():
    message = expect(check_count_params, lambda c: good_count(c) + 1, "wrong values")
    assert "'tiny' preset" in message  # the first case, described by kind
    expect(check_crossover_length, lambda c: good_crossover(c) * 1.01, "wrong values")


def test_not_implemented_wrong_types_and_crashes_are_reported():
    def todo(config):
        raise NotImplementedError()

    expect(check_count_params, todo, "not implemented yet")
    expect(check_count_params, lambda c: c.n_experts, "raised AttributeError")
    expect(check_count_params, 42, "should be a function")
    expect(check_count_params, lambda c: {"total": good_count(c)}, "returned a dict", "an int")
    expect(check_crossover_length, lambda c: str(good_crossover(c)), "returned a str", "a number")
    expect(check_crossover_length, lambda c: None, "returned a NoneType")


# --- delegation is refused -------------------------------------------------------------------------

def test_calling_the_reference_is_refused():
    expect(check_count_params, lambda c: course_lib.counting.count_params(c).total,
           "calls course_lib.counting.count_params", "scores no points")
    expect(check_crossover_length, course_lib.counting.crossover_length,
           "calls course_lib.counting.crossover_length")

    def via_block_flops(c):
        flops = course_lib.counting.block_flops(c, seq_len=1)
        core = (flops["qk"] + flops["softmax"] + flops["av"])
        return sum(v for k, v in flops.items() if k.startswith("ffn")) / core

    expect(check_crossover_length, via_block_flops, "calls course_lib.counting.block_flops")


def test_building_a_model_and_adding_up_its_tensors_is_refused():
    from course_lib.model import DecoderLM

    with torch.device("meta"):  # the first model built on meta imports torch._dynamo: do it unwatched
        DecoderLM(course_lib.config.PRESETS["tiny"])

    def on_meta(config):
        with torch.device("meta"):
            model = DecoderLM(config)
        return sum(p.numel() for p in model.parameters())

    expect(check_count_params, on_meta, "calls torch.nn.Module.parameters")

    def via_state_dict(config):
        with torch.device("meta"):
            model = DecoderLM(config)
        return sum(t.numel() for t in model.state_dict().values())  # counts a tied table twice anyway

    expect(check_count_params, via_state_dict, "calls torch.nn.Module.state_dict")


def test_the_watcher_is_removed_after_a_check():
    import sys

    before = sys.getprofile()
    check_count_params(good_count)
    with pytest.raises(GradingError):
        check_count_params(lambda c: course_lib.counting.count_params(c).total)
    assert sys.getprofile() is before
