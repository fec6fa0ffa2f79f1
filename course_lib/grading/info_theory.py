"""Checkers for exercise 01 (information theory).

1. ``entropy`` — implement H(P) from its formula (with 0 · log 0 = 0).
2. ``predictions`` — predict four numbers before computing them (a function returning a dict).
3. ``logsumexp`` — find and fix the bug in a given "stable" log-sum-exp that overflows in float16.
4. ``label_smoothed_cross_entropy`` — extend the loss from logits to a smoothed target.
5. ``soft_cross_entropy_grad`` — derive the gradient of the loss with respect to the logits for any
   target distribution, and check it.
"""

from __future__ import annotations

import math

import torch

from .. import info_theory as ref
from ._predictions import predictions_task
from ._core import Case, Forbid, Mistake, Task, TensorOutput, describe

__all__ = ["check_entropy", "check_info_predictions", "check_logsumexp", "check_label_smoothed_cross_entropy",
           "check_soft_cross_entropy_grad"]

_F64, _F32 = torch.float64, torch.float32


def _distributions(gen, shape, dtype=_F64, *, zeros=False, scale=2.0):
    p = (scale * torch.randn(shape, generator=gen, dtype=_F64)).softmax(-1)
    if zeros:  # knock out about a third of the outcomes, keeping at least one per row
        keep = torch.rand(shape, generator=gen, dtype=_F64) > 0.35
        keep[..., 0] = True
        p = p * keep
        p = p / p.sum(-1, keepdim=True)
    return p.to(dtype)


def _base_name(base: float) -> str:
    return "e" if base == math.e else f"{base:g}"


# --- Task 1: entropy -------------------------------------------------------------------------------------

def _entropy(p, base=2.0, *, unit=None, reduce="sum", dim=-1, everything=False, sign=1.0, guard=True):
    """The entropy with one knob turned: what a solution with that mistake computes."""
    p64 = p.double()
    terms = torch.special.xlogy(p64, p64) if guard else p64 * torch.log(p64)
    total = terms.sum() if everything else (terms.sum(dim) if reduce == "sum" else terms.mean(dim))
    scale = {None: math.log(base), "nats": 1.0, "bits": math.log(2.0), "twice": math.log(2.0) * math.log(base)}[unit]
    return (-sign * total / scale).to(p.dtype)


def _entropy_cases(gen) -> list[Case]:
    cases = [
        Case("a fair coin (shape (2,)), base 2", (torch.tensor([0.5, 0.5], dtype=_F64),), {"base": 2.0}),
        Case("a loaded coin (shape (2,)), base 2", (torch.tensor([0.9, 0.1], dtype=_F64),), {"base": 2.0}),
    ]
    for shape, dtype, base in [((6,), _F64, 2.0), ((4, 7), _F64, 2.0), ((4, 7), _F32, math.e),
                               ((2, 3, 5), _F64, 10.0), ((3, 3), _F64, 2.0)]:
        p = _distributions(gen, shape, dtype)
        cases.append(Case(f"a batch of distributions, {describe(p)}, base {_base_name(base)}", (p,), {"base": base}))
    p0 = _distributions(gen, (5, 8), _F64, zeros=True)
    cases.append(Case(f"distributions with some zero probabilities, {describe(p0)}, base 2", (p0,), {"base": 2.0}))
    certain = torch.zeros(3, 4, dtype=_F32)
    certain[:, 1] = 1.0
    cases.append(Case(f"certain outcomes (one-hot rows), {describe(certain)}, base 2", (certain,), {"base": 2.0}))
    uniform = torch.full((6,), 1 / 6, dtype=_F64)
    cases.append(Case("a uniform distribution over 6 outcomes (float64), base e", (uniform,), {"base": math.e}))
    return cases


