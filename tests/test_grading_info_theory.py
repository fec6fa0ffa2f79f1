"""The chapter 1 checkers: correct solutions pass, each common mistake is named, delegation is refused,
and no message leaks a reference value."""

from functools import partial
import math

import pytest
import torch
import torch.nn.functional as F

import course_lib
from course_lib.grading import (
    GradingError,
    check_cross_entropy_from_logits,
    check_entropy,
    check_kl_divergence,
)

from grading_helpers import expect_failure, no_values_leak


# --- correct solutions written independently of course_lib -----------------------------------------

def good_entropy(p, base=2.0):
    logs = torch.where(p > 0, torch.log(p), torch.zeros_like(p))
    return -(p * logs).sum(-1) / math.log(base)


def good_loss(logits, targets):
    m = logits.max(-1, keepdim=True).values
    log_z = m + torch.log(torch.exp(logits - m).sum(-1, keepdim=True))
    return -(logits - log_z).gather(-1, targets.unsqueeze(-1)).mean()


def good_kl(p, q, base=2.0):
    ratio = torch.where(p > 0, torch.log(p / q), torch.zeros_like(p))
    return (p * ratio).sum(-1) / math.log(base)


def float32_entropy(p, base=2.0):  # computing in float32 is fine
    return good_entropy(p.float(), base)


@pytest.mark.parametrize(
    "checker, solution",
    [(check_entropy, good_entropy), (check_entropy, float32_entropy),
     (check_cross_entropy_from_logits, good_loss), (check_kl_divergence, good_kl)],
)
def test_correct_solutions_pass(checker, solution):
    checker(solution)


# --- mistakes are named ----------------------------------------------------------------------------

# Messages may mention shapes, bases and tolerances in words, never tensor values or decimals.
expect = partial(expect_failure, no_leak=partial(no_values_leak, max_decimals=2))


ENTROPY_MISTAKES = {
    "NaN when a probability is 0": lambda p, base=2.0: -(p * torch.log(p)).sum(-1) / math.log(base),
    "the sign": lambda p, base=2.0: -good_entropy(p, base),
    "divide the natural log by log(base)": lambda p, base=2.0: good_entropy(p, math.e),
    "ignore the `base` argument": lambda p, base=2.0: good_entropy(p, 2.0),
    "averaged over outcomes": lambda p, base=2.0: good_entropy(p, base) / p.shape[-1],
    "reduced over every dimension": lambda p, base=2.0: good_entropy(p, base).sum(),
}


@pytest.mark.parametrize("fragment", ENTROPY_MISTAKES)
def test_entropy_mistakes_are_named(fragment):
    expect(check_entropy, ENTROPY_MISTAKES[fragment], fragment)


def _naive_loss(logits, targets):
    q = logits.exp() / logits.exp().sum(-1, keepdim=True)
    return -q.log().gather(-1, targets.unsqueeze(-1)).mean()


LOSS_MISTAKES = {
    "exp overflows": _naive_loss,
    "log(softmax(z)) underflows": lambda z, t: -F.softmax(z, -1).log().gather(-1, t.unsqueeze(-1)).mean(),
    "the sign": lambda z, t: -good_loss(z, t),
    "in nats": lambda z, t: good_loss(z, t) / math.log(2),
    "summed the per-position losses": lambda z, t: good_loss(z, t) * t.numel(),
    "the log-sum-exp normaliser is missing": lambda z, t: -z.gather(-1, t.unsqueeze(-1)).mean(),
    "top token (argmax)": lambda z, t: good_loss(z, z.argmax(-1)),
}


@pytest.mark.parametrize("fragment", LOSS_MISTAKES)
def test_loss_mistakes_are_named(fragment):
    expect(check_cross_entropy_from_logits, LOSS_MISTAKES[fragment], fragment)


KL_MISTAKES = {
    "arguments are swapped": lambda p, q, base=2.0: good_kl(q, p, base) if (p > 0).all() else good_kl(p, q, base),
    "produces NaN there": lambda p, q, base=2.0: (p * torch.log(p / q)).sum(-1) / math.log(base),
    "the sign": lambda p, q, base=2.0: -good_kl(p, q, base),
    "you computed the cross-entropy": lambda p, q, base=2.0: good_kl(p, q, base) + good_entropy(p, base),
    "divide the natural log": lambda p, q, base=2.0: good_kl(p, q, math.e),
}


@pytest.mark.parametrize("fragment", KL_MISTAKES)
def test_kl_mistakes_are_named(fragment):
    expect(check_kl_divergence, KL_MISTAKES[fragment], fragment)


def test_unrecognised_wrong_answer_gets_a_generic_hint():
    message = expect(check_entropy, lambda p, base=2.0: good_entropy(p, base) + 0.01, "wrong values")
    assert "fair coin" in message  # the first case, described without its answer


def test_not_implemented_and_crashes_are_reported():
    def todo(p, base=2.0):
        raise NotImplementedError()

    expect(check_entropy, todo, "not implemented yet")
    expect(check_entropy, lambda p, base=2.0: p.nonexistent(), "raised AttributeError")
    expect(check_entropy, 42, "should be a function")
    expect(check_entropy, lambda p, base=2.0: "one bit", "should return a tensor")


# --- delegation is refused -------------------------------------------------------------------------

def test_calling_the_reference_is_refused():
    expect(check_entropy, course_lib.info_theory.entropy, "calls course_lib.info_theory.entropy")
    expect(check_entropy, lambda p, base=2.0: course_lib.info_theory.entropy(p, base=base), "scores no points")


def test_aliased_reference_is_refused():
    from course_lib.info_theory import kl_divergence as my_kl

    def sneaky(p, q, base=2.0):
        return my_kl(p, q, base=base)

    expect(check_kl_divergence, sneaky, "calls course_lib.info_theory.kl_divergence")


def test_torch_functions_and_tensor_methods_are_refused():
    expect(check_cross_entropy_from_logits, lambda z, t: F.cross_entropy(z.reshape(-1, z.shape[-1]), t.reshape(-1)),
           "calls torch.nn.functional.cross_entropy")
    expect(check_cross_entropy_from_logits,
           lambda z, t: -(z - z.logsumexp(-1, keepdim=True)).gather(-1, t.unsqueeze(-1)).mean(),
           "calls Tensor.logsumexp")
    expect(check_cross_entropy_from_logits,
           lambda z, t: -torch.log_softmax(z, -1).gather(-1, t.unsqueeze(-1)).mean(), "calls torch.log_softmax")
    expect(check_entropy, lambda p, base=2.0: torch.special.entr(p).sum(-1) / math.log(base), "calls torch.special.entr")
    expect(check_entropy, lambda p, base=2.0: torch.distributions.Categorical(probs=p).entropy() / math.log(base),
           "calls torch.distributions.Categorical.entropy")


def test_the_watcher_is_removed_after_a_check():
    import sys

    before = sys.getprofile()
    check_entropy(good_entropy)
    with pytest.raises(GradingError):
        check_entropy(course_lib.info_theory.entropy)
    assert sys.getprofile() is before
