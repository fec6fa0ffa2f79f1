"""The chapter 4 checkers beyond the catalogue (tests/mistakes/ex04.py): other correct formulations pass,
and the checkers refuse what they must, by any road, without leaking a value."""

import math

import pytest
import torch
import torch.nn.functional as F

from course_lib import ffn
from course_lib.grading import (GradingError, check_ffn_predictions, check_geglu_backward, check_llama_ffn,
                                check_top_k_swiglu)

from grading_helpers import expect_failure, no_values_leak


def expect(checker, student, *fragments):
    return expect_failure(checker, student, *fragments, no_leak=no_values_leak)


# --- other correct formulations -------------------------------------------------------------------------

def einsum_llama_ffn(x, w1, w2, w3):  # nn.Linear's layout read with einsum, SiLU through exp
    gate = torch.einsum("...d,fd->...f", x, w1)
    hidden = gate / (1 + torch.exp(-gate)) * torch.einsum("...d,fd->...f", x, w3)
    return torch.einsum("...f,df->...d", hidden, w2)


def loop_top_k_swiglu(x, w_gate, w_up, w_down, k):  # one position at a time, sort instead of topk
    rows = x.reshape(-1, x.shape[-1])
    out = []
    for row in rows:
        a = row @ w_gate
        h = a * torch.sigmoid(a) * (row @ w_up)
        order = h.abs().argsort(descending=True)
        kept = torch.zeros_like(h)
        kept[order[:k]] = h[order[:k]]
        out.append(kept @ w_down)
    return torch.stack(out).reshape(x.shape)


def jacobian_geglu_backward(x, w_gate, w_up, w_down, grad_out):  # per position, erfc and einsum
    a, u = x @ w_gate, x @ w_up
    cdf = 0.5 * torch.erfc(-a / math.sqrt(2))
    gate = a * cdf
    prime = cdf + a * torch.exp(-a * a / 2) / math.sqrt(2 * math.pi)
    grad_h = grad_out @ w_down.T
    grad_a, grad_u = grad_h * u * prime, grad_h * gate
    grad_x = grad_a @ w_gate.T + grad_u @ w_up.T
    return (grad_x, torch.einsum("...d,...f->df", x, grad_a), torch.einsum("...d,...f->df", x, grad_u),
            torch.einsum("...f,...d->fd", gate * u, grad_out))


def test_other_correct_formulations_pass():
    check_llama_ffn(einsum_llama_ffn)
    check_top_k_swiglu(loop_top_k_swiglu)
    check_geglu_backward(jacobian_geglu_backward)


def test_predictions_within_rounding_pass_and_wrong_types_are_named():
    check_ffn_predictions(lambda: {"hidden_width": 6912, "ffn_params": 53.08e6, "ffn_share": 0.669,
                                   "gate_output": -1.076})
    with pytest.raises(GradingError, match="should return a dict"):
        check_ffn_predictions(lambda: [6912, 53084160, 0.67, -1.08])
    with pytest.raises(GradingError, match="has no value for"):
        check_ffn_predictions(lambda: {"hidden_width": 6912})
    with pytest.raises(GradingError, match="should be a number"):
        check_ffn_predictions(lambda: {"hidden_width": "6912", "ffn_params": 1, "ffn_share": 1,
                                       "gate_output": 1})
    expect(check_ffn_predictions, lambda: {"hidden_width": 6912, "ffn_params": 53_084_160, "ffn_share": 0.9,
                                           "gate_output": -1.0758}, "`ffn_share` is not what happens")


# --- refusals ------------------------------------------------------------------------------------------------

def test_delegating_to_the_course_or_to_torch_is_refused_by_any_road():
    def via_course(x, w1, w2, w3):
        return ffn.swiglu(x, w1.T, w3.T, w2.T)

    def via_module(x, w1, w2, w3):
        return (F.silu(x @ w1.T) * (x @ w3.T)) @ w2.T

    def via_aten(x, w_gate, w_up, w_down, k):
        h = torch.ops.aten.silu(x @ w_gate) * (x @ w_up)
        idx = h.abs().topk(k, dim=-1).indices
        return (h * torch.zeros_like(h).scatter(-1, idx, 1.0)) @ w_down

    def via_gelu(x, w_gate, w_up, w_down, grad_out):
        a = x @ w_gate
        return torch.nn.GELU()(a), w_gate, w_up, w_down

    expect(check_llama_ffn, via_course, "course_lib.ffn.swiglu")
    expect(check_llama_ffn, via_module, "silu")
    expect(check_top_k_swiglu, via_aten, "silu")
    expect(check_geglu_backward, via_gelu, "gelu")
    expect(check_geglu_backward, lambda x, g, u, d, go: ffn.geglu_backward(x, g, u, d, go),
           "course_lib.ffn.geglu_backward")