ENTROPY = Task(
    name="entropy", reference=ref.entropy, cases=_entropy_cases, seed=101, rtol=1e-4, atol=1e-5,
    mistakes=[
        Mistake("0 · log 0 must count as 0 (its limit), but your code gives NaN where a probability is 0 "
                "(0 · log 0 is 0 · (−inf) in floating point). Leave those terms out, e.g. with torch.where "
                "or torch.special.xlogy.", lambda p, base=2.0: _entropy(p, base, guard=False)),
        Mistake("the sign: entropy is −Σ p log p, which is never negative.",
                lambda p, base=2.0: _entropy(p, base, sign=-1.0)),
        Mistake("the log base: your result is in nats whatever `base` says. Divide the natural log by "
                "log(base).", lambda p, base=2.0: _entropy(p, base, unit="nats")),
        Mistake("the log base: your result is in bits whatever `base` says (log₂ ignores the `base` argument).",
                lambda p, base=2.0: _entropy(p, base, unit="bits")),
        Mistake("the log base is converted twice: log₂ already gives bits; dividing it by log(base) again "
                "changes the unit a second time. Use the natural log, then divide by log(base).",
                lambda p, base=2.0: _entropy(p, base, unit="twice")),
        Mistake("you averaged over the outcomes (mean); entropy sums them: −Σₓ P(x) log P(x).",
                lambda p, base=2.0: _entropy(p, base, reduce="mean")),
        Mistake("you reduced over every dimension. Each row (along the last dimension) is its own "
                "distribution: return one entropy per row.", lambda p, base=2.0: _entropy(p, base, everything=True)),
        Mistake("the sum runs over the first dimension; the outcomes are along the last one.",
                lambda p, base=2.0: _entropy(p, base, dim=0)),
    ],
    forbid=Forbid(operations=("entropy",), modules=(ref,),
                  functions=((torch.distributions.Categorical.entropy, "torch.distributions.Categorical.entropy"),)),
)

check_entropy = ENTROPY.checker(
    """Check ``entropy(p, base=2.0)``: H(P) = −Σ P log_base P along the last dimension, 0 · log 0 = 0,
    in p's dtype.""")


# --- Task 2: predictions ----------------------------------------------------------------------------------


# Wrong predictions that reveal a specific misunderstanding, key by key.
_WRONG_PREDICTIONS = {
    "dyadic_bits": [
        (2.0, "2 bits is the entropy of the UNIFORM distribution over 4 outcomes; this one is not uniform. "
              "Add up P(x) · log₂(1/P(x)) term by term: each term is a probability times a whole number."),
        (1.0, "that is the surprisal of the likeliest outcome alone; entropy averages the surprisal of every "
              "outcome, weighted by its probability."),
        (3.0, "3 bits is the surprisal of one of the rarest outcomes; entropy is the AVERAGE surprisal."),
    ],
    "init_loss_nats": [
        (math.log2(65), "that is log₂ 65, the loss in bits; the question asks for nats (the natural log), as "
                        "F.cross_entropy reports."),
        (65.0, "65 is the perplexity at initialisation (e to the loss); the loss itself is its logarithm."),
        (1 / 65, "1/65 is the probability every character gets; the loss is the surprisal −ln of it."),
        (0.0, "equal logits give every character the same probability 1/65, not certainty; the loss is the "
              "surprisal of the target under that uniform guess."),
    ],
    "kl_impossible": [
        (1.0, "1 bit is KL(Q‖P), the other direction. In KL(P‖Q) the data come from P, which produces the "
              "outcome Q calls impossible: what does coding a probability-0 outcome cost?"),
        (0.0, "KL is zero only when the two distributions are equal; these are not."),
        (0.5, "half the data come from the outcome Q calls impossible, and each of those costs −log₂ 0 bits: "
              "what is half of that?"),
        (None, "the answer is not a finite number. Which outcome does P produce that Q gives probability 0?"),
    ],
    "ppl_two_tokens": [
        (5.0, "5 is the average of the two tokens' perplexities (2 and 8). Perplexity exponentiates the "
              "average LOSS: average the surprisals in bits first, then take 2 to that power."),
        (3.2, "3.2 is 1 / (average probability). Perplexity averages the surprisals (log-probabilities), "
              "not the probabilities: it is a geometric mean of 1/p, not an arithmetic one."),
        (2.0, "2 bits is the average loss; the perplexity is 2 to that power."),
        (16.0, "16 = 2 × 8 multiplies the two tokens' perplexities; perplexity is per token: average the "
               "surprisals over the two tokens before exponentiating."),
    ],
}


