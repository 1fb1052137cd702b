"""Descriptive statistics of step times and a confidence interval of the gain.

Multi-round comparisons use :func:`t_interval_of_gain`: Welch's unequal-variance t with the
delta method for the ratio of means (no resampling, so results are deterministic). The
Student t quantile is computed here (regularised incomplete beta + bisection) so the module
needs only numpy.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from statistics import NormalDist

import numpy as np


def _as_array(values: Iterable[float], what: str = "values") -> np.ndarray:
    array = np.asarray(list(values), dtype=float)
    if array.size == 0:
        raise ValueError(f"{what} is empty")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{what} contains NaN or infinite entries: {array.tolist()}")
    return array


def percentile(values: Iterable[float], q: float) -> float:
    """The ``q``-th percentile (``0 <= q <= 100``), linear interpolation between order
    statistics (numpy's default, the same as Excel's PERCENTILE.INC).

    Raises:
        ValueError: ``values`` empty or non-finite, or ``q`` outside 0..100.
    """
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q must be within 0..100, got {q}")
    return float(np.percentile(_as_array(values), q))


def describe(values: Iterable[float]) -> dict[str, float]:
    """Summary of a sample (e.g. step times in seconds; outputs keep the input unit).

    Returns:
        ``{"n", "mean", "std", "cv", "min", "max", "p50", "p90"}``: ``n`` is an int, ``std``
        the sample standard deviation (ddof=1; NaN for n = 1), ``cv = std / mean`` as a
        fraction (NaN when the mean is 0 or n = 1), percentiles as in :func:`percentile`.

    Raises:
        ValueError: ``values`` is empty or holds NaN/inf.
    """
    array = _as_array(values)
    n = int(array.size)
    mean = float(array.mean())
    std = float(array.std(ddof=1)) if n > 1 else math.nan
    cv = std / mean if mean != 0 and not math.isnan(std) else math.nan
    return {
        "n": n,
        "mean": mean,
        "std": std,
        "cv": cv,
        "min": float(array.min()),
        "max": float(array.max()),
        "p50": float(np.percentile(array, 50)),
        "p90": float(np.percentile(array, 90)),
    }


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c = 1.0
    d = 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 1000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        step = d * c
        h *= step
        if abs(step - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """CDF of Student's t with ``df`` (> 0, may be fractional or ``inf``) degrees of freedom."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    if math.isinf(df):
        return NormalDist().cdf(t)
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_ppf(p: float, df: float) -> float:
    """Quantile of Student's t (inverse of :func:`t_cdf`), ``0 < p < 1``; bisection to ~1e-12."""
    if not 0 < p < 1:
        raise ValueError(f"probability must be within (0, 1), got {p}")
    if math.isinf(df):
        return NormalDist().inv_cdf(p)
    if p < 0.5:
        return -t_ppf(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


def t_interval_of_gain(
    baseline: Iterable[float], variant: Iterable[float], level: float = 0.95
) -> tuple[float, float, float]:
    """Gain of the variant over the baseline, in percent, with a two-sided CI.

    ``gain = (1 - mean(variant) / mean(baseline)) * 100`` (positive = variant faster). Its
    standard error comes from the delta method for the ratio of two independent means,
    ``se(R)^2 = s_v^2 / (n_v m_b^2) + m_v^2 s_b^2 / (n_b m_b^4)``, and the quantile from
    Student's t with Welch-Satterthwaite degrees of freedom over those two terms. When both
    samples have zero spread the interval collapses to the point.

    Args:
        baseline, variant: per-round measurements (e.g. mean step time per round, seconds),
            at least 2 each.
        level: confidence level, ``0 < level < 1``.

    Returns:
        ``(gain_pct, low_pct, high_pct)``.

    Raises:
        ValueError: fewer than 2 values on a side, NaN/inf values, ``mean(baseline) <= 0``
            or ``level`` outside (0, 1).
    """
    if not 0 < level < 1:
        raise ValueError(f"confidence level must be within (0, 1), got {level}")
    b = _as_array(baseline, "baseline")
    v = _as_array(variant, "variant")
    if b.size < 2 or v.size < 2:
        raise ValueError(
            f"need at least 2 values per side for an interval, got {b.size} and {v.size}"
        )
    mean_b, mean_v = float(b.mean()), float(v.mean())
    if mean_b <= 0:
        raise ValueError(f"baseline mean must be > 0, got {mean_b}")
    gain = (1.0 - mean_v / mean_b) * 100.0
    term_v = float(v.var(ddof=1)) / (v.size * mean_b**2)
    term_b = mean_v**2 * float(b.var(ddof=1)) / (b.size * mean_b**4)
    variance = term_v + term_b
    if variance == 0:
        return gain, gain, gain
    df = variance**2 / (term_v**2 / (v.size - 1) + term_b**2 / (b.size - 1))
    half_width = t_ppf(0.5 + level / 2.0, df) * math.sqrt(variance) * 100.0
    return gain, gain - half_width, gain + half_width
