"""Checkers for exercise 01 (information theory): entropy, cross-entropy from logits, KL divergence."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .. import info_theory as ref
from ._core import Case, Forbidden, Mistake, check_function, describe

__all__ = ["check_entropy", "check_cross_entropy_from_logits", "check_kl_divergence"]

# float32 students must pass on float64 inputs too: the mistakes below differ by far more than this.
_RTOL, _ATOL = 1e-4, 1e-5

_REFERENCES = [
    Forbidden(ref.entropy, "course_lib.info_theory.entropy"),
    Forbidden(ref.cross_entropy, "course_lib.info_theory.cross_entropy"),
    Forbidden(ref.kl_divergence, "course_lib.info_theory.kl_divergence"),
    Forbidden(ref.perplexity, "course_lib.info_theory.perplexity"),
    Forbidden(ref.log_softmax, "course_lib.info_theory.log_softmax"),
    Forbidden(ref.cross_entropy_from_logits, "course_lib.info_theory.cross_entropy_from_logits"),
]


def _random_distributions(gen: torch.Generator, shape: tuple[int, ...], dtype, *, zeros: bool = False):
    logits = 2.0 * torch.randn(shape, generator=gen, dtype=torch.float64)
    p = logits.softmax(-1)
    if zeros:  # knock out about a third of the outcomes, keeping at least one per row
        keep = torch.rand(shape, generator=gen, dtype=torch.float64) > 0.35
        keep[..., 0] = True
        p = p * keep
        p = p / p.sum(-1, keepdim=True)
    return p.to(dtype)


def _base_name(base: float) -> str:
    return "e" if base == math.e else f"{base:g}"


def _natural_log_entropy(p, base=2.0):
    return ref.entropy(p, base=math.e)


def check_entropy(entropy) -> None:
    """Check ``entropy(p, base=2.0)``: H(P) = −Σ P log_b P along the last dimension."""
    gen = torch.Generator().manual_seed(101)
    cases = [
        Case("a fair coin (shape (2,)), base 2", (torch.tensor([0.5, 0.5], dtype=torch.float64),), {"base": 2.0}),
        Case("a loaded coin (shape (2,)), base 2", (torch.tensor([0.9, 0.1], dtype=torch.float64),), {"base": 2.0}),
    ]
    for shape, dtype, base in [((6,), torch.float64, 2.0), ((4, 7), torch.float64, 2.0),
                               ((4, 7), torch.float32, math.e), ((2, 3, 5), torch.float64, 10.0)]:
        p = _random_distributions(gen, shape, dtype)
        cases.append(Case(f"a batch of distributions, {describe(p)}, base {_base_name(base)}", (p,), {"base": base}))
    p0 = _random_distributions(gen, (5, 8), torch.float64, zeros=True)
    cases.append(Case(f"distributions with some zero probabilities, {describe(p0)}, base 2", (p0,), {"base": 2.0}))
    certain = torch.zeros(3, 4, dtype=torch.float64)
    certain[:, 1] = 1.0
    cases.append(Case(f"certain outcomes (one-hot rows), {describe(certain)}, base 2", (certain,), {"base": 2.0}))
    uniform = torch.full((6,), 1 / 6, dtype=torch.float64)
    cases.append(Case("a uniform distribution over 6 outcomes, base e", (uniform,), {"base": math.e}))

    def unguarded_log(p, base=2.0):
        return -(p * torch.log(p)).sum(-1) / math.log(base)  # 0 · log 0 = 0 · (−inf) = NaN

    mistakes = [
        Mistake("0 · log 0 must count as 0 (its limit), but your code produces NaN when a probability is 0. "
                "Skip zero entries, e.g. with torch.where or torch.special.xlogy.", unguarded_log),
        Mistake("the sign. Entropy is −Σ p log p, which is never negative.", lambda p, base=2.0: -ref.entropy(p, base=base)),
        Mistake("the log base. Your result is in nats whatever `base` says: divide the natural log by log(base).",
                _natural_log_entropy),
        Mistake("the log base. You always use log₂ and ignore the `base` argument.", lambda p, base=2.0: ref.entropy(p, base=2.0)),
        Mistake("you averaged over outcomes (mean) instead of summing them.",
                lambda p, base=2.0: ref.entropy(p, base=base) / p.shape[-1]),
        Mistake("you reduced over every dimension. Each row (the last dimension) is its own distribution; "
                "return one entropy per row.", lambda p, base=2.0: ref.entropy(p, base=base).sum()),
    ]
    forbidden = _REFERENCES + [
        Forbidden(torch.distributions.Categorical.entropy, "torch.distributions.Categorical.entropy"),
        Forbidden(torch.special.entr, "torch.special.entr"),
    ]
    check_function(entropy, ref.entropy, cases, task="entropy", mistakes=mistakes, forbidden=forbidden,
                   rtol=_RTOL, atol=_ATOL)


def check_cross_entropy_from_logits(cross_entropy_from_logits) -> None:
    """Check ``cross_entropy_from_logits(logits, targets)``: the mean of −ln softmax(logits)[target]."""
    gen = torch.Generator().manual_seed(202)
    cases = []
    for shape, dtype, scale in [((4, 5), torch.float64, 1.0), ((8, 11), torch.float32, 3.0),
                                ((2, 6, 9), torch.float64, 2.0), ((1, 3), torch.float64, 1.0)]:
        logits = (scale * torch.randn(shape, generator=gen, dtype=torch.float64)).to(dtype)
        targets = torch.randint(0, shape[-1], shape[:-1], generator=gen)
        cases.append(Case(f"logits {describe(logits)} with targets of shape {tuple(targets.shape)}", (logits, targets)))
    # Large logits: exp overflows without the max-subtraction, and log(softmax) underflows to log 0.
    big = 800.0 + 300.0 * torch.randn((6, 10), generator=gen, dtype=torch.float64)
    big_targets = torch.randint(0, 10, (6,), generator=gen)
    cases.append(Case(f"very large logits (hundreds), {describe(big)}", (big, big_targets)))

    def naive(logits, targets):
        q = logits.exp() / logits.exp().sum(-1, keepdim=True)
        return -q.log().gather(-1, targets.unsqueeze(-1)).squeeze(-1).mean()

    def log_of_softmax(logits, targets):
        return -logits.softmax(-1).log().gather(-1, targets.unsqueeze(-1)).squeeze(-1).mean()

    def per_position(logits, targets):
        return ref.cross_entropy_from_logits(logits, targets, reduction="none")

    def wrong_axis(logits, targets):
        return -ref.log_softmax(logits, dim=0).gather(-1, targets.unsqueeze(-1)).squeeze(-1).mean()

    def no_normaliser(logits, targets):
        return -logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1).mean()

    def argmax_not_target(logits, targets):
        return ref.cross_entropy_from_logits(logits, logits.argmax(-1))

    mistakes = [
        Mistake("exp overflows for large logits (e^800 is inf in any float type). Subtract each row's maximum "
                "before exponentiating: the log-sum-exp trick, which changes nothing mathematically.", naive),
        Mistake("log(softmax(z)) underflows: when one logit dominates, the others' probabilities round to 0 and "
                "their log is −inf. Stay in log space: z − m − log Σ exp(z − m) with m the row maximum.", log_of_softmax),
        Mistake("the sign. The loss is −log q(target), which is never negative.",
                lambda z, t: -ref.cross_entropy_from_logits(z, t)),
        Mistake("the log base: the loss is in nats (natural log), as in torch.nn.functional.cross_entropy.",
                lambda z, t: ref.cross_entropy_from_logits(z, t, base=2.0)),
        Mistake("you summed the per-position losses; the loss is their mean.",
                lambda z, t: ref.cross_entropy_from_logits(z, t, reduction="sum")),
        Mistake("you returned one loss per position; return their mean (a scalar).", per_position),
        Mistake("the softmax normalises over the wrong dimension: the vocabulary is the last one.", wrong_axis),
        Mistake("the log-sum-exp normaliser is missing: −z[target] alone is not a log-probability.", no_normaliser),
        Mistake("you scored the model's top token (argmax) instead of the target token.", argmax_not_target),
    ]
    forbidden = _REFERENCES + [
        Forbidden(F.cross_entropy, "torch.nn.functional.cross_entropy"),
        Forbidden(F.nll_loss, "torch.nn.functional.nll_loss"),
        Forbidden(F.log_softmax, "torch.nn.functional.log_softmax"),
        Forbidden(torch.log_softmax, "torch.log_softmax"),
        Forbidden("Tensor.log_softmax", "Tensor.log_softmax"),
        Forbidden(torch.logsumexp, "torch.logsumexp"),
        Forbidden("Tensor.logsumexp", "Tensor.logsumexp"),
    ]
    check_function(cross_entropy_from_logits, ref.cross_entropy_from_logits, cases,
                   task="cross_entropy_from_logits", mistakes=mistakes, forbidden=forbidden, rtol=_RTOL, atol=_ATOL)


def check_kl_divergence(kl_divergence) -> None:
    """Check ``kl_divergence(p, q, base=2.0)``: KL(P‖Q) = Σ P log_b(P / Q) along the last dimension."""
    gen = torch.Generator().manual_seed(303)
    cases = [Case("P = (0.7, 0.2, 0.1) against Q = (0.5, 0.3, 0.2), base 2",
                  (torch.tensor([0.7, 0.2, 0.1], dtype=torch.float64), torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)),
                  {"base": 2.0})]
    for shape, dtype, base in [((5,), torch.float64, 2.0), ((4, 6), torch.float64, math.e), ((3, 2, 5), torch.float32, 2.0)]:
        p, q = _random_distributions(gen, shape, dtype), _random_distributions(gen, shape, dtype)
        cases.append(Case(f"P and Q both {describe(p)}, base {_base_name(base)}", (p, q), {"base": base}))
    p0, q = _random_distributions(gen, (4, 7), torch.float64, zeros=True), _random_distributions(gen, (4, 7), torch.float64)
    cases.append(Case(f"P with some zero probabilities, P and Q both {describe(p0)}, base 2", (p0, q), {"base": 2.0}))
    same = _random_distributions(gen, (3, 5), torch.float64)
    cases.append(Case(f"P equal to Q, {describe(same)}, base 2", (same, same.clone()), {"base": 2.0}))

    def unguarded(p, q, base=2.0):
        return (p * torch.log(p / q)).sum(-1) / math.log(base)  # 0 · log 0 → NaN

    mistakes = [
        Mistake("the arguments are swapped: you computed KL(Q‖P). KL is not symmetric; the first argument P is "
                "the distribution the data comes from and weights the sum.", lambda p, q, base=2.0: ref.kl_divergence(q, p, base=base)),
        Mistake("terms with P(x) = 0 must contribute 0, but your code produces NaN there. Skip them "
                "(torch.where or torch.special.xlogy).", unguarded),
        Mistake("the sign. KL(P‖Q) = Σ P log(P/Q) is never negative (Gibbs' inequality).",
                lambda p, q, base=2.0: -ref.kl_divergence(p, q, base=base)),
        Mistake("you computed the cross-entropy H(P, Q); KL subtracts the entropy: KL = H(P, Q) − H(P).",
                lambda p, q, base=2.0: ref.cross_entropy(p, q, base=base)),
        Mistake("the log base. Your result is in nats whatever `base` says: divide the natural log by log(base).",
                lambda p, q, base=2.0: ref.kl_divergence(p, q, base=math.e)),
        Mistake("the log base. You always use log₂ and ignore the `base` argument.",
                lambda p, q, base=2.0: ref.kl_divergence(p, q, base=2.0)),
        Mistake("you reduced over every dimension: return one divergence per row.",
                lambda p, q, base=2.0: ref.kl_divergence(p, q, base=base).sum()),
    ]
    forbidden = _REFERENCES + [
        Forbidden(F.kl_div, "torch.nn.functional.kl_div"),
        Forbidden(torch.distributions.kl_divergence, "torch.distributions.kl_divergence"),
    ]
    check_function(kl_divergence, ref.kl_divergence, cases, task="kl_divergence", mistakes=mistakes,
                   forbidden=forbidden, rtol=_RTOL, atol=_ATOL)
