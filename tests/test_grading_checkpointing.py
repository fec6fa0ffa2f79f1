"""The chapter 11 checkers beyond the catalogue (tests/mistakes/ex11.py): other correct formulations pass,
the references agree with measurements of real blocks, and the checkers refuse what they must."""

from functools import partial
import math
import re

import pytest
import torch

from course_lib import checkpointing as ck
from course_lib.block import TransformerBlock
from course_lib.config import ModelConfig
from course_lib.grading import (GradingError, check_checkpointed, check_gpt_block_saved_bytes,
                                check_memory_predictions, check_saved_bytes)
from course_lib.grading import checkpointing as grading

from grading_helpers import expect_failure


def assert_no_values_leak(message):
    assert "tensor(" not in message
    assert not re.search(r"\d\.\d{3,}", message), message
    assert not re.search(r"\d{4,}", message), message  # no byte counts


expect = partial(expect_failure, no_leak=assert_no_values_leak)


# --- correct solutions written differently from the exercise's ------------------------------------------

def identity_saved_bytes(fn, args, exclude=()):
    """Storages told apart by the storage object's identity (as course_lib does), not by address."""
    skip = {p.untyped_storage()._cdata for p in exclude}
    storages = {}

    def pack(t):
        s = t.untyped_storage()
        if s._cdata not in skip:
            storages[s._cdata] = s  # keeps the storage alive while we count
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*args)  # noqa: F841
    return sum(s.nbytes() for s in storages.values())


def gpt_by_parts(batch, seq_len, d_model, n_heads, d_ff):
    B, T, D, H, F_ = batch, seq_len, d_model, n_heads, d_ff
    layer_norm = 4 * (B * T * D + B * T)  # x̂ and 1/σ
    attention = 4 * (B * T * D + 3 * B * T * D + B * H * T * T + B * T * D) + T * T  # input, q k v, P, w_o's input
    ffn = 4 * (B * T * D + 2 * B * T * F_)  # the second norm's output, GELU's input and output
    return 2 * layer_norm + attention + ffn


class StateInCtx(torch.autograd.Function):
    """Restores the generator's state by hand, puts the caller's back, and keeps x as a ctx attribute: also
    right."""

    @staticmethod
    def forward(ctx, fn, x):
        ctx.fn, ctx.x, ctx.state = fn, x.detach(), torch.random.get_rng_state()
        with torch.no_grad():
            return fn(x)

    @staticmethod
    def backward(ctx, grad_y):
        caller = torch.random.get_rng_state()
        torch.random.set_rng_state(ctx.state)
        with torch.enable_grad():
            x = ctx.x.requires_grad_()
            y = ctx.fn(x)
        torch.random.set_rng_state(caller)
        y.backward(grad_y)
        return None, x.grad


class Leaky(StateInCtx):
    """The hole of issue 26: restores the saved state to recompute and never puts the caller's back."""

    @staticmethod
    def backward(ctx, grad_y):
        torch.random.set_rng_state(ctx.state)
        with torch.enable_grad():
            x = ctx.x.requires_grad_()
            y = ctx.fn(x)
        y.backward(grad_y)
        return None, x.grad


def test_other_correct_formulations_pass():
    check_saved_bytes(identity_saved_bytes)
    check_gpt_block_saved_bytes(gpt_by_parts)
    check_checkpointed(lambda fn, x: StateInCtx.apply(fn, x))
    check_memory_predictions(lambda: {"checkpointed_gib": 1, "best_segment": 2.0, "flop_ratio_half": 1.1667,
                                      "init_loss": 4.277})


# --- the references are right ---------------------------------------------------------------------------

def exercise_namespace():
    """The exercise's own cells (imports, helpers and solutions), as tests/test_mistake_catalogue.py runs them."""
    from test_mistake_catalogue import namespace

    return namespace("11_memory_in_training")


@pytest.mark.parametrize("shape", [(2, 5, 8, 2, 32), (1, 2, 16, 2, 40), (3, 9, 24, 3, 50), (2, 17, 32, 4, 100)])
def test_the_gpt_block_formula_is_what_the_exercises_block_keeps(shape):
    """The reference formula against the exercise's GPT-style block (its LayerNorm Function keeps x̂ and 1/σ,
    every other operation is torch's), measured: it fails if the block or torch's saving changes."""
    ns = exercise_namespace()
    B, T, D, H, F_ = shape
    p = ns["gpt_params"](D, F_)
    x = torch.randn(B, T, D, requires_grad=True)
    measured = ck.saved_bytes(lambda a: ns["gpt_block"](a, p, H), x, exclude=p.values())
    assert measured == grading._gpt_reference(*shape) == gpt_by_parts(*shape)