def _true_predictions() -> dict[str, float]:
    dyadic = torch.tensor([0.5, 0.25, 0.125, 0.125], dtype=_F64)
    equal_logits = torch.zeros(1, 65, dtype=_F64)
    p, q = torch.tensor([0.5, 0.5], dtype=_F64), torch.tensor([1.0, 0.0], dtype=_F64)
    surprisal_bits = ref.surprisal(torch.tensor([0.5, 0.125], dtype=_F64))  # two tokens
    return {
        "dyadic_bits": float(ref.entropy(dyadic)),
        "init_loss_nats": float(ref.cross_entropy_from_logits(equal_logits, torch.tensor([7]))),
        "kl_impossible": float(ref.kl_divergence(p, q)),  # P produces an outcome Q calls impossible
        "ppl_two_tokens": float(2 ** surprisal_bits.mean()),
    }


INFO_PREDICTIONS = predictions_task(
    truth=_true_predictions,
    wrong=_WRONG_PREDICTIONS,
    seed=102,
    rtol=2e-3,
    atol=1e-2,
    advice="Work it out on paper first, then run the experiment below.",
)

check_info_predictions = INFO_PREDICTIONS.checker(
    """Check ``predictions() -> dict``: the entropy of (1/2, 1/4, 1/8, 1/8) in bits, the loss in nats of
    equal logits over 65 characters, KL((½, ½) ‖ (1, 0)) in bits, and the perplexity of two tokens given
    probabilities 1/2 and 1/8.""")


# --- Task 3: log-sum-exp in float16 (find and fix the bug) -------------------------------------------------

_F16 = torch.float16
_F16_MAX = torch.finfo(_F16).max  # 65,504: the largest finite float16


def _lse(z, *, shift="row", add_back=True, keepdim=False, reduce="sum", store=None, clamp=False):
    """log Σ exp(z) over the last dimension with one knob turned: what a solution with that mistake
    computes (exactly, in float64, then cast back to z's dtype). ``store`` is the dtype the sum of the
    exponentials is rounded to before its log (where a float16 sum overflows to inf); ``clamp`` caps
    that sum at float16's largest value."""
    z64 = z.double()
    if shift == "row":
        m = z64.amax(-1, keepdim=True)
    elif shift == "global":
        m = z64.max().expand(*z64.shape[:-1], 1)
    elif shift == "min":
        m = z64.amin(-1, keepdim=True)
    elif shift == "abs":
        m = z64.abs().amax(-1, keepdim=True)
    elif shift == "first":
        m = z64[..., :1]
    else:  # no shift at all
        m = torch.zeros_like(z64[..., :1])
    with torch.no_grad():
        total = torch.exp(z64 - m)
        total = total.sum(-1, keepdim=True) if reduce == "sum" else total.mean(-1, keepdim=True)
        if store is not None:
            total = total.to(store).double()  # rounded (or overflowed) in that dtype
        if clamp:
            total = total.clamp(max=_F16_MAX)
        out = torch.log(total) + (m if add_back else 0.0)
    out = out if keepdim else out.squeeze(-1)
    return out.to(z.dtype)


def _lse_exact(z):
    """The reference: log Σ exp(z) over the last dimension (rows may hold some −inf entries), computed
    in float64 and rounded once to z's dtype."""
    return torch.logsumexp(z.double(), dim=-1).to(z.dtype)


