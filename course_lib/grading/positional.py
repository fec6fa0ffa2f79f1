"""Checkers for exercise 02 (embeddings and positions): the sinusoidal encoding, RoPE's rotation
with both pairings, and the ALiBi bias."""

from __future__ import annotations

import math
import sys

import torch

from .. import positional as ref
from ._core import Case, Forbidden, Mistake, check_function, describe

__all__ = ["check_sinusoidal_encoding", "check_apply_rope", "check_alibi_bias"]


def _third_party(module_name: str, names: list[str]) -> list[Forbidden]:
    """Forbid functions of a library only if it is already imported: a student who calls them must
    have imported it, and the checker then costs nothing when it is not."""
    module = sys.modules.get(module_name)
    if module is None:
        return []
    return [Forbidden(getattr(module, name), f"{module_name}.{name}") for name in names
            if callable(getattr(module, name, None)) and hasattr(getattr(module, name), "__code__")]


# --- Task 1: sinusoidal encoding ------------------------------------------------------------------

_SIN_RTOL, _SIN_ATOL = 1e-4, 1e-3  # float32 angles p·ω at p ≤ 1000 are off by ~1e-4 at most


def _sinusoidal(positions, d_model, base=10000.0, *, omega=None, layout="interleaved", swap=False):
    """The encoding with one knob turned: ``omega(two_i, d_model, base)`` sets the frequencies."""
    pos = positions.to(torch.float64)  # (T,)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (D/2,)
    w = base ** (-two_i / d_model) if omega is None else omega(two_i, d_model, base)
    angles = pos[:, None] * w  # (T, D/2)
    first, second = (angles.cos(), angles.sin()) if swap else (angles.sin(), angles.cos())
    if layout == "concatenated":
        return torch.cat((first, second), dim=-1)  # (T, D)
    return torch.stack((first, second), dim=-1).flatten(-2)  # (T, D)


def _per_column_frequency(positions, d_model, base=10000.0):
    """Column j uses base^(−j/D) (its own index) instead of the pair's 2i: odd columns are off."""
    pos = positions.to(torch.float64)[:, None]  # (T, 1)
    j = torch.arange(d_model, dtype=torch.float64)  # (D,)
    angles = pos * base ** (-j / d_model)  # (T, D)
    return torch.where(j % 2 == 0, angles.sin(), angles.cos())


def _reference_sinusoidal(positions, d_model, base=10000.0):
    return ref.sinusoidal_encoding(positions, d_model, base, dtype=torch.float64)


def check_sinusoidal_encoding(sinusoidal_encoding) -> None:
    """Check ``sinusoidal_encoding(positions, d_model, base=10000.0)`` -> (T, d_model):
    PE[p, 2i] = sin(p ω_i), PE[p, 2i+1] = cos(p ω_i), ω_i = base^(−2i/d_model)."""
    cases = [
        Case("positions 0…7 (int64, shape (8,)), d_model 4", (torch.arange(8), 4)),
        Case("positions 0…49 (int64, shape (50,)), d_model 16", (torch.arange(50), 16)),
        Case("positions 0…5 (int64, shape (6,)), d_model 2 (a single sin/cos pair)", (torch.arange(6), 2)),
        Case("positions 100…131 (int64, shape (32,)), d_model 32: the positions do not start at 0",
             (torch.arange(100, 132), 32)),
        Case("positions 0…19 (int64, shape (20,)), d_model 8, base 100", (torch.arange(20), 8), {"base": 100.0}),
        Case("unsorted positions (int64, shape (5,)), d_model 12", (torch.tensor([7, 0, 3, 999, 42]), 12)),
        Case("positions 0…63 (float64, shape (64,)), d_model 64", (torch.arange(64, dtype=torch.float64), 64)),
        Case("positions 0…9 (int64, shape (10,)), d_model 10 (D/2 is odd)", (torch.arange(10), 10)),
    ]

    def ignores_positions(positions, d_model, base=10000.0):
        return _reference_sinusoidal(torch.arange(positions.shape[0]), d_model, base)

    mistakes = [
        Mistake("sin and cos are swapped: even columns 2i must hold sin(p·ω_i) and odd columns 2i+1 "
                "cos(p·ω_i).", lambda p, d, base=10000.0: _sinusoidal(p, d, base, swap=True)),
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
                ignores_positions),
    ]
    forbidden = [
        Forbidden(ref.sinusoidal_encoding, "course_lib.positional.sinusoidal_encoding"),
        Forbidden(ref.sinusoidal_shift_matrix, "course_lib.positional.sinusoidal_shift_matrix"),
    ]
    check_function(sinusoidal_encoding, _reference_sinusoidal, cases, task="sinusoidal_encoding",
                   mistakes=mistakes, forbidden=forbidden, rtol=_SIN_RTOL, atol=_SIN_ATOL)


