"""Checkers for exercise 02 (embeddings and positions).

1. ``sinusoidal_encoding`` — implement the original Transformer's position vectors.
2. ``sinusoidal_shift_matrix`` — extend them: build the linear map M_k with PE(p + k) = PE(p) M_k.
3. ``apply_rope`` — find and fix the bug in a given RoPE with both pairings.
4. ``predictions`` — predict numbers about ALiBi, the sinusoidal encoding and RoPE before computing them.
"""

from __future__ import annotations

import dataclasses
import math
import sys

import torch

from .. import positional as ref
from ._predictions import predictions_task
from ._core import Case, Forbid, Mistake, Task, TensorOutput, describe

__all__ = ["check_sinusoidal_encoding", "check_sinusoidal_shift_matrix", "check_apply_rope",
           "check_position_predictions"]

_F64, _F32 = torch.float64, torch.float32


# --- Task 1: sinusoidal encoding ------------------------------------------------------------------

def _sinusoidal(positions, d_model, base=10000.0, *, omega=None, layout="interleaved", swap=False):
    """The encoding with one knob turned (float32, like the reference): ``omega(two_i, d_model, base)``
    sets the frequencies."""
    pos = positions.to(_F64)  # (T,)
    two_i = torch.arange(0, d_model, 2, dtype=_F64)  # (D/2,)
    w = base ** (-two_i / d_model) if omega is None else omega(two_i, d_model, base)
    angles = pos[:, None] * w  # (T, D/2)
    first, second = (angles.cos(), angles.sin()) if swap else (angles.sin(), angles.cos())
    if layout == "concatenated":
        out = torch.cat((first, second), dim=-1)  # (T, D)
    else:
        out = torch.stack((first, second), dim=-1).flatten(-2)  # (T, D)
    return out.to(_F32)


def _per_column_frequency(positions, d_model, base=10000.0):
    """Column j uses base^(−j/D) (its own index) instead of the pair's 2i: odd columns are off."""
    pos = positions.to(_F64)[:, None]  # (T, 1)
    j = torch.arange(d_model, dtype=_F64)  # (D,)
    angles = pos * base ** (-j / d_model)  # (T, D)
    return torch.where(j % 2 == 0, angles.sin(), angles.cos()).to(_F32)


def _reference_sinusoidal(positions, d_model, base=10000.0):
    return ref.sinusoidal_encoding(positions, d_model, base, dtype=_F32)


def _sinusoidal_cases(gen) -> list[Case]:
    return [
        Case("positions 0…7 (int64, shape (8,)), d_model 4", (torch.arange(8), 4)),
        Case("positions 0…49 (int64, shape (50,)), d_model 16", (torch.arange(50), 16)),
        Case("positions 0…5 (int64, shape (6,)), d_model 2 (a single sin/cos pair)", (torch.arange(6), 2)),
        Case("positions 100…131 (int64, shape (32,)), d_model 32: the positions do not start at 0",
             (torch.arange(100, 132), 32)),
        Case("positions 0…19 (int64, shape (20,)), d_model 8, base 100", (torch.arange(20), 8), {"base": 100.0}),
        Case("unsorted positions (int64, shape (5,)), d_model 12", (torch.tensor([7, 0, 3, 999, 42]), 12)),
        Case("positions 0…63 (float32, shape (64,)), d_model 64", (torch.arange(64, dtype=_F32), 64)),
        Case("positions 0…9 (int64, shape (10,)), d_model 10 (D/2 is odd)", (torch.arange(10), 10)),
    ]


def _ignores_positions(positions, d_model, base=10000.0):
    return _reference_sinusoidal(torch.arange(positions.shape[0]), d_model, base)


