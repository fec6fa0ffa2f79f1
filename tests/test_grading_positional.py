"""The chapter 2 checkers beyond the catalogue (tests/mistakes/ex02.py): other correct formulations pass,
and the checkers refuse what they must."""

import math

import pytest
import torch

import course_lib
from course_lib.grading import (GradingError, check_apply_rope, check_position_predictions,
                                check_sinusoidal_encoding, check_sinusoidal_shift_matrix)


# --- other correct formulations ------------------------------------------------------------------------

def exp_log_sinusoidal(positions, d_model, base=10000.0):  # the tutorial form, written into slices
    pe = torch.zeros(positions.shape[0], d_model)
    div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(base) / d_model))
    angle = positions.double()[:, None] * div  # (T, D/2)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe


def float32_sinusoidal(positions, d_model, base=10000.0):  # float32 throughout is fine
    i = torch.arange(d_model // 2, dtype=torch.float32)
    angle = positions.float()[:, None] / base ** (2 * i / d_model)
    return torch.stack((angle.sin(), angle.cos()), dim=-1).reshape(positions.shape[0], d_model)


def block_diag_shift(k, d_model, base=10000.0):  # one 2 × 2 block per pair, torch.block_diag
    blocks = []
    for i in range(d_model // 2):
        phi = k * base ** (-2 * i / d_model)
        blocks.append(torch.tensor([[math.cos(phi), -math.sin(phi)], [math.sin(phi), math.cos(phi)]],
                                   dtype=torch.float64))
    return torch.block_diag(*blocks)


def hf_style_rope(x, cos, sin, pairing="half"):
    """Hugging Face's rotate_half form for 'half', Meta's complex numbers for 'interleaved'."""
    if pairing == "half":
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * torch.cat((cos, cos), -1) + rotated * torch.cat((sin, sin), -1)
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], -1, 2).contiguous())
    turned = z * torch.complex(cos.double(), sin.double())
    return torch.view_as_real(turned).flatten(-2).to(x.dtype)


def loop_rope(x, cos, sin, pairing="half"):
    """One pair at a time, with an index list per pairing."""
    d = x.shape[-1]
    pairs = ([(i, i + d // 2) for i in range(d // 2)] if pairing == "half"
             else [(2 * i, 2 * i + 1) for i in range(d // 2)])
    out = torch.empty_like(x)
    for i, (first, second) in enumerate(pairs):
        a, b, c, s = x[..., first], x[..., second], cos[..., i], sin[..., i]
        out[..., first] = a * c - b * s
        out[..., second] = a * s + b * c
    return out


@pytest.mark.parametrize("checker, solution", [
    (check_sinusoidal_encoding, exp_log_sinusoidal), (check_sinusoidal_encoding, float32_sinusoidal),
    (check_sinusoidal_shift_matrix, block_diag_shift),
    (check_apply_rope, hf_style_rope), (check_apply_rope, loop_rope),
])
def test_other_correct_formulations_pass(checker, solution):
    checker(solution)


def test_the_shift_reference_shifts_the_encoding():
    from course_lib.positional import sinusoidal_encoding, sinusoidal_shift_matrix

    p = torch.arange(300, dtype=torch.float64)
    for k, d in ((1, 8), (-7, 16), (2.5, 10)):
        shifted = sinusoidal_encoding(p + k, d, dtype=torch.float64)
        assert torch.allclose(sinusoidal_encoding(p, d, dtype=torch.float64) @ sinusoidal_shift_matrix(k, d),
                              shifted, atol=1e-10)


# --- refusals and contracts ----------------------------------------------------------------------------

def test_calling_the_references_is_refused():
    pe = course_lib.positional
    with pytest.raises(GradingError, match="course_lib.positional.sinusoidal_encoding"):
        check_sinusoidal_shift_matrix(
            lambda k, d, base=10000.0: torch.linalg.lstsq(
                pe.sinusoidal_encoding(torch.arange(64.0), d, base, dtype=torch.float64),
                pe.sinusoidal_encoding(torch.arange(64.0) + k, d, base, dtype=torch.float64)).solution)
    with pytest.raises(GradingError, match="apply_rope_reference"):
        def via_matrices(x, cos, sin, pairing="half"):
            positions = torch.atan2(sin[..., 0], cos[..., 0]).round().long()  # θ_0 = 1: the angle is p
            return pe.apply_rope_reference(x, positions.reshape(-1)[: x.shape[-2]], pairing=pairing)
        check_apply_rope(via_matrices)


def test_hugging_face_rope_is_refused_when_imported():
    transformers = pytest.importorskip("transformers")  # noqa: F841
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    def via_hf(x, cos, sin, pairing="half"):
        full_cos, full_sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
        q, _ = apply_rotary_pos_emb(x, x, full_cos, full_sin, unsqueeze_dim=0)
        return q

    with pytest.raises(GradingError, match="apply_rotary_pos_emb"):
        check_apply_rope(via_hf)


def test_predictions_within_rounding_pass_and_wrong_types_are_named():
    slopes = [2 ** -(h + 1) for h in range(8)] + [round(2 ** -(h + 0.5), 5) for h in range(4)]
    check_position_predictions(lambda: {"alibi_12": torch.tensor(slopes), "pe_self_dot": 64,
                                        "rope_repeated_gap": 0, "rope_period": 6.283})
    with pytest.raises(GradingError, match="should return a dict"):
        check_position_predictions(lambda: [slopes, 64, 0, 6.283])
    with pytest.raises(GradingError, match="has no value for"):
        check_position_predictions(lambda: {"alibi_12": slopes})
    with pytest.raises(GradingError, match="should be a number"):
        check_position_predictions(lambda: {"alibi_12": slopes, "pe_self_dot": "64", "rope_repeated_gap": 0,
                                            "rope_period": 6.283})
    with pytest.raises(GradingError, match="rope_repeated_gap"):
        check_position_predictions(lambda: {"alibi_12": slopes, "pe_self_dot": 64, "rope_repeated_gap": 0.3,
                                            "rope_period": 6.283})
