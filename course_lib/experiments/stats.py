"""Summaries of seeded runs: the mean, the spread and a 95 % interval, and differences between rows.

For n final losses x_1 … x_n of one row (one per seed),

    mean  x̄ = Σ x_i / n
    s     = √( Σ (x_i − x̄)² / (n − 1) )                 (sample standard deviation: the spread)
    95 %  x̄ ± t_{0.975, n−1} · s / √n                    (Student's t interval for the mean)

t_{0.975, n−1} is Student's quantile (12.71 for n = 2, 4.30 for n = 3, 2.78 for n = 5): with few seeds
the interval is wide, which is the honest answer. Two rows trained with the same seeds see the same
batches in the same order (the batch generator depends on the seed only), so they are compared
*paired*: the interval of the per-seed differences d_i = x_i(A) − x_i(B). A difference is *found*
when that interval excludes 0; otherwise none was found — which is not the same as "they are equal".

No SciPy: t's distribution function is the regularized incomplete beta function,
F(t) = 1 − ½ I_{ν/(ν+t²)}(ν/2, ½) for t ≥ 0, evaluated by its continued fraction (Lentz's method) and
inverted by bisection.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["t_quantile", "summarize", "paired_difference", "interpolate_at"]


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for numerator in (m * (b - m) * x / ((qam + m2) * (a + m2)),
                          -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), 0 ≤ x ≤ 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                 + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def _t_cdf(t: float, df: float) -> float:
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))  # P(T > |t|)
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: int) -> float:
    """The p-quantile of Student's t distribution with ``df`` degrees of freedom (0.5 < p < 1)."""
    if not 0.5 < p < 1.0:
        raise ValueError(f"p ({p}) must lie in (0.5, 1)")
    if isinstance(df, bool) or not isinstance(df, int) or df < 1:
        raise ValueError(f"df ({df}) must be a positive int")
    lo, hi = 0.0, 1.0
    while _t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _t_cdf(mid, df) < p else (lo, mid)
    return 0.5 * (lo + hi)


def summarize(values: Sequence[float], confidence: float = 0.95) -> dict:
    """``{"n", "mean", "std", "min", "max", "low", "high"}`` of the values (one per seed): the mean,
    the sample standard deviation, the range, and the t interval for the mean at ``confidence``.
    With one value the spread and interval are None (nothing to say); a value that is not finite
    (a diverged run) makes the mean and interval NaN, so it cannot pass for a result."""
    values = [float(v) for v in values]
    if not values:
        raise ValueError("values must hold at least one number")
    n = len(values)
    mean = sum(values) / n
    out = {"n": n, "mean": mean, "min": min(values), "max": max(values),
           "std": None, "low": None, "high": None}
    if n >= 2:
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
        half = t_quantile(0.5 + confidence / 2.0, n - 1) * std / math.sqrt(n)
        out.update(std=std, low=mean - half, high=mean + half)
    return out


def paired_difference(a: Sequence[float], b: Sequence[float], confidence: float = 0.95) -> dict:
    """The per-seed differences a_i − b_i summarized as by :func:`summarize`, plus ``"found"``:
    True when the interval excludes 0 (a difference at this confidence), False when it does not,
    None when there are too few pairs to say."""
    if len(a) != len(b):
        raise ValueError(f"a and b must pair up seed by seed, got {len(a)} and {len(b)} values")
    out = summarize([x - y for x, y in zip(a, b)], confidence)
    out["found"] = None if out["low"] is None else bool(out["low"] > 0 or out["high"] < 0)
    return out


def interpolate_at(xs: Sequence[float], ys: Sequence[float], x: float) -> float:
    """y at ``x`` on the piecewise-linear curve through (xs, ys) (xs increasing); NaN outside it.
    Used to read a run's validation loss at a given wall-clock time."""
    if len(xs) != len(ys) or not xs:
        raise ValueError("xs and ys must be non-empty and of equal length")
    if x < xs[0] or x > xs[-1]:
        return math.nan
    for (x0, y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):
        if x0 <= x <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return float(ys[-1])
