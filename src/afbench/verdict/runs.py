"""One run reduced to one number, and the runs that must not decide a comparison.

A run's statistic is the **median** of its measured step times (a load burst moves it little;
a mean moves with it). Steps far outside the run's own spread are flagged as bursts, counted,
and left out of that median: a flagged step does not decide the run's statistic (a compile
straggler, the window's first step still carrying compilation at 5x, kept in the median called
equal steady states SLOWER in 11-19% of 8-pair experiments; left out, 4-6%: bench/README.md).
Flagged steps that open the window (:attr:`RunStatistic.n_leading`) say the window started
before compilation or warm-up ended; the report says so. Whole runs are set aside, with the reason kept, when they were
contended (measured by the launcher or worker and passed in) or when they are outlier runs:
far slower than the other runs of the same side (:func:`outlier_runs`).

Step times are seconds (any common unit works); spreads are percent of the log scale
(``100 * sd(ln t)``, about the coefficient of variation for small spreads).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: A step is a burst when ``|ln(step / median)|`` exceeds this many robust standard deviations
#: of the run (1.4826 * MAD of the log step times) ...
BURST_ROBUST_Z = 5.0
#: ... and at least this relative distance (a run with almost no spread must not call a 2%
#: wobble a burst).
BURST_MIN_LOG_DISTANCE = math.log(1.25)
#: A run is an outlier run when its statistic is slower than its side's median run by more
#: than this many robust standard deviations of that side's runs ...
OUTLIER_ROBUST_Z = 5.0
#: ... and by at least this factor (1.75x): with a run-to-run spread of 15% (the worst this
#: project has measured on a shared VM) a normal run is past it about once in 10,000, while a
#: process that lost half its CPU (2x) is past it whenever the spread is below ~8%. At 1.5x the
#: screen set normal runs aside often enough at 15% spread to lift the A/A false-positive rate
#: of fixed rounds to 5.7-6.0% (bench/verdict_sim.py, bench/README.md §8).
OUTLIER_MIN_LOG_DISTANCE = math.log(1.75)
#: Runs per side needed before outlier runs are looked for (with 2, which one is the outlier?).
OUTLIER_MIN_RUNS = 3

MAD_TO_SD = 1.4826  # MAD of a normal sample times this estimates its standard deviation


@dataclass(frozen=True)
class RunStatistic:
    """Robust summary of one run's measured steps.

    Attributes:
        location_s: median of the measured step times, seconds.
        n_steps: measured steps.
        n_bursts: steps flagged as bursts (left out of ``location_s``).
        burst_indices: 0-based positions of the flagged steps in the input list.
        spread_pct: ``100 * 1.4826 * MAD(ln t)`` of all steps: about the step-time CV in percent.
        n_leading: flagged steps that open the window (indices 0, 1, ... all flagged): the
            window started while compilation or warm-up still ran.
    """

    location_s: float
    n_steps: int
    n_bursts: int
    burst_indices: tuple[int, ...]
    spread_pct: float
    n_leading: int = 0


def log_steps(step_times_s: Sequence[float], what: str) -> np.ndarray:
    """``ln`` of a run's step times as a float array.

    Raises:
        ValueError: no steps, or a step time that is not finite and > 0 (names ``what``).
    """
    array = np.asarray(list(step_times_s), dtype=float)
    if array.size == 0:
        raise ValueError(f"{what}: no measured steps")
    if not np.all(np.isfinite(array)) or np.any(array <= 0):
        raise ValueError(f"{what}: step times must be finite and > 0, got {array.tolist()}")
    return np.log(array)


def robust_sd(values: np.ndarray) -> float:
    """``1.4826 * MAD``: a standard deviation that outliers do not inflate."""
    return MAD_TO_SD * float(np.median(np.abs(values - np.median(values))))


def run_statistic(step_times_s: Sequence[float], what: str = "run") -> RunStatistic:
    """Median of one run's measured step times, the steps flagged as bursts left out.

    A step is flagged when ``|ln(t / median)| > max(5 * 1.4826 * MAD(ln t), ln 1.25)`` (median
    and MAD of all steps); at least half the steps are never flagged, so the median of the
    others always exists.

    Raises:
        ValueError: no steps, or a step time that is not finite and > 0 (names ``what``).
    """
    logs = log_steps(step_times_s, what)
    center = float(np.median(logs))
    threshold = max(BURST_ROBUST_Z * robust_sd(logs), BURST_MIN_LOG_DISTANCE)
    flagged = np.abs(logs - center) > threshold
    bursts = tuple(int(i) for i in np.flatnonzero(flagged))
    leading = int(np.argmin(flagged)) if bursts else 0  # the first unflagged step's index
    return RunStatistic(
        location_s=float(math.exp(np.median(logs[~flagged]))),
        n_steps=int(logs.size),
        n_bursts=len(bursts),
        burst_indices=bursts,
        spread_pct=robust_sd(logs) * 100.0,
        n_leading=leading,
    )


def outlier_runs(log_medians: Sequence[float]) -> list[int]:
    """Positions of outlier runs of one side: slower than the side's median run by more than
    ``max(5 * 1.4826 * MAD, ln 1.5)`` on the log scale (one-sided: a shared or throttled
    machine only ever makes a run slower). Empty below :data:`OUTLIER_MIN_RUNS` runs.

    The rule is the same for both sides and does not look at the other side, so setting a pair
    aside never favours either side; bench/verdict_sim.py measures what it does to the level
    and the power (Hampel's median/MAD outlier rule: F. R. Hampel, JASA 69, 1974).
    """
    x = np.asarray(list(log_medians), dtype=float)
    if x.size < OUTLIER_MIN_RUNS:
        return []
    center = float(np.median(x))
    threshold = max(OUTLIER_ROBUST_Z * robust_sd(x), OUTLIER_MIN_LOG_DISTANCE)
    return [int(i) for i in np.flatnonzero(x - center > threshold)]
