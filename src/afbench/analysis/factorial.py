"""Statistics across the combinations of a sweep: which runs to distrust, and each swept
key's main effect, by methods that one outlier cannot dominate (docs/statistics.md §7).

A combination is summarised by the median of its runs' medians (:func:`afbench.analysis.
paired.run_statistic` per run), so one loaded repeat among three moves it little. Its runs
are checked against each other (:func:`outlier_runs`); a main effect is the median, over the
cells of the other keys, of the log time ratio between a value and the reference value, with
a sign-test interval (:func:`main_effect`).

Units: step times in seconds, effects in percent of the reference time, positive = faster:
``effect = (1 - exp(median ln ratio)) * 100``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: A run is an outlier when its median is this many robust standard deviations (1.4826 x MAD
#: of the log run medians of its repeats) away from their median ...
OUTLIER_ROBUST_Z = 3.0
#: ... and at least this far in ratio (repeats that agree within 1% must not flag a 2% one).
OUTLIER_MIN_LOG_DISTANCE = math.log(1.10)
#: Two repeats (no robust spread to speak of) disagree when they differ by more than this.
REPEATS_DISAGREE_LOG = math.log(1.25)
#: A run whose measured steps vary more than this (coefficient of variation, percent) is too
#: noisy to rank against others; the shared 2-core machine shows about 4%.
UNTRUSTED_CV_PCT = 10.0

MAIN_EFFECT_METHOD = "median over cells of the log time ratio, sign-test interval"

_MAD_TO_SD = 1.4826


def outlier_runs(run_medians_s: Sequence[float]) -> list[int]:
    """0-based indices of the runs whose median step time does not fit their repeats.

    Three or more runs: ``|ln(m_i / median(m))| > max(3 * 1.4826 * MAD(ln m), ln 1.10)``.
    Two runs: both when they differ by more than 25% (which one is off cannot be told). One
    run: none (nothing to check it against).

    Args:
        run_medians_s: per-run median step times (seconds), finite and > 0.

    Raises:
        ValueError: a value that is not finite and > 0.
    """
    m = np.asarray(list(run_medians_s), dtype=float)
    if m.size and (not np.all(np.isfinite(m)) or np.any(m <= 0)):
        raise ValueError(f"run medians must be finite and > 0, got {m.tolist()}")
    logs = np.log(m)
    if logs.size < 2:
        return []
    if logs.size == 2:
        return [0, 1] if abs(logs[1] - logs[0]) > REPEATS_DISAGREE_LOG else []
    center = float(np.median(logs))
    sd = _MAD_TO_SD * float(np.median(np.abs(logs - center)))
    limit = max(OUTLIER_ROBUST_Z * sd, OUTLIER_MIN_LOG_DISTANCE)
    return [int(i) for i in np.flatnonzero(np.abs(logs - center) > limit)]


def sign_test_interval(values: Sequence[float], level: float) -> tuple[float, float, float] | None:
    """Distribution-free interval of the median: ``[x_(k), x_(n-k+1)]`` of the sorted values,
    whose coverage is ``1 - 2 P(B <= k - 1)``, ``B ~ Binomial(n, 1/2)`` (the sign test's
    inversion; Conover, *Practical Nonparametric Statistics*, §3.2).

    The largest ``k`` whose coverage reaches ``level`` is taken; when even ``k = 1`` (min to
    max) falls short, that is returned with its own, lower coverage, which the report prints
    (4 values: 87.5%; 6 are needed for 95%).

    Returns:
        ``(low, high, coverage)``, or ``None`` for fewer than 2 values.

    Raises:
        ValueError: ``level`` outside (0, 1).
    """
    if not 0 < level < 1:
        raise ValueError(f"confidence level must be within (0, 1), got {level}")
    x = sorted(float(v) for v in values)
    n = len(x)
    if n < 2:
        return None

    def coverage(k: int) -> float:
        return 1.0 - 2.0 * sum(math.comb(n, i) for i in range(k)) / 2.0**n

    k = 1
    while k + 1 <= n // 2 and coverage(k + 1) >= level:
        k += 1
    return x[k - 1], x[n - k], coverage(k)


@dataclass(frozen=True)
class Effect:
    """A main effect: ``effect_pct`` (gain of the value over the reference value, percent,
    positive = faster) from ``n_cells`` cells, its sign-test interval ``ci_low_pct`` /
    ``ci_high_pct`` (``None`` below 2 cells) at ``coverage``."""

    effect_pct: float
    ci_low_pct: float | None
    ci_high_pct: float | None
    coverage: float | None
    n_cells: int
    method: str = MAIN_EFFECT_METHOD


def _gain(log_ratio: float) -> float:
    return (1.0 - math.exp(log_ratio)) * 100.0


def main_effect(cell_log_ratios: Sequence[float], level: float) -> Effect:
    """Main effect of setting a key to a value instead of its reference value.

    Args:
        cell_log_ratios: one ``ln(time with the value / time with the reference value)`` per
            cell (the other keys held fixed), from each combination's median step time.
        level: the interval's target confidence level.

    Raises:
        ValueError: no cell, a ratio that is not finite, or ``level`` outside (0, 1).
    """
    d = np.asarray(list(cell_log_ratios), dtype=float)
    if d.size == 0 or not np.all(np.isfinite(d)):
        raise ValueError(f"a main effect needs finite cell log ratios, got {d.tolist()}")
    interval = sign_test_interval(d.tolist(), level)
    if interval is None:
        return Effect(_gain(float(np.median(d))), None, None, None, int(d.size))
    low, high, cover = interval
    # a larger log ratio is a slower value: the gain's low bound comes from the high one
    return Effect(_gain(float(np.median(d))), _gain(high), _gain(low), cover, int(d.size))