# --- Task 2: apply_rope ---------------------------------------------------------------------------

_ROPE_RTOL, _ROPE_ATOL = 1e-4, 1e-5


def _pairs(x, pairing):
    half = x.shape[-1] // 2
    if pairing == "half":
        return x[..., :half], x[..., half:]
    return x[..., 0::2], x[..., 1::2]


def _unpair(a, b, pairing):
    if pairing == "half":
        return torch.cat((a, b), dim=-1)
    return torch.stack((a, b), dim=-1).flatten(-2)


def _rope(x, cos, sin, pairing="half", *, pick=None, put=None, sin_sign=1.0, use_sin=True):
    """RoPE with one knob turned: which pairs are read (pick), how results are written (put)."""
    a, b = _pairs(x, pick or pairing)
    s = sin * sin_sign if use_sin else torch.zeros_like(sin)
    return _unpair(a * cos - b * s, a * s + b * cos, put or pick or pairing)


def _mixed_tables(x, cos, sin, pairing="half"):
    """Full-width tables laid out for the other pairing, combined with this pairing's rotation."""
    half = x.shape[-1] // 2
    if pairing == "half":  # tables repeat_interleave'd (θ0 θ0 θ1 θ1 …) with rotate_half
        c, s = cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    else:  # tables concatenated (θ0 θ1 … θ0 θ1 …) with the pairwise rotation (−x[2i+1], x[2i])
        c, s = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
        rotated = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)
    return x * c + rotated * s


def _rope_case(gen, shape, pairing, *, start=0, per_sequence=False, dtype=torch.float64, theta=10000.0):
    x = torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)
    T, head_dim = shape[-2], shape[-1]
    if per_sequence:  # (B, T): each sequence at its own offset, tables (B, 1, T, D_h/2)
        offsets = torch.randint(0, 500, (shape[0], 1), generator=gen)
        positions = offsets + torch.arange(T)
        where = f"per-sequence positions (B, T) = {tuple(positions.shape)}"
    else:
        positions = torch.arange(start, start + T)
        where = f"positions {start}…{start + T - 1}"
    cos, sin = ref.rope_cos_sin(positions, head_dim, theta, dtype=dtype)
    label = (f"x {describe(x)}, pairing {pairing!r}, {where}, cos/sin tables of shape "
             f"{tuple(cos.shape)}")
    return Case(label, (x, cos, sin), {"pairing": pairing})