SINUSOIDAL = Task(
    name="sinusoidal_encoding", reference=_reference_sinusoidal, cases=_sinusoidal_cases, seed=201,
    rtol=1e-4, atol=1e-3,  # float32 angles p·ω at p ≤ 1000 are off by ~1e-4 at most
    output=TensorOutput("float32, torch's default dtype, whatever the positions' dtype"),
    mistakes=[
        Mistake("sin and cos are swapped: even columns 2i hold sin(p·ω_i) and odd columns 2i+1 cos(p·ω_i).",
                lambda p, d, base=10000.0: _sinusoidal(p, d, base, swap=True)),
        Mistake("the layout: you put all the sines first and all the cosines after them. The paper "
                "interleaves them: column 2i is sin(p·ω_i) and column 2i+1 is cos(p·ω_i), the same ω_i.",
                lambda p, d, base=10000.0: _sinusoidal(p, d, base, layout="concatenated")),
        Mistake("the frequency exponent: ω_i = base^(−2i/d_model), where 2i is the even column of pair i. "
                "You used i instead of 2i, so your frequencies fall off half as fast.",
                lambda p, d, base=10000.0: _sinusoidal(p, d, base, omega=lambda t, dm, b: b ** (-(t / 2) / dm))),
        Mistake("column 2i+1 must use the same frequency as column 2i (the pair's ω_i = base^(−2i/d_model)); "
                "you gave every column j its own base^(−j/d_model).", _per_column_frequency),
        Mistake("the frequency is inverted: the angle is p / base^(2i/d_model) (the frequency shrinks with i), "
                "but you multiplied p by base^(2i/d_model).",
                lambda p, d, base=10000.0: _sinusoidal(p, d, base, omega=lambda t, dm, b: b ** (t / dm))),
        Mistake("the `base` argument is ignored: you always use 10000.",
                lambda p, d, base=10000.0: _reference_sinusoidal(p, d, 10000.0)),
        Mistake("you ignored the `positions` tensor and encoded 0, 1, …, T−1. Encode the given positions.",
                _ignores_positions),
    ],
    forbid=Forbid(modules=(ref,)),
)

check_sinusoidal_encoding = SINUSOIDAL.checker(
    """Check ``sinusoidal_encoding(positions, d_model, base=10000.0)`` -> (T, d_model) float32:
    PE[p, 2i] = sin(p ω_i), PE[p, 2i+1] = cos(p ω_i), ω_i = base^(−2i/d_model).""")


# --- Task 2: the shift matrix ---------------------------------------------------------------------

def _shift(k, d_model, base=10000.0, *, transpose=False, angle="k", exponent="2i", layout="interleaved",
           sin_terms=True):
    """M_k with one knob turned (float64)."""
    two_i = torch.arange(0, d_model, 2, dtype=_F64)  # (D/2,)
    omega = base ** (-(two_i if exponent == "2i" else two_i / 2) / d_model)  # (D/2,)
    phi = (k if angle == "k" else 1.0) * omega  # (D/2,)
    c, s = torch.cos(phi), torch.sin(phi) if sin_terms else torch.zeros_like(phi)
    m = torch.zeros(d_model, d_model, dtype=_F64)
    half = d_model // 2
    a = torch.arange(0, d_model, 2) if layout == "interleaved" else torch.arange(half)
    b = a + 1 if layout == "interleaved" else a + half
    # row vectors: (sin', cos') = (sin, cos) [[c, −s], [s, c]]
    m[a, a], m[a, b], m[b, a], m[b, b] = c, -s, s, c
    return m.T.contiguous() if transpose else m


def _shift_cases(gen) -> list[Case]:
    cases = []
    for k, d, base, note in [(1, 2, 10000.0, " (one pair)"), (1, 4, 10000.0, ""), (7, 8, 10000.0, ""),
                             (-20, 16, 10000.0, " (a negative shift)"), (0, 6, 10000.0, " (no shift)"),
                             (3, 12, 100.0, ", base 100"), (2.5, 10, 10000.0, " (a fractional shift)"),
                             (50, 64, 10000.0, "")]:
        kw = {"base": base} if base != 10000.0 else {}
        cases.append(Case(f"k = {k}, d_model {d}{note}", (k, d), kw))
    return cases