def test_the_exercises_layer_norm_has_the_right_gradient():
    ns = exercise_namespace()
    x = torch.randn(2, 3, 8, dtype=torch.float64, requires_grad=True)
    gamma, beta = (torch.randn(8, dtype=torch.float64, requires_grad=True) for _ in range(2))
    assert torch.autograd.gradcheck(ns["LayerNorm"].apply, (x, gamma, beta))


def test_the_checkpoint_reference_is_torchs_checkpoint():
    """Plain autograd on the same random stream is what torch.utils.checkpoint gives too, the caller's draws
    between forward and backward and after backward included."""
    for case in grading._checkpoint_cases(torch.Generator().manual_seed(grading.CHECKPOINTED.seed)):
        fn, x, grad_y, seed = case.args
        x_ = x.detach().requires_grad_()
        grading._start_stream(seed)
        y = torch.utils.checkpoint.checkpoint(fn, x_, use_reentrant=False)
        torch.rand(grading._LATER_DRAWS)
        y.backward(grad_y)
        after = torch.rand(grading._NEXT_DRAWS, dtype=torch.float64).to(y.dtype)
        want = grading._plain(fn, x, grad_y, seed)
        assert torch.allclose(torch.cat([y.detach().reshape(-1), x_.grad.reshape(-1), after]), want)


def test_a_backward_that_leaks_the_random_state_is_caught_and_named():
    """Issue 26: a backward that restores the saved state and never puts the caller's back got full marks."""
    expect(check_checkpointed, lambda fn, x: Leaky.apply(fn, x),
           "restores the saved RNG state for the recomputation but does not put the caller's state back")


def test_the_caller_draws_between_forward_and_backward():
    """Without draws between the passes a leaking backward would end where plain autograd does."""
    assert grading._LATER_DRAWS > 0 and grading._NEXT_DRAWS > 0


def test_the_predictions_are_what_the_formulas_give():
    truth = grading._true_predictions()
    assert truth["checkpointed_gib"] == 1.0 and truth["best_segment"] == 2.0
    assert math.isclose(truth["flop_ratio_half"], 7 / 6)
    assert math.isclose(truth["init_loss"], math.log(65) + 0.1024)


# --- refusals and messages ----------------------------------------------------------------------------------

def test_saved_bytes_may_use_hooks_but_not_the_course_meter():
    def delegate(fn, args, exclude=()):
        return ck.saved_bytes(fn, *args, exclude=exclude)

    expect(check_saved_bytes, delegate, "course_lib.checkpointing.saved_bytes")


def test_a_tensor_is_not_a_number_of_bytes():
    expect(check_saved_bytes, lambda fn, args, exclude=(): torch.tensor(identity_saved_bytes(fn, args, exclude)),
           "should return a number of bytes")
    expect(check_gpt_block_saved_bytes, lambda *a: float(gpt_by_parts(*a)), "as an int")


def test_measuring_the_block_is_refused():
    def on_meta(batch, seq_len, d_model, n_heads, d_ff):
        x = torch.empty(batch, seq_len, d_model, device="meta")
        return int((x * 2).numel()) * 0 + gpt_by_parts(batch, seq_len, d_model, n_heads, d_ff)

    expect(check_gpt_block_saved_bytes, on_meta, "meta device")

    def with_hooks(batch, seq_len, d_model, n_heads, d_ff):
        with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            pass
        return gpt_by_parts(batch, seq_len, d_model, n_heads, d_ff)

    expect(check_gpt_block_saved_bytes, with_hooks, "saved-tensor hooks")

    def predictions():
        torch.nn.Linear(2, 2)
        return {"checkpointed_gib": 1, "best_segment": 2, "flop_ratio_half": 7 / 6, "init_loss": 4.277}

    expect(check_memory_predictions, predictions, "building an nn.Module")


def test_torchs_checkpoint_is_refused_by_any_road():
    from torch.utils import checkpoint as tc

    expect(check_checkpointed, lambda fn, x: tc.checkpoint(fn, x, use_reentrant=True), "torch.utils.checkpoint")
    expect(check_checkpointed, lambda fn, x: tc.checkpoint_sequential([fn], 1, x, use_reentrant=False),
           "torch.utils.checkpoint")


