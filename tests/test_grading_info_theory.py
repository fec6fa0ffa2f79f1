"""The chapter 1 checkers beyond the catalogue (tests/mistakes/ex01.py): other correct formulations pass,
and the checkers refuse what they must."""

import math

import pytest
import torch
import torch.nn.functional as F

from course_lib.grading import (GradingError, check_entropy, check_info_predictions,
                                check_label_smoothed_cross_entropy, check_logsumexp,
                                check_soft_cross_entropy_grad)


# --- other correct formulations ------------------------------------------------------------------------

def nan_to_num_entropy(p, base=2.0):  # 0 · log 0 = NaN, then replaced by 0
    return -torch.nan_to_num(p * torch.log(p), nan=0.0).sum(-1) / math.log(base)


def float32_inside_entropy(p, base=2.0):  # computing in float32 and casting back is fine
    q = p.float()
    return (-(q * torch.log(torch.where(q > 0, q, 1.0))).sum(-1) / math.log(base)).to(p.dtype)


def max_values_logsumexp(z):  # .max(...).values, the sum accumulated in float32 (float64 kept)
    m = z.max(dim=-1, keepdim=True).values
    total = torch.exp(z - m).sum(-1, dtype=torch.promote_types(z.dtype, torch.float32))
    return (m.squeeze(-1) + torch.log(total)).to(z.dtype)


def mean_plus_log_v_logsumexp(z):  # a mean of terms ≤ 1 fits in float16 too; log V added back
    m = z.amax(dim=-1, keepdim=True)
    return (m + torch.log(torch.exp(z - m).mean(-1, keepdim=True))).squeeze(-1) + math.log(z.shape[-1])


def bfloat16_sum_logsumexp(z):  # bfloat16 has float32's range: its 8 bits are enough here
    x = z.bfloat16() if z.dtype == torch.float16 else z
    m = x.amax(dim=-1, keepdim=True)
    return (m + torch.log(torch.exp(x - m).sum(-1, keepdim=True))).squeeze(-1).to(z.dtype)


def explicit_target_smoothing(logits, targets, smoothing):  # build P, then H(P, Q)
    V = logits.shape[-1]
    m = logits.amax(-1, keepdim=True)
    log_q = logits - m - torch.log(torch.exp(logits - m).sum(-1, keepdim=True))
    p = torch.full_like(logits, smoothing / V)
    p = p.scatter_add(-1, targets.unsqueeze(-1), torch.full_like(logits[..., :1], 1 - smoothing))
    return -(p * log_q).sum(-1).mean()


def stable_softmax_grad(logits, target_probs):  # the softmax written out, divided by N
    e = torch.exp(logits - logits.amax(-1, keepdim=True))
    q = e / e.sum(-1, keepdim=True)
    return (q - target_probs) * (logits.shape[-1] / logits.numel())


@pytest.mark.parametrize("checker, solution", [
    (check_entropy, nan_to_num_entropy), (check_entropy, float32_inside_entropy),
    (check_logsumexp, max_values_logsumexp), (check_logsumexp, mean_plus_log_v_logsumexp),
    (check_logsumexp, bfloat16_sum_logsumexp),
    (check_label_smoothed_cross_entropy, explicit_target_smoothing),
    (check_soft_cross_entropy_grad, stable_softmax_grad),
])
def test_other_correct_formulations_pass(checker, solution):
    checker(solution)


def test_the_checkers_agree_with_pytorch():
    """The references behind the checkers are PyTorch's label smoothing and autograd."""
    from course_lib.grading.info_theory import _grad_reference, _lse_exact, _smoothed_reference

    gen = torch.Generator().manual_seed(0)
    z = 3 * torch.randn(4, 5, 9, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 9, (4, 5), generator=gen)
    for eps in (0.0, 0.1, 0.7):
        want = F.cross_entropy(z.reshape(-1, 9), y.reshape(-1), label_smoothing=eps)
        assert torch.allclose(_smoothed_reference(z, y, eps), want)
    p = torch.randn(4, 5, 9, generator=gen, dtype=torch.float64).softmax(-1)
    z_auto = z.clone().requires_grad_()
    (-(p * z_auto.log_softmax(-1)).sum(-1).mean()).backward()
    assert torch.allclose(_grad_reference(z, p), z_auto.grad)
    assert torch.allclose(_lse_exact(z), z.logsumexp(-1))


# --- refusals and contracts ----------------------------------------------------------------------------

def test_delegations_by_other_roads_are_refused():
    with pytest.raises(GradingError, match="logsumexp"):
        check_logsumexp(lambda z: torch.ops.aten.logsumexp(z, [-1]))
    with pytest.raises(GradingError, match="log_softmax"):
        check_label_smoothed_cross_entropy(
            lambda z, t, e: -((1 - e) * z.log_softmax(-1).gather(-1, t.unsqueeze(-1)).squeeze(-1)
                              + e * z.log_softmax(-1).mean(-1)).mean())
    with pytest.raises(GradingError, match="softmax"):  # log(softmax) is refused here (task 4 and 3)
        check_logsumexp(lambda z: z[..., 0] - torch.log(torch.softmax(z, -1)[..., 0]))

    def func_grad(logits, target_probs):
        loss = lambda z: -(target_probs * torch.log_softmax(z, -1)).sum(-1).mean()  # noqa: E731
        return torch.func.grad(loss)(logits)

    with pytest.raises(GradingError, match="torch.func"):
        check_soft_cross_entropy_grad(func_grad)


def test_predictions_within_rounding_pass_and_wrong_types_are_named():
    check_info_predictions(lambda: {"dyadic_bits": 1.75, "init_loss_nats": 4.17, "kl_impossible": float("inf"),
                                    "ppl_two_tokens": torch.tensor(4.0)})
    with pytest.raises(GradingError, match="should return a dict"):
        check_info_predictions(lambda: [1.75, 4.17, math.inf, 4.0])
    with pytest.raises(GradingError, match="has no value for"):
        check_info_predictions(lambda: {"dyadic_bits": 1.75})
    with pytest.raises(GradingError, match="should be a number"):
        check_info_predictions(lambda: {"dyadic_bits": "1.75", "init_loss_nats": 4.17, "kl_impossible": math.inf,
                                        "ppl_two_tokens": 4.0})
    with pytest.raises(GradingError, match="kl_impossible"):
        check_info_predictions(lambda: {"dyadic_bits": 1.75, "init_loss_nats": 4.17, "kl_impossible": -math.inf,
                                        "ppl_two_tokens": 4.0})


def test_the_given_logsumexp_fails_only_in_float16():
    """The bug of task 3 shows only where a float16 sum of exponentials passes 65,504."""
    from course_lib.grading.info_theory import _given_lse, _lse_cases, _lse_exact

    for case in _lse_cases(torch.Generator().manual_seed(103)):
        (z,) = case.args
        given_ok = bool(torch.isfinite(_given_lse(z)).all())
        assert given_ok == (z.dtype != torch.float16 or torch.exp(z.double() - z.double().amax(-1, keepdim=True))
                            .sum(-1).max() <= 65504), case.label
        assert torch.isfinite(_lse_exact(z)).all(), case.label
    message = None
    with pytest.raises(GradingError) as info:
        check_logsumexp(_given_lse)
    message = str(info.value)
    assert "float16" in message and "Llama 3" in message, message


def test_a_gradient_of_the_wrong_dtype_is_named():
    with pytest.raises(GradingError, match="should be float32"):
        check_soft_cross_entropy_grad(lambda z, p: stable_softmax_grad(z.double(), p.double()))
