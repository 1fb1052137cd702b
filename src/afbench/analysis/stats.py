"""Descriptive statistics of step times (the verdict's statistics are :mod:`afbench.verdict`'s)."""

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


def finite_mean(values: Iterable[float | None]) -> float | None:
    """Mean of the finite entries of ``values`` (``None``, NaN and inf are left out, as a
    missing number in a table is), in the input unit; ``None`` when no entry is left."""
    array = np.asarray([v for v in values if v is not None], dtype=float)
    array = array[np.isfinite(array)]
    return float(array.mean()) if array.size else None