def test_checkpoint_messages():
    expect(check_checkpointed, lambda fn, x: fn(x).detach(), "no graph")
    expect(check_checkpointed, lambda fn, x: [fn(x)], "should return fn(x), a tensor")
    expect(check_checkpointed, lambda fn, x: fn(x).sum(), "keeps x's shape")

    class NoGrad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, fn, x):
            with torch.no_grad():
                return fn(x)

        @staticmethod
        def backward(ctx, grad_y):
            return None, None

    expect(check_checkpointed, lambda fn, x: NoGrad.apply(fn, x), "x has no gradient")


def test_predictions_of_the_wrong_kind_are_named():
    with pytest.raises(GradingError, match="should return a dict"):
        check_memory_predictions(lambda: [1.0, 2, 7 / 6, 4.277])
    with pytest.raises(GradingError, match="has no value for"):
        check_memory_predictions(lambda: {"checkpointed_gib": 1.0})
    with pytest.raises(GradingError, match="still empty"):
        check_memory_predictions(lambda: {"checkpointed_gib": ..., "best_segment": 2, "flop_ratio_half": 1.2,
                                          "init_loss": 4.3})


def test_not_implemented_is_reported():
    def todo(*args, **kwargs):
        raise NotImplementedError()

    for checker in (check_saved_bytes, check_gpt_block_saved_bytes, check_checkpointed):
        expect(checker, todo, "not implemented yet")


def test_dropout_functions_really_draw_random_numbers():
    """The cases that test the bug must differ when the recomputation draws new numbers."""
    def fresh_masks(fn, x, grad_y, seed):  # the given bug: the recomputation goes on along the stream
        grading._start_stream(seed)
        with torch.no_grad():
            y = fn(x)
        x2 = x.detach().requires_grad_()
        (grad,) = torch.autograd.grad(fn(x2), x2, grad_y)
        return torch.cat([y.reshape(-1), grad.reshape(-1)])

    cases = grading._checkpoint_cases(torch.Generator().manual_seed(grading.CHECKPOINTED.seed))
    differ = [not torch.allclose(fresh_masks(*c.args), grading._plain(*c.args)[:2 * c.args[1].numel()])
              for c in cases]
    assert differ[0] and sum(differ) >= 4


def test_a_backward_that_leaks_the_cuda_random_state_is_named(monkeypatch):
    """Where CUDA is the course's device the CUDA generator must be as the student's code found it too. Run
    without a GPU: course_lib.device says cuda, and the CUDA generator's state is a tensor the fake
    get_rng_state returns and the student's backward changes."""
    import course_lib.device

    state = [torch.zeros(8, dtype=torch.uint8)]
    monkeypatch.setattr(course_lib.device, "get_device", lambda: torch.device("cuda"))
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device="cuda": state[0].clone())

    class CudaLeak(StateInCtx):
        @staticmethod
        def backward(ctx, grad_y):
            state[0] = state[0] + 1  # as torch.cuda.set_rng_state(saved) would, never undone
            return StateInCtx.backward(ctx, grad_y)

    check_checkpointed(lambda fn, x: StateInCtx.apply(fn, x))  # the right one leaves the CUDA state alone
    expect(check_checkpointed, lambda fn, x: CudaLeak.apply(fn, x), "CUDA generator", "fork_rng")


def test_each_task_of_the_catalogue_is_named_nine_times_in_ten():
    """tests/test_mistake_catalogue.py checks the share for the whole assignment; here, task by task."""
    from collections import Counter

    from mistakes import ex11

    total, named = Counter(w.answer for w in ex11.WRONG), Counter(w.answer for w in ex11.WRONG if w.expect)
    assert all(named[a] >= 0.9 * total[a] for a in total), (named, total)


def test_a_block_count_with_two_unlisted_slips_names_both():
    def two_slips(batch, seq_len, d_model, n_heads, d_ff):  # P kept twice and no mask
        return gpt_by_parts(batch, seq_len, d_model, n_heads, d_ff) + 4 * batch * n_heads * seq_len**2 - seq_len**2

    expect(check_gpt_block_saved_bytes, two_slips, "(B, H, T, T) tensor too many", "mask is missing")