def check_apply_rope(apply_rope) -> None:
    """Check ``apply_rope(x, cos, sin, pairing="half")``: every pair (a, b) of x becomes
    (a cos − b sin, a sin + b cos); pairs are (x[i], x[i + D_h/2]) for "half" and
    (x[2i], x[2i+1]) for "interleaved"; cos/sin have D_h/2 columns."""
    gen = torch.Generator().manual_seed(202)
    cases = [
        _rope_case(gen, (4, 2), "half", start=1),
        _rope_case(gen, (2, 3, 6, 8), "half"),
        _rope_case(gen, (2, 3, 6, 8), "interleaved"),
        _rope_case(gen, (1, 2, 5, 16), "half", start=100),
        _rope_case(gen, (1, 2, 5, 16), "interleaved", start=100),
        _rope_case(gen, (2, 4, 7, 32), "half", per_sequence=True),
        _rope_case(gen, (2, 4, 7, 32), "interleaved", per_sequence=True),
        _rope_case(gen, (3, 9, 64), "interleaved", dtype=torch.float32, theta=500000.0),
        _rope_case(gen, (3, 9, 64), "half", dtype=torch.float32, theta=500000.0),
    ]
    def reads(wrong_pairs, when):
        def compute(x, c, s, pairing="half"):
            if pairing != when:
                raise ValueError("this mistake shows only for the other pairing")
            return _rope(x, c, s, pick=wrong_pairs)
        return compute

    mistakes = [
        Mistake("with pairing='half' you paired x[2i] with x[2i+1], the 'interleaved' pairing. 'half' "
                "pairs x[i] with x[i + D_h/2] (Hugging Face); 'interleaved' pairs x[2i] with x[2i+1] "
                "(Meta). Check that each value of `pairing` selects its own pairs.",
                reads("interleaved", when="half")),
        Mistake("with pairing='interleaved' you paired x[i] with x[i + D_h/2], the 'half' pairing. "
                "'interleaved' pairs x[2i] with x[2i+1] (Meta); 'half' pairs x[i] with x[i + D_h/2] "
                "(Hugging Face). Check that each value of `pairing` selects its own pairs.",
                reads("half", when="interleaved")),
        Mistake("the rotation goes the wrong way: a pair (a, b) becomes (a cos − b sin, a sin + b cos); "
                "your signs of the sin terms are flipped (a rotation by −θ).",
                lambda x, c, s, pairing="half": _rope(x, c, s, pairing, sin_sign=-1.0)),
        Mistake("the sin terms are missing: multiplying by cos alone shrinks vectors instead of rotating "
                "them. Each pair needs (a cos − b sin, a sin + b cos).",
                lambda x, c, s, pairing="half": _rope(x, c, s, pairing, use_sin=False)),
        Mistake("with pairing='interleaved' you read the pairs (x[2i], x[2i+1]) correctly but wrote the "
                "results back as [all first coordinates, all second coordinates]. Put each rotated pair "
                "back at positions 2i and 2i+1 (torch.stack(..., dim=-1).flatten(-2)).",
                lambda x, c, s, pairing="half": _rope(x, c, s, pairing, put="half")),
        Mistake("your tables and your rotation follow different pairings. For 'half', coordinates i and "
                "i + D_h/2 share the angle θ_i: widen the tables with torch.cat((cos, cos), -1), not "
                "repeat_interleave; for 'interleaved' it is the other way round.", _mixed_tables),
    ]
    forbidden = [
        Forbidden(ref.apply_rope, "course_lib.positional.apply_rope"),
        Forbidden(ref.apply_rope_reference, "course_lib.positional.apply_rope_reference"),
        Forbidden(ref.rope_rotation_matrix, "course_lib.positional.rope_rotation_matrix"),
        *_third_party("transformers.models.llama.modeling_llama", ["apply_rotary_pos_emb", "rotate_half"]),
    ]
    check_function(apply_rope, ref.apply_rope, cases, task="apply_rope", mistakes=mistakes,
                   forbidden=forbidden, rtol=_ROPE_RTOL, atol=_ROPE_ATOL)


# --- Task 3: ALiBi bias ---------------------------------------------------------------------------

_ALIBI_RTOL, _ALIBI_ATOL = 1e-5, 1e-6


def _geometric(n, first_exponent=1):
    return [2.0 ** (-8.0 * (h + first_exponent) / n) for h in range(n)]


def _slopes(n_heads, *, rule="paper", first_exponent=1, extra_start=0):
    if rule == "geometric":  # the power-of-two formula used for every H
        return torch.tensor(_geometric(n_heads, first_exponent), dtype=torch.float64)
    closest = 2 ** math.floor(math.log2(n_heads))
    slopes = _geometric(closest, first_exponent)
    if closest < n_heads:
        slopes += _geometric(2 * closest, first_exponent)[extra_start::2][: n_heads - closest]
    return torch.tensor(slopes, dtype=torch.float64)