def _lse_cases(gen) -> list[Case]:
    def randn(shape, scale=1.0, shift=0.0, dtype=_F64):
        return (shift + scale * torch.randn(shape, generator=gen, dtype=_F64)).to(dtype)

    cases = [Case("the row (1, 2, 3) (float64)", (torch.tensor([1.0, 2.0, 3.0], dtype=_F64),))]
    for shape, scale, shift, dtype, note in [
        ((4, 6), 1.0, 0.0, _F64, ""),
        ((3, 5, 7), 2.0, 0.0, _F32, ""),
        ((5, 10), 300.0, 800.0, _F64, " with very large logits (hundreds)"),
        ((4, 8), 1.0, -1000.0, _F64, " with very negative logits (about −1000)"),
    ]:
        z = randn(shape, scale, shift, dtype)
        cases.append(Case(f"z: {describe(z)}{note}", (z,)))
    spread = randn((6, 5), 1.0)
    spread = spread + torch.tensor([0.0, 900.0, -900.0, 40.0, -300.0, 5.0], dtype=_F64)[:, None]
    cases.append(Case(f"a batch whose rows sit at very different levels, {describe(spread)}", (spread,)))
    masked = randn((4, 9), 2.0)
    masked[torch.rand((4, 9), generator=gen) < 0.4] = -math.inf
    masked[:, 0] = 0.5  # every row keeps at least one finite logit
    cases.append(Case(f"rows with some −inf entries (masked logits), {describe(masked)}", (masked,)))
    # float16: per-row shifts first, then vocabularies whose sum of exponentials no longer fits
    for shape, scale, shift, note in [
        ((4, 12), 100.0, 300.0, " with large logits (hundreds)"),
        ((2, 50257), 0.02, 0.0, " over GPT-2's vocabulary, logits near 0 as at initialisation"),
        ((2, 128256), 2.0, 0.0, " over Llama 3's vocabulary, logits of spread 2"),
        ((3, 128256), 0.02, 0.0, " over Llama 3's vocabulary, logits near 0 as at initialisation"),
    ]:
        z = randn(shape, scale, shift, _F16)
        cases.append(Case(f"z: {describe(z)}{note}", (z,)))
    levels = randn((3, 256000), 0.1) + torch.tensor([0.0, 20.0, -15.0], dtype=_F64)[:, None]
    levels = levels.to(_F16)
    cases.append(Case(f"z: {describe(levels)} (a 256,000-token vocabulary), rows at different levels",
                      (levels,)))
    holes = randn((2, 128256), 0.05)
    holes[torch.rand((2, 128256), generator=gen) < 0.25] = -math.inf  # a quarter of the tokens masked
    holes = holes.to(_F16)
    cases.append(Case(f"z: {describe(holes)} with some −inf entries (masked tokens)", (holes,)))
    square = randn((5, 5), 3.0, dtype=_F32)
    cases.append(Case(f"a square batch, {describe(square)}", (square,)))
    return cases


def _given_lse(z):
    return _lse(z, store=z.dtype)  # the per-row trick, with the sum kept in z's own dtype


LOGSUMEXP = Task(
    name="logsumexp", reference=_lse_exact, cases=_lse_cases, seed=103,  # tolerances by dtype
    mistakes=[
        Mistake("the sum of the exponentials still overflows float16, as in the given version, and its log is "
                "inf. Each exp(z − m) is at most 1, but a vocabulary of V tokens can add up to V of them, and "
                "float16 stops at 65,504: keep that sum out of float16 until its log has been taken.",
                _given_lse),
        Mistake("the sum of the exponentials is capped at float16's largest value (65,504): the cap is finite "
                "but wrong, so the log is too small. Keep the sum in a wider type than float16 instead.",
                lambda z: _lse(z, clamp=True)),
        Mistake("the exponentials are averaged (mean); log-sum-exp sums them. (A mean does stay small — if you "
                "use one, add log V back.)", lambda z: _lse(z, reduce="mean")),
        Mistake("the maximum is subtracted but not added back: log Σ exp(z) = m + log Σ exp(z − m).",
                lambda z: _lse(z, add_back=False)),
        Mistake("nothing is subtracted before exp: exp overflows for large logits (e^800 is inf in any float "
                "type, float64 included). A wider type does not replace the shift: subtract each row's maximum "
                "first.", lambda z: _lse(z, shift="none")),
        Mistake("the shift m is the largest logit of the WHOLE batch. A row far below it has every exp(z − m) "
                "round to 0, and log 0 = −inf. Each row needs its own maximum.", lambda z: _lse(z, shift="global")),
        Mistake("the shift is the largest |z|: for a row of very negative logits that is far above every "
                "entry, and every exp(z − m) underflows to 0. Shift by the row's maximum itself.",
                lambda z: _lse(z, shift="abs")),
        Mistake("the shift is each row's minimum: then every other exponent is positive and can overflow. "
                "Shift by the maximum, so that every exponent is ≤ 0.", lambda z: _lse(z, shift="min")),
        Mistake("the shift is the row's first entry, not its maximum: another entry can be far larger and "
                "overflow.", lambda z: _lse(z, shift="first")),
        Mistake("the result keeps the reduced dimension: return shape (...) — one value per row — not (..., 1).",
                lambda z: _lse(z, keepdim=True)),
    ],
    forbid=Forbid(operations=("logsumexp", "log_softmax", "softmax"), modules=(ref,)),
    hint="Run your function and the given one on the failing input, and print each intermediate tensor with "
         "its dtype.",
)

