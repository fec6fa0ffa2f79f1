"""The chapter 2 checkers: correct solutions pass, each common mistake is named, delegation is refused,
and no message leaks a reference value."""

from functools import partial
import math

import pytest
import torch

import course_lib
from course_lib.grading import GradingError, check_alibi_bias, check_apply_rope, check_sinusoidal_encoding

from grading_helpers import expect_failure, no_values_leak


# --- correct solutions written independently of course_lib -----------------------------------------

def good_sinusoidal(positions, d_model, base=10000.0):
    pe = torch.zeros(positions.shape[0], d_model, dtype=torch.float64)
    div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(base) / d_model))
    angle = positions.double()[:, None] * div  # (T, D/2)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe


def float32_sinusoidal(positions, d_model, base=10000.0):  # float32 throughout is fine
    i = torch.arange(d_model // 2, dtype=torch.float32)
    angle = positions.float()[:, None] / base ** (2 * i / d_model)
    return torch.stack((angle.sin(), angle.cos()), dim=-1).reshape(positions.shape[0], d_model)


def good_rope(x, cos, sin, pairing="half"):
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
    pairs = [(i, i + d // 2) for i in range(d // 2)] if pairing == "half" else [(2 * i, 2 * i + 1) for i in range(d // 2)]
    out = torch.empty_like(x)
    for i, (first, second) in enumerate(pairs):
        a, b, c, s = x[..., first], x[..., second], cos[..., i], sin[..., i]
        out[..., first] = a * c - b * s
        out[..., second] = a * s + b * c
    return out


def good_alibi(n_heads, seq_len):
    def power_of_two(n):
        start = 2 ** (-8 / n)
        return [start ** (h + 1) for h in range(n)]

    p = 2 ** int(math.log2(n_heads))
    slopes = power_of_two(p) + power_of_two(2 * p)[::2][: n_heads - p]
    pos = torch.arange(seq_len)
    distance = (pos[None, :] - pos[:, None]).abs()
    return -torch.tensor(slopes)[:, None, None] * distance


@pytest.mark.parametrize(
    "checker, solution",
    [(check_sinusoidal_encoding, good_sinusoidal), (check_sinusoidal_encoding, float32_sinusoidal),
     (check_apply_rope, good_rope), (check_apply_rope, loop_rope),
     (check_alibi_bias, good_alibi)],
)
def test_correct_solutions_pass(checker, solution):
    checker(solution)


# --- mistakes are named ----------------------------------------------------------------------------

# Messages may mention shapes and positions of the inputs, never tensor values or decimals.
expect = partial(expect_failure, no_leak=partial(no_values_leak, max_decimals=2))


def _sin_variant(positions, d_model, base=10000.0, *, exponent=lambda i, d: 2 * i / d, swap=False, concat=False):
    i = torch.arange(d_model // 2, dtype=torch.float64)
    angle = positions.double()[:, None] / base ** exponent(i, d_model)
    a, b = (angle.cos(), angle.sin()) if swap else (angle.sin(), angle.cos())
    if concat:
        return torch.cat((a, b), -1)
    return torch.stack((a, b), -1).reshape(positions.shape[0], d_model)


def _per_column(positions, d_model, base=10000.0):
    j = torch.arange(d_model, dtype=torch.float64)
    angle = positions.double()[:, None] / base ** (j / d_model)
    pe = angle.sin()
    pe[:, 1::2] = angle[:, 1::2].cos()
    return pe


SINUSOIDAL_MISTAKES = {
    "sin and cos are swapped": lambda p, d, base=10000.0: _sin_variant(p, d, base, swap=True),
    "all the sines first": lambda p, d, base=10000.0: _sin_variant(p, d, base, concat=True),
    "You used i instead of 2i": lambda p, d, base=10000.0: _sin_variant(p, d, base, exponent=lambda i, dm: i / dm),
    "every column j its own": _per_column,
    "the frequency is inverted": lambda p, d, base=10000.0: _sin_variant(p, d, base, exponent=lambda i, dm: -2 * i / dm),
    "`base` argument is ignored": lambda p, d, base=10000.0: good_sinusoidal(p, d),
    "ignored the `positions` tensor": lambda p, d, base=10000.0: good_sinusoidal(torch.arange(len(p)), d, base),
}


@pytest.mark.parametrize("fragment", SINUSOIDAL_MISTAKES)
def test_sinusoidal_mistakes_are_named(fragment):
    expect(check_sinusoidal_encoding, SINUSOIDAL_MISTAKES[fragment], fragment)


def _rope_variant(x, cos, sin, pairing="half", *, read=None, write=None, sign=1.0, with_sin=True):
    read = read or pairing
    write = write or read
    half = x.shape[-1] // 2
    a, b = (x[..., :half], x[..., half:]) if read == "half" else (x[..., 0::2], x[..., 1::2])
    s = sign * sin if with_sin else 0 * sin
    first, second = a * cos - b * s, a * s + b * cos
    if write == "half":
        return torch.cat((first, second), -1)
    return torch.stack((first, second), -1).flatten(-2)


def _repeat_interleave_with_rotate_half(x, cos, sin, pairing="half"):
    half = x.shape[-1] // 2
    if pairing == "interleaved":
        return good_rope(x, cos, sin, pairing)  # this student only got 'half' wrong
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos.repeat_interleave(2, -1) + rotated * sin.repeat_interleave(2, -1)


ROPE_MISTAKES = {
    # pairings swapped, and 'interleaved' pairs always: both first fail on a 'half' case
    "with pairing='half' you paired x[2i] with x[2i+1]": lambda x, c, s, pairing="half": _rope_variant(
        x, c, s, read={"half": "interleaved", "interleaved": "half"}[pairing]),
    "paired x[2i] with x[2i+1], the 'interleaved' pairing": lambda x, c, s, pairing="half": _rope_variant(
        x, c, s, read="interleaved"),
    "with pairing='interleaved' you paired x[i] with x[i + D_h/2]": lambda x, c, s, pairing="half": _rope_variant(
        x, c, s, read="half"),
    "rotation goes the wrong way": lambda x, c, s, pairing="half": _rope_variant(x, c, s, pairing, sign=-1.0),
    "the sin terms are missing": lambda x, c, s, pairing="half": _rope_variant(x, c, s, pairing, with_sin=False),
    "wrote the results back": lambda x, c, s, pairing="half": _rope_variant(x, c, s, pairing, write="half"),
    "tables and your rotation follow different pairings": _repeat_interleave_with_rotate_half,
}


@pytest.mark.parametrize("fragment", ROPE_MISTAKES)
def test_rope_mistakes_are_named(fragment):
    expect(check_apply_rope, ROPE_MISTAKES[fragment], fragment)


def _alibi_with(slopes_fn, distance=lambda i, j: (i - j).abs()):
    def student(n_heads, seq_len):
        pos = torch.arange(seq_len)
        return -torch.tensor(slopes_fn(n_heads))[:, None, None] * distance(pos[:, None], pos[None, :])
    return student


def _paper_slopes(n, first=1, extra=0):
    geo = lambda k: [2 ** (-8 * (h + first) / k) for h in range(k)]  # noqa: E731
    p = 2 ** int(math.log2(n))
    return geo(p) + geo(2 * p)[extra::2][: n - p]


ALIBI_MISTAKES = {
    "ALiBi *subtracts*": lambda n, t: -good_alibi(n, t),
    "start one step too early": _alibi_with(lambda n: _paper_slopes(n, first=0)),
    "not the plain geometric": _alibi_with(lambda n: [2 ** (-8 * (h + 1) / n) for h in range(n)]),
    "you started with its second": _alibi_with(lambda n: _paper_slopes(n, extra=1)),
    "upper triangle": _alibi_with(_paper_slopes, lambda i, j: i - j),
    "lower triangle": _alibi_with(_paper_slopes, lambda i, j: j - i),
    "reverse order": _alibi_with(lambda n: _paper_slopes(n)[::-1]),
    "you sorted the slopes": _alibi_with(lambda n: sorted(_paper_slopes(n), reverse=True)),
}


@pytest.mark.parametrize("fragment", ALIBI_MISTAKES)
def test_alibi_mistakes_are_named(fragment):
    expect(check_alibi_bias, ALIBI_MISTAKES[fragment], fragment)


def test_unrecognised_wrong_answers_get_a_generic_hint():
    message = expect(check_alibi_bias, lambda n, t: good_alibi(n, t) * 1.5, "wrong values")
    assert "n_heads 8 (a power of two), seq_len 5" in message
    expect(check_apply_rope, lambda x, c, s, pairing="half": x[..., :-1], "expected shape")


def test_not_implemented_and_crashes_are_reported():
    def todo(*args, **kwargs):
        raise NotImplementedError()

    expect(check_sinusoidal_encoding, todo, "not implemented yet")
    expect(check_apply_rope, lambda x, cos, sin: x, "raised TypeError")  # no `pairing` parameter
    expect(check_alibi_bias, lambda n, t: [[0.0]], "should return a tensor")


# --- delegation is refused -------------------------------------------------------------------------

def test_calling_the_references_is_refused():
    pe = course_lib.positional
    expect(check_sinusoidal_encoding, lambda p, d, base=10000.0: pe.sinusoidal_encoding(p, d, base),
           "calls course_lib.positional.sinusoidal_encoding")
    expect(check_apply_rope, pe.apply_rope, "calls course_lib.positional.apply_rope", "scores no points")
    expect(check_alibi_bias, lambda n, t: pe.alibi_bias(pe.alibi_slopes(n), t),
           "calls course_lib.positional.alibi_slopes")

    def slopes_by_hand_bias_delegated(n, t):
        return pe.alibi_bias(torch.tensor(_paper_slopes(n)), t)

    expect(check_alibi_bias, slopes_by_hand_bias_delegated, "calls course_lib.positional.alibi_bias")


def test_hugging_face_rope_is_refused_when_imported():
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    def via_hf(x, cos, sin, pairing="half"):
        full_cos, full_sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
        q, _ = apply_rotary_pos_emb(x, x, full_cos, full_sin, unsqueeze_dim=0)
        return q

    expect(check_apply_rope, via_hf, "calls transformers.models.llama.modeling_llama")


def test_the_watcher_is_removed_after_a_check():
    import sys

    before = sys.getprofile()
    check_alibi_bias(good_alibi)
    with pytest.raises(GradingError):
        check_alibi_bias(lambda n, t: course_lib.positional.alibi_bias(course_lib.positional.alibi_slopes(n), t))
    assert sys.getprofile() is before
