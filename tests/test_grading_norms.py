"""The chapter 5 checkers beyond the catalogue (tests/mistakes/ex05.py): other correct formulations pass,
and the checkers refuse what they must."""

import pytest
import torch

from course_lib.grading import (GradingError, check_layer_norm, check_merge_moments, check_norm_predictions,
                                check_rms_norm_backward)


def rsqrt_layer_norm(x, weight, bias, eps=1e-5):  # torch.var with correction=0 is fine
    mu = x.mean(-1, keepdim=True)
    return (x - mu) * torch.rsqrt(x.var(-1, keepdim=True, correction=0) + eps) * weight + bias


def einsum_backward(x, weight, grad_out, eps=1e-6):  # builds Jᵀ g through the Jacobian: O(D²) but right
    d = x.shape[-1]
    r = torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    x_hat = x / r
    jac = weight[:, None] * (torch.eye(d, dtype=x.dtype) - torch.einsum("...i,...j->...ij", x_hat, x_hat) / d)
    grad_x = torch.einsum("...ij,...i->...j", jac / r.unsqueeze(-1), grad_out)
    return grad_x, torch.einsum("...d,...d->d", grad_out, x_hat)


def second_moment_merge(count_a, mean_a, var_a, count_b, mean_b, var_b):  # E[x²] − μ²: fine in float64
    count = count_a + count_b
    mean = (count_a * mean_a + count_b * mean_b) / count
    second = (count_a * (var_a + mean_a**2) + count_b * (var_b + mean_b**2)) / count
    return count, mean, second - mean**2


def test_other_correct_formulations_pass():
    check_layer_norm(rsqrt_layer_norm)
    check_rms_norm_backward(einsum_backward)


def test_the_second_moment_merge_loses_float32_precision_only_within_tolerance():
    check_merge_moments(second_moment_merge)


def test_predictions_within_rounding_pass_and_wrong_types_are_named():
    check_norm_predictions(lambda: {"fp16_outlier": 0, "fp16_outlier_upcast": 8 / 300, "layer_norm_of_constant": 0.0,
                                    "half_rms_input": 5.7735e-4})
    with pytest.raises(GradingError, match="should return a dict"):
        check_norm_predictions(lambda: [0, 1, 0, 1000])
    with pytest.raises(GradingError, match="has no value for"):
        check_norm_predictions(lambda: {"fp16_outlier": 0.0})
    with pytest.raises(GradingError, match="should be a number"):
        check_norm_predictions(lambda: {"fp16_outlier": "0", "fp16_outlier_upcast": 0.0267,
                                        "layer_norm_of_constant": 0, "half_rms_input": 5.77e-4})


def test_a_prediction_near_a_small_true_value_is_judged_relatively():
    """half_rms_input is of order 1e-4: a tolerance in absolute terms would accept nearly anything."""
    with pytest.raises(GradingError, match="half_rms_input"):
        check_norm_predictions(lambda: {"fp16_outlier": 0, "fp16_outlier_upcast": 8 / 300,
                                        "layer_norm_of_constant": 0.0, "half_rms_input": 6e-4})


def test_backward_through_the_aten_layer_norm_is_refused():
    def aten(x, weight, grad_out, eps=1e-6):
        y, mean, rstd = torch.ops.aten.native_layer_norm(x, [x.shape[-1]], None, None, eps)
        return y, weight

    with pytest.raises(GradingError, match="native_layer_norm"):
        check_rms_norm_backward(aten)