check_logsumexp = LOGSUMEXP.checker(
    """Check ``logsumexp(z)``: log Σⱼ exp(z_j) over the last dimension, shape (...), in z's dtype, finite and
    accurate for float16 logits over vocabularies of any size, stable for logits of any size and for rows at
    very different levels.""")


# --- Task 4: label smoothing ------------------------------------------------------------------------------

def _smoothed(logits, targets, smoothing, *, spread="all", keep=True, uniform_sum=False, model_side=False,
              stable=True, reduce="mean", sign=1.0, ignore_eps=False):
    """The label-smoothed loss with one knob turned: what a solution with that mistake computes."""
    z = logits.double()
    eps = 0.0 if ignore_eps else smoothing
    V = z.shape[-1]
    if stable:
        log_q = ref.log_softmax(z)
    else:
        with torch.no_grad():
            log_q = torch.log(z.exp() / z.exp().sum(-1, keepdim=True))
    one_hot = torch.nn.functional.one_hot(targets.long(), V).to(z.dtype)
    if model_side:  # smoothing the model's probabilities instead of the target
        q_mixed = (1 - eps) * log_q.exp() + eps / V
        nll = -torch.log((q_mixed * one_hot).sum(-1))
    else:
        if spread == "all":
            target = (1 - eps if keep else 1.0) * one_hot + (eps if uniform_sum else eps / V)
        else:  # spread over the V − 1 other tokens only
            target = (1 - eps) * one_hot + eps / (V - 1) * (1 - one_hot)
        nll = -(target * log_q).sum(-1)
    total = nll.mean() if reduce == "mean" else (nll.sum() if reduce == "sum" else nll)
    return (sign * total).to(logits.dtype)


def _smoothed_explain(got, want, case) -> str | None:
    if isinstance(got, torch.Tensor) and got.is_floating_point() and not torch.isfinite(got).all() \
            and torch.isfinite(want).all():
        return ("the result is inf or NaN although the loss is finite: exp overflows for large logits, or a "
                "probability that underflowed to 0 meets a log. Compute log Q = z − m − log Σ exp(z − m) with m "
                "each row's maximum (the log-sum-exp trick, as in task 3), and never take log(softmax).")
    return None


def _smoothed_reference(logits, targets, smoothing):
    return _smoothed(logits, targets, smoothing)


def _smoothed_cases(gen) -> list[Case]:
    cases = []
    for shape, dtype, scale, shift, eps, note in [
        ((4, 5), _F64, 1.0, 0.0, 0.1, ""),
        ((8, 11), _F32, 3.0, 0.0, 0.1, ""),
        ((2, 6, 9), _F64, 2.0, 0.0, 0.25, ""),
        ((5, 7), _F64, 1.0, 0.0, 0.0, ", smoothing 0 (the plain loss)"),
        ((3, 4), _F64, 2.0, 0.0, 1.0, ", smoothing 1 (a uniform target)"),
        ((6, 10), _F64, 300.0, 800.0, 0.1, " with very large logits (hundreds)"),
        ((1, 3), _F64, 1.0, 0.0, 0.3, " (one position)"),
    ]:
        logits = (shift + scale * torch.randn(shape, generator=gen, dtype=_F64)).to(dtype)
        targets = torch.randint(0, shape[-1], shape[:-1], generator=gen)
        cases.append(Case(f"logits {describe(logits)}{note}, smoothing {eps:g}, targets of shape "
                          f"{tuple(targets.shape)}", (logits, targets, eps)))
    return cases


