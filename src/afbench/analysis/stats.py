"""Descriptive statistics of step times and a confidence interval of the gain.

Multi-round comparisons use :func:`t_interval_of_gain`: Welch's unequal-variance t with the
delta method for the ratio of means (no resampling, so results are deterministic). The
Student t distribution comes from scipy.stats, imported only when an interval is computed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

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


def t_cdf(t: float, df: float) -> float:
    """CDF of Student's t with ``df`` (> 0, may be fractional or ``inf``) degrees of freedom
    (scipy.stats.t)."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    from scipy import stats as scipy_stats  # ~0.8 s to import: only when an interval is asked for

    return float(scipy_stats.t.cdf(t, df))


def t_ppf(p: float, df: float) -> float:
    """Quantile of Student's t, ``0 < p < 1`` (scipy.stats.t)."""
    if not 0 < p < 1:
        raise ValueError(f"probability must be within (0, 1), got {p}")
    from scipy import stats as scipy_stats  # scipy: ~0.8 s, only when an interval is asked for

    return float(scipy_stats.t.ppf(p, df))


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


def finite_mean(values: Iterable[float | None]) -> float | None:
    """Mean of the finite entries of ``values`` (``None``, NaN and inf are left out, as a
    missing number in a table is), in the input unit; ``None`` when no entry is left."""
    array = np.asarray([v for v in values if v is not None], dtype=float)
    array = array[np.isfinite(array)]
    return float(array.mean()) if array.size else None