SHIFT_MATRIX = Task(
    name="sinusoidal_shift_matrix", reference=lambda k, d, base=10000.0: ref.sinusoidal_shift_matrix(k, d, base),
    cases=_shift_cases, seed=202, rtol=1e-7, atol=1e-9,
    output=TensorOutput("float64, as the task says"),
    mistakes=[
        Mistake("your matrix is the transpose of M_k (a rotation by −kω_i for row vectors): within each 2 × 2 "
                "block the signs of the sin terms are swapped. Check the block on the pair (sin pω, cos pω) "
                "with the addition formulas.", lambda k, d, base=10000.0: _shift(k, d, base, transpose=True)),
        Mistake("the angle of each block must be k·ω_i, the shift times the pair's frequency: your blocks "
                "turn by ω_i whatever k is.", lambda k, d, base=10000.0: _shift(k, d, base, angle="one")),
        Mistake("the frequency exponent: ω_i = base^(−2i/d_model), where 2i is the even column of pair i. "
                "You used i instead of 2i.", lambda k, d, base=10000.0: _shift(k, d, base, exponent="i")),
        Mistake("the blocks sit on the wrong coordinates: the encoding interleaves its pairs (columns 2i and "
                "2i+1), so block i occupies rows and columns 2i, 2i+1 — not i and i + d_model/2.",
                lambda k, d, base=10000.0: _shift(k, d, base, layout="half")),
        Mistake("the sin terms are missing: a shift turns each pair, it does not only scale it by cos(kω_i). "
                "Each 2 × 2 block is a rotation.", lambda k, d, base=10000.0: _shift(k, d, base, sin_terms=False)),
        Mistake("the `base` argument is ignored: you always use 10000.",
                lambda k, d, base=10000.0: _shift(k, d, 10000.0)),
    ],
    forbid=Forbid(modules=(ref,)),
    hint="Apply your matrix to a few rows of the encoding and compare with the encoding at p + k.",
)

check_sinusoidal_shift_matrix = SHIFT_MATRIX.checker(
    """Check ``sinusoidal_shift_matrix(k, d_model, base=10000.0)`` -> (d_model, d_model) float64 with
    PE(p + k) = PE(p) · M_k for every position p (row vectors).""")


# --- Task 3: apply_rope (find and fix the bug) ----------------------------------------------------

def _pairs(x, pairing):
    half = x.shape[-1] // 2
    if pairing == "half":
        return x[..., :half], x[..., half:]
    return x[..., 0::2], x[..., 1::2]


def _unpair(a, b, pairing):
    if pairing == "half":
        return torch.cat((a, b), dim=-1)
    return torch.stack((a, b), dim=-1).flatten(-2)


def _rope(x, cos, sin, pairing="half", *, pick=None, put=None, sin_sign=1.0, use_sin=True, swap=False):
    """RoPE with one knob turned: which pairs are read (pick), how results are written (put)."""
    a, b = _pairs(x, pick or pairing)
    c, s = (sin, cos) if swap else (cos, sin)
    s = s * sin_sign if use_sin else torch.zeros_like(s)
    return _unpair(a * c - b * s, a * s + b * c, put or pick or pairing).type_as(x)


def _mixed_tables(x, cos, sin, pairing="half"):
    """Full-width tables laid out for the other pairing, combined with this pairing's rotation."""
    half = x.shape[-1] // 2
    if pairing == "half":  # tables repeat_interleave'd (θ0 θ0 θ1 θ1 …) with rotate_half
        c, s = cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    else:  # tables concatenated (θ0 θ1 … θ0 θ1 …) with the pairwise rotation (−x[2i+1], x[2i])
        c, s = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
        rotated = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)
    return (x * c + rotated * s).type_as(x)


def _rope_case(gen, shape, pairing, *, start=0, per_sequence=False, dtype=_F64, theta=10000.0):
    x = torch.randn(shape, generator=gen, dtype=_F64).to(dtype)
    T, head_dim = shape[-2], shape[-1]
    if per_sequence:  # (B, T): each sequence at its own offset, tables (B, 1, T, D_h/2)
        offsets = torch.randint(0, 500, (shape[0], 1), generator=gen)
        positions = offsets + torch.arange(T)
        where = f"per-sequence positions (B, T) = {tuple(positions.shape)}"
    else:
        positions = torch.arange(start, start + T)
        where = f"positions {start}…{start + T - 1}"
    cos, sin = ref.rope_cos_sin(positions, head_dim, theta, dtype=dtype)
    label = f"x {describe(x)}, pairing {pairing!r}, {where}, cos/sin tables of shape {tuple(cos.shape)}"
    return Case(label, (x, cos, sin), {"pairing": pairing})