LABEL_SMOOTHED_CROSS_ENTROPY = Task(
    name="label_smoothed_cross_entropy", reference=_smoothed_reference, cases=_smoothed_cases, seed=104,
    rtol=1e-4, atol=1e-5,
    mistakes=[
        Mistake("the smoothing mass is spread over the V − 1 OTHER tokens. Here (as in PyTorch) the target is "
                "(1 − ε) · one-hot + ε / V: every token, the target included, gets ε / V.",
                lambda z, t, e: _smoothed(z, t, e, spread="others")),
        Mistake("the one-hot part is not scaled by (1 − ε): the target (1 − ε) · one-hot + ε / V must sum "
                "to 1.", lambda z, t, e: _smoothed(z, t, e, keep=False)),
        Mistake("every token gets ε instead of ε / V: the uniform part ε · U spreads a total mass of ε over "
                "the V tokens.", lambda z, t, e: _smoothed(z, t, e, uniform_sum=True)),
        Mistake("the smoothing is applied to the model's probabilities ((1 − ε) q + ε / V) instead of the "
                "target distribution. Label smoothing changes P in H(P, Q), not Q.",
                lambda z, t, e: _smoothed(z, t, e, model_side=True)),
        Mistake("exp overflows for large logits: subtract each row's maximum first (the log-sum-exp trick, "
                "as in task 3).", lambda z, t, e: _smoothed(z, t, e, stable=False)),
        Mistake("the smoothing is ignored: the result is the plain loss −log q(target).",
                lambda z, t, e: _smoothed(z, t, e, ignore_eps=True)),
        Mistake("you summed the per-position losses; the loss is their mean.",
                lambda z, t, e: _smoothed(z, t, e, reduce="sum")),
        Mistake("you returned one loss per position; return their mean (a 0-dimensional tensor).",
                lambda z, t, e: _smoothed(z, t, e, reduce="none")),
        Mistake("the sign: a cross-entropy −Σ P log Q is never negative.",
                lambda z, t, e: _smoothed(z, t, e, sign=-1.0)),
    ],
    forbid=Forbid(operations=("cross_entropy", "log_softmax", "logsumexp", "softmax", "kl_div"), modules=(ref,)),
    explain=_smoothed_explain,
    hint="Write the smoothed target P for one position of a vocabulary of 3 by hand, then H(P, Q) = −Σ P log Q.",
)

check_label_smoothed_cross_entropy = LABEL_SMOOTHED_CROSS_ENTROPY.checker(
    """Check ``label_smoothed_cross_entropy(logits, targets, smoothing)``: the mean over positions of
    H(P, softmax(logits)) with P = (1 − ε) · one-hot(target) + ε / V, in nats, stable for large logits.""")


# --- Task 5: the gradient for a soft target ---------------------------------------------------------------

def _grad(logits, target_probs, *, scale="positions", sign=1.0, one_hot=False, wrt_probs=False,
          diagonal=False, dim=-1):
    """∂/∂z of the mean over positions of H(P, softmax(z)) with one knob turned."""
    z, p = logits.double(), target_probs.double()
    q = z.softmax(dim)
    if one_hot:
        p = torch.nn.functional.one_hot(p.argmax(-1), p.shape[-1]).to(p.dtype)
    if wrt_probs:
        g = -p / q
    elif diagonal:  # the softmax Jacobian taken as diagonal, q(1 − q)
        g = -p * (1 - q)
    else:
        g = sign * (q - p)
    n = {"positions": z.numel() // z.shape[-1], "none": 1, "vocab": z.shape[-1],
         "first": z.shape[0] if z.dim() > 1 else 1}[scale]
    return (g / n).to(logits.dtype)