def test_autograd_is_refused_in_the_backward_task_by_any_road():
    def via_func(x, w_gate, w_up, w_down, grad_out):
        def forward(x, w_gate, w_up, w_down):
            a = x @ w_gate
            return (0.5 * a * (1 + torch.erf(a / math.sqrt(2))) * (x @ w_up)) @ w_down

        _, pullback = torch.func.vjp(forward, x, w_gate, w_up, w_down)
        return pullback(grad_out)

    expect(check_geglu_backward, via_func, "torch.func")


def test_predictions_refuse_building_a_model():
    def by_measuring():
        with torch.device("meta"):
            layer = torch.nn.Linear(2560, 6912, bias=False)
        n = 3 * layer.weight.numel()
        return {"hidden_width": 6912, "ffn_params": n, "ffn_share": 0.6694, "gate_output": -1.0758}

    expect(check_ffn_predictions, by_measuring, "nn.Module")


def test_contracts_dtype_mutation_and_missing_work():
    def float64_always(x, w1, w2, w3):
        return einsum_llama_ffn(x.double(), w1.double(), w2.double(), w3.double())

    def mutating(x, w_gate, w_up, w_down, k):
        w_gate *= 2.0  # scaled in place, undone below: the answer is right, the input is not
        return loop_top_k_swiglu(x, w_gate / 2, w_up, w_down, k)

    def not_done(*args):
        raise NotImplementedError()

    expect(check_llama_ffn, float64_always, "should be float32")
    expect(check_top_k_swiglu, mutating, "changed its input `w_gate` in place")
    with pytest.raises(GradingError, match="not implemented yet"):
        check_geglu_backward(not_done)


def test_a_wrong_answer_outside_the_catalogue_gets_the_hint_and_no_values():
    message = expect(check_top_k_swiglu, lambda x, g, u, d, k: 1.01 * loop_top_k_swiglu(x, g, u, d, k), "wrong")
    assert "tensor(" not in message
    shape = expect(check_geglu_backward, lambda x, g, u, d, go: (x, g, u[:, :1], d), "grad_w_up must have")
    assert "every position" in shape


def test_each_task_of_the_catalogue_is_named_nine_times_in_ten():
    """tests/test_mistake_catalogue.py checks the share for the whole assignment; here, task by task."""
    from collections import Counter

    from mistakes import ex04

    total, named = Counter(w.answer for w in ex04.WRONG), Counter(w.answer for w in ex04.WRONG if w.expect)
    assert all(named[a] >= 0.9 * total[a] for a in total), (named, total)


# --- mistakes nobody catalogued are named from what the output gets wrong ----------------------------------

def test_a_gate_no_catalogue_lists_is_described_by_where_it_departs_from_silu():
    def swish_two(x, w1, w2, w3):  # Swish with β = 2: not a named curve
        gate = x @ w1.T
        return (gate * torch.sigmoid(2 * gate) * (x @ w3.T)) @ w2.T

    expect(check_llama_ffn, swish_two, "is not SiLU(z) = z · σ(z)")


def test_a_role_assignment_no_catalogue_lists_is_read_off_the_output():
    def down_is_w1(x, w1, w2, w3):  # (F, D) read as the down projection, (D, F) as the gate
        gate = x @ w2
        return (gate * torch.sigmoid(gate) * (x @ w3.T)) @ w1

    expect(check_llama_ffn, down_is_w1, "your function uses", "w1 (not transposed) as the down projection")


def test_a_top_k_that_keeps_two_more_units_is_counted():
    def two_more(x, w_gate, w_up, w_down, k):
        a = x @ w_gate
        h = a * torch.sigmoid(a) * (x @ w_up)
        n = min(k + 2, h.shape[-1])
        keep = torch.zeros_like(h).scatter(-1, h.abs().topk(n, dim=-1).indices, 1.0)
        return (h * keep) @ w_down

    expect(check_top_k_swiglu, two_more, "units; it should keep exactly k")


def test_a_derivative_off_by_a_factor_is_written_in_gelus_pieces():
    def doubled_cdf(x, w_gate, w_up, w_down, grad_out):  # GELU′ taken as 2Φ(a) + a φ(a)
        d = w_gate.shape[0]
        xs, g = x.reshape(-1, d), grad_out.reshape(-1, d)
        a, u = xs @ w_gate, xs @ w_up
        cdf = 0.5 * (1 + torch.erf(a / math.sqrt(2)))
        pdf = torch.exp(-a * a / 2) / math.sqrt(2 * math.pi)
        grad_h = g @ w_down.T
        grad_u, grad_a = grad_h * a * cdf, grad_h * u * (2 * cdf + a * pdf)
        grad_x = (grad_a @ w_gate.T + grad_u @ w_up.T).reshape(x.shape)
        return grad_x, xs.T @ grad_a, xs.T @ grad_u, (a * cdf * u).T @ g

    expect(check_geglu_backward, doubled_cdf, "works out to 2·Φ(a) + a φ(a)")