def _rope_cases(gen) -> list[Case]:
    return [
        _rope_case(gen, (4, 2), "half", start=1),
        _rope_case(gen, (2, 3, 6, 8), "half"),
        _rope_case(gen, (2, 3, 6, 8), "interleaved"),
        _rope_case(gen, (1, 2, 5, 16), "half", start=100),
        _rope_case(gen, (1, 2, 5, 16), "interleaved", start=100),
        _rope_case(gen, (2, 4, 7, 32), "half", per_sequence=True),
        _rope_case(gen, (2, 4, 7, 32), "interleaved", per_sequence=True),
        _rope_case(gen, (3, 9, 64), "interleaved", dtype=_F32, theta=500000.0),
        _rope_case(gen, (3, 9, 64), "half", dtype=_F32, theta=500000.0),
    ]


def _reads(wrong_pairs, when):
    def compute(x, c, s, pairing="half"):
        if pairing != when:
            raise ValueError("this mistake shows only for the other pairing")
        return _rope(x, c, s, pick=wrong_pairs)
    return compute


def _given_rope(x, cos, sin, pairing="half"):
    return _rope(x, cos, sin, pairing, put="half")


APPLY_ROPE = Task(
    name="apply_rope", reference=ref.apply_rope, cases=_rope_cases, seed=203, rtol=1e-4, atol=1e-5,
    mistakes=[
        Mistake("this is still what the given version computes: with pairing='interleaved' it reads the pairs "
                "(x[2i], x[2i+1]) correctly but writes the results back as [all first coordinates, all second "
                "coordinates]. Each rotated pair must go back to the places 2i, 2i+1 it came from.", _given_rope),
        Mistake("with pairing='half' you paired x[2i] with x[2i+1], the 'interleaved' pairing. 'half' pairs "
                "x[i] with x[i + D_h/2] (Hugging Face); check that each value of `pairing` selects its own "
                "pairs.", _reads("interleaved", when="half")),
        Mistake("with pairing='interleaved' you paired x[i] with x[i + D_h/2], the 'half' pairing. "
                "'interleaved' pairs x[2i] with x[2i+1] (Meta); check that each value of `pairing` selects its "
                "own pairs.", _reads("half", when="interleaved")),
        Mistake("the rotation goes the wrong way: your signs of the sin terms are flipped (a rotation by −θ). "
                "Position 0 cannot show this; a pair at position 1 can.",
                lambda x, c, s, pairing="half": _rope(x, c, s, pairing, sin_sign=-1.0)),
        Mistake("the sin terms are missing: multiplying by cos alone shrinks vectors instead of rotating them.",
                lambda x, c, s, pairing="half": _rope(x, c, s, pairing, use_sin=False)),
        Mistake("cos and sin are swapped: at position 0 (angle 0) the rotation must be the identity.",
                lambda x, c, s, pairing="half": _rope(x, c, s, pairing, swap=True)),
        Mistake("your tables and your rotation follow different pairings. For 'half', coordinates i and "
                "i + D_h/2 share the angle θ_i: widen the tables with torch.cat((cos, cos), -1), not "
                "repeat_interleave; for 'interleaved' it is the other way round.", _mixed_tables),
    ],
    forbid=Forbid(modules=(ref,)),
    hint="Rotate the vector (1, 2, 3, 4) at position 1 by hand for both pairings and compare line by line.",
)

_apply_rope_doc = (
    """Check ``apply_rope(x, cos, sin, pairing="half")``: every pair (a, b) of x becomes
    (a cos − b sin, a sin + b cos); pairs are (x[i], x[i + D_h/2]) for "half" and (x[2i], x[2i+1]) for
    "interleaved", written back where they came from; cos/sin have D_h/2 columns; x's dtype.""")