def _grad_reference(logits, target_probs):
    return _grad(logits, target_probs)


def _grad_cases(gen) -> list[Case]:
    cases = []
    for shape, dtype, scale, shift, kind in [
        ((4, 6), _F64, 1.0, 0.0, "soft"),
        ((2, 5, 7), _F64, 2.0, 0.0, "soft"),
        ((3, 4, 5), _F32, 1.0, 0.0, "one-hot"),
        ((6, 8), _F64, 1.0, 0.0, "smoothed"),
        ((4, 9), _F64, 300.0, 500.0, "soft"),
        ((5, 5), _F64, 2.0, 0.0, "soft"),
    ]:
        logits = (shift + scale * torch.randn(shape, generator=gen, dtype=_F64)).to(dtype)
        if kind == "soft":
            p = _distributions(gen, shape, dtype)
        else:
            idx = torch.randint(0, shape[-1], shape[:-1], generator=gen)
            p = torch.nn.functional.one_hot(idx, shape[-1]).to(_F64)
            if kind == "smoothed":
                p = 0.9 * p + 0.1 / shape[-1]
            p = p.to(dtype)
        note = " with very large logits (hundreds)" if scale > 100 else ""
        cases.append(Case(f"logits {describe(logits)}{note} and a {kind} target of the same shape",
                          (logits, p)))
    z_one = torch.tensor([2.0, -1.0, 0.5, 4.0], dtype=_F64)
    p_one = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=_F64)
    cases.append(Case("one position (logits of shape (4,)), a one-hot target on the first token (float64)",
                      (z_one, p_one)))
    return cases


SOFT_CROSS_ENTROPY_GRAD = Task(
    name="soft_cross_entropy_grad", reference=_grad_reference, cases=_grad_cases, seed=105, rtol=1e-4, atol=1e-7,
    output=TensorOutput("the dtype of logits"),
    mistakes=[
        Mistake("this is the gradient of the SUM over positions. The loss is their mean, so each position's "
                "gradient is divided by the number of positions N (every leading dimension counts).",
                lambda z, p: _grad(z, p, scale="none")),
        Mistake("the sign: raising the logit of the token the target favours most must lower the loss, so "
                "the gradient there is negative.", lambda z, p: _grad(z, p, sign=-1.0)),
        Mistake("the division is by the first dimension only; the mean runs over ALL positions (every "
                "dimension but the last).", lambda z, p: _grad(z, p, scale="first")),
        Mistake("the division is by the vocabulary size V; the mean runs over positions, not tokens.",
                lambda z, p: _grad(z, p, scale="vocab")),
        Mistake("the target is treated as one-hot (its largest entry). A soft target puts probability on "
                "several tokens, and every Pᵢ enters the loss.", lambda z, p: _grad(z, p, one_hot=True)),
        Mistake("this is the gradient with respect to the probabilities q (−P / q), not the logits z. Chain "
                "through the softmax.", lambda z, p: _grad(z, p, wrt_probs=True)),
        Mistake("the softmax Jacobian is taken as diagonal, q(1 − q). Every logit z_j moves every q_i "
                "(∂q_i/∂z_j = q_i (δ_ij − q_j)): keep the off-diagonal terms, and use Σ P = 1.",
                lambda z, p: _grad(z, p, diagonal=True)),
        Mistake("the softmax runs over the wrong dimension: each position's distribution is along the last "
                "dimension.", lambda z, p: _grad(z, p, dim=0)),
    ],
    forbid=Forbid(operations=("cross_entropy", "kl_div"), modules=(ref,), autograd=True),
    hint="Differentiate −Σᵢ Pᵢ log qᵢ for one position with log qᵢ = zᵢ − log Σ exp(z), then average.",
)

check_soft_cross_entropy_grad = SOFT_CROSS_ENTROPY_GRAD.checker(
    """Check ``soft_cross_entropy_grad(logits, target_probs)``: ∂L/∂logits for L the mean over positions of
    H(P, softmax(logits)), without autograd, in the dtype of logits.""")
