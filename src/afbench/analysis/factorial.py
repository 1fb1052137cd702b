"""Which runs of a sweep's combination to distrust, by a rule that one outlier cannot dominate
(docs/statistics.md §8). A combination's runs are checked against each other
(:func:`outlier_runs`); its main effects are the verdict's (:mod:`afbench.verdict.effects`).

Units: step times in seconds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

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