def _third_party() -> tuple[tuple, ...]:
    """Hugging Face's RoPE helpers, forbidden when they are imported (a student who calls them must have
    imported them; when they are not, watching them costs nothing)."""
    module = sys.modules.get("transformers.models.llama.modeling_llama")
    if module is None:
        return ()
    return tuple((getattr(module, name), f"transformers' `{name}`") for name in ("apply_rotary_pos_emb", "rotate_half")
                 if callable(getattr(module, name, None)))


def check_apply_rope(apply_rope) -> None:
    dataclasses.replace(APPLY_ROPE, forbid=Forbid(modules=(ref,), functions=_third_party())).check(apply_rope)


check_apply_rope.__doc__ = _apply_rope_doc
check_apply_rope.task = APPLY_ROPE


# --- Task 4: predictions --------------------------------------------------------------------------

def _geometric(n, start=1):
    return [2.0 ** (-8.0 * (h + start) / n) for h in range(n)]


def _true_predictions() -> dict:
    return {
        "alibi_12": ref.alibi_slopes(12, dtype=_F64).tolist(),
        # PE(p)·PE(p) = Σ_i sin² + cos² = D/2, at any p (here D = 128, p = 1000)
        "pe_self_dot": float(ref.sinusoidal_encoding(torch.tensor([1000]), 128, dtype=_F64)[0].pow(2).sum()),
        "rope_repeated_gap": 0.0,  # identical tokens: identical values, outputs equal whatever the weights
        "rope_period": 2 * math.pi,  # D_h = 2: one pair, θ_0 = 1 radian per position
    }


# Wrong predictions that reveal a specific misunderstanding, key by key (a list for alibi_12).
_WRONG = {
    "alibi_12": [
        (_geometric(12), "the plain geometric rule 2^(−8(h+1)/H) holds only when H is a power of two. For 12 "
                         "heads: the slopes of 8 heads, then extra ones from the 16-head sequence."),
        (_geometric(8) + _geometric(16)[1::2][:4], "the extra 4 heads take every other slope of the 16-head "
                                                    "sequence starting with its FIRST (its 1st, 3rd, 5th, 7th)."),
        (sorted(_geometric(8) + _geometric(16)[0::2][:4], reverse=True),
         "the slopes are not sorted: the 8 slopes of the 8-head rule come first, the 4 extra ones are "
         "appended after them."),
        (_geometric(8) + _geometric(16)[0::2][4:8], "the extra slopes are the FIRST four of every other "
                                                     "slope of the 16-head sequence."),
    ],
    "pe_self_dot": [
        (128.0, "each pair contributes sin² + cos² = 1, and there are D/2 pairs, not D coordinates' worth."),
        (1.0, "the encoding is not a unit vector: each of its pairs has length 1."),
        (64.0 ** 0.5, "that is the length ‖PE(p)‖; the dot product with itself is its square."),
    ],
    "rope_repeated_gap": [
        (None, "RoPE rotates queries and keys, so it changes the attention weights; what do the value vectors "
               "of a repeated token look like, and what is any weighted average of them?"),
    ],
    "rope_period": [
        (1.0, "θ_0 = 1 is the angle per position; the score repeats when the angle has turned a full circle."),
        (math.pi, "cos(α + Δ) repeats every 2π, not π."),
        (360.0, "the angles are in radians: one full turn is 2π radians."),
        (10000.0, "with D_h = 2 there is a single pair, i = 0, whose frequency is Θ^0 = 1 whatever Θ is."),
    ],
}

POSITION_PREDICTIONS = predictions_task(truth=_true_predictions, wrong=_WRONG, seed=204, rtol=2e-3, atol=1e-4)

check_position_predictions = POSITION_PREDICTIONS.checker(
    """Check ``predictions() -> dict``: ALiBi's 12 slopes, PE(p)·PE(p) at D = 128, the output gap of RoPE
    attention on a repeated token, and the period of a D_h = 2 RoPE score.""")