def _bias(slopes, seq_len, distance="abs"):
    i = torch.arange(seq_len, dtype=torch.float64)
    diff = i[:, None] - i[None, :]  # (T, T): i − j
    d = {"abs": diff.abs(), "i-j": diff, "j-i": -diff}[distance]
    return -slopes[:, None, None] * d  # (H, T, T)


def _reference_alibi(n_heads, seq_len):
    slopes = ref.alibi_slopes(n_heads, dtype=torch.float64)
    return ref.alibi_bias(slopes, seq_len)


def check_alibi_bias(alibi_bias) -> None:
    """Check ``alibi_bias(n_heads, seq_len)`` -> (n_heads, seq_len, seq_len): −m_h · |i − j| with the
    ALiBi paper's slopes, for any number of heads."""
    cases = [Case(f"n_heads {h}{note}, seq_len {t}", (h, t)) for h, t, note in [
        (8, 5, " (a power of two)"), (1, 4, " (a single head)"), (4, 6, ""), (16, 3, ""),
        (3, 5, " (not a power of two)"), (6, 7, " (not a power of two)"), (12, 4, " (not a power of two)"),
        (20, 3, " (not a power of two)"), (5, 1, ""),
    ]]

    def with_slopes(**how):
        return lambda n, t: _bias(_slopes(n, **how), t)

    mistakes = [
        Mistake("the sign: ALiBi *subtracts* m_h · |i − j|, so far-away keys get lower scores; your bias "
                "rewards distance.", lambda n, t: -_reference_alibi(n, t)),
        Mistake("the slopes start one step too early: the first head's slope is 2^(−8/H), not 2^0 = 1 "
                "(the exponent is −8(h+1)/H for head h = 0, 1, …).", with_slopes(first_exponent=0)),
        Mistake("for a number of heads that is not a power of two, the slopes are not the plain geometric "
                "sequence 2^(−8(h+1)/H). Take the slopes of the largest power of two P < H, then add "
                "every other slope of the 2P-head sequence, starting with its first.",
                with_slopes(rule="geometric")),
        Mistake("the extra heads (beyond the largest power of two P) take every other slope of the 2P-head "
                "sequence starting with its *first* ([0::2]); you started with its second.",
                with_slopes(extra_start=1)),
        Mistake("the upper triangle (keys after the query, j > i) has the wrong sign: use the distance "
                "|i − j|, so the bias is symmetric and never positive.",
                lambda n, t: _bias(_slopes(n), t, "i-j")),
        Mistake("the lower triangle (keys before the query, j < i) has the wrong sign: use the distance "
                "|i − j|, so the bias is symmetric and never positive.",
                lambda n, t: _bias(_slopes(n), t, "j-i")),
        Mistake("the slopes are in reverse order: head 0 has the steepest slope, 2^(−8/H).",
                lambda n, t: _bias(_slopes(n).flip(0), t)),
        Mistake("you sorted the slopes. For a number of heads that is not a power of two, the paper keeps "
                "the first P slopes (P the largest power of two below H) first and appends the extra ones "
                "after them, unsorted.", lambda n, t: _bias(_slopes(n).sort(descending=True).values, t)),
    ]
    forbidden = [
        Forbidden(ref.alibi_slopes, "course_lib.positional.alibi_slopes"),
        Forbidden(ref.alibi_bias, "course_lib.positional.alibi_bias"),
        *_third_party("transformers.models.bloom.modeling_bloom", ["_get_alibi_slopes", "build_alibi_tensor"]),
        *_third_party("transformers.models.mpt.modeling_mpt", ["build_mpt_alibi_tensor"]),
    ]
    check_function(alibi_bias, _reference_alibi, cases, task="alibi_bias", mistakes=mistakes,
                   forbidden=forbidden, rtol=_ALIBI_RTOL, atol=_ALIBI_ATOL)
