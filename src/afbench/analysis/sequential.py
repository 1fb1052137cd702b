"""Adaptive repeats: when to stop adding baseline/variant pairs.

A group-sequential design with a Lan-DeMets alpha-spending function (Lan & DeMets,
"Discrete sequential boundaries for clinical trials", Biometrika 70, 1983), looked at after
every pair from ``min_pairs`` to ``max_pairs``. At look ``k`` (``n_k`` pairs, information
fraction ``t_k = n_k / max_pairs``) the two-sided error spent so far is

* O'Brien-Fleming type: ``alpha(t) = 2 - 2 Phi(z_{1-alpha/2} / sqrt(t))`` (the default:
  almost nothing is spent early, so the last boundary stays close to the fixed-n t quantile
  and the power at ``max_pairs`` is nearly that of a fixed design);
* Pocock type: ``alpha(t) = alpha ln(1 + (e - 1) t)``.

The test statistic is the paired t (optionally Yuen-trimmed) of the per-pair log ratios
(:mod:`afbench.analysis.paired`), whose variance is estimated from the pairs themselves, so
the usual normal boundaries do not apply at 3-8 pairs. The boundaries ``c_k`` for ``|T_k|``
are found by a seeded Monte Carlo of the same statistic's path under H0 with normal log
ratios (the path's law does not depend on the variance, so one simulation serves every
machine): ``c_1`` is exactly Student's t quantile at ``1 - alpha(t_1)/2`` with ``n_1 - 1``
degrees of freedom when the first look trims nothing, and each later ``c_k`` is the quantile
that makes the probability of first crossing at look ``k`` equal
``alpha(t_k) - alpha(t_{k-1})``. Results are cached per design.

The interval reported at every look is the repeated confidence interval
``mean(d) -+ c_k se`` (Jennison & Turnbull, "Interim analyses: the repeated confidence
interval approach", JRSS B 51, 1989; book "Group Sequential Methods with Applications to
Clinical Trials", 2000, ch. 9): all of them hold the true gain simultaneously with
probability ``level``, so the interval is valid whenever and for whatever reason the loop
stops, including a precision target that ends it before ``max_pairs``.

A stop that does not look at the log ratios (the time budget: it depends on how long the
runs take, which is the same for a gain and its mirror image) instead makes that look the
final analysis: the earlier looks keep their boundaries and this look spends all the error
left, ``alpha - alpha(t_{k-1})`` (:func:`stopped_boundary`; "under-running", Jennison &
Turnbull 2000, §7.2; Lan & DeMets 1983 allow the looks' number and timing to be unplanned
as long as they do not depend on the data). Without it a budget that ends the loop at the
first look would report the first O'Brien-Fleming interval, which at 3 pairs is about six
times as wide as the fixed-n one. Coverage stays ``level``: the true gain is missed only if
an earlier repeated interval missed it (probability at most ``alpha(t_{k-1})``) or, having
survived those, this look's interval misses it (the error left).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from afbench.analysis.paired import (
    DEFAULT_MDE_POWER,
    DEFAULT_MIN_GAIN_PCT,
    FASTER,
    SLOWER,
    GainEstimate,
    paired_gain,
    trimmed_t_parts,
)

OBRIEN_FLEMING = "obrien_fleming"
POCOCK = "pocock"
SPENDING_FUNCTIONS = (OBRIEN_FLEMING, POCOCK)

#: Why the loop stopped (or did not).
CONTINUE = "continue"
EXCLUDES_ZERO = "excludes_zero"
PRECISION_REACHED = "precision_reached"
MAX_PAIRS = "max_pairs"
TIME_BUDGET = "time_budget"

#: Defaults chosen with bench/stats_power.py (docs/statistics.md, "Choosing the defaults").
DEFAULT_MIN_PAIRS = 3
DEFAULT_MAX_PAIRS = 8
DEFAULT_PRECISION_PCT = 1.0
#: No trimming in the sequential rule: trimmed statistics at 5-8 pairs need much larger
#: boundaries (their tails are heavier), which cost more power than the trimming wins back
#: (bench/stats_power.py; docs/statistics.md §8).
DEFAULT_SEQUENTIAL_TRIM = 0.0
_N_SIMULATIONS = 400_000
_SEED = 20131  # fixed: boundaries must not change between calls or machines


@dataclass(frozen=True)
class SequentialDesign:
    """The stopping rule's settings.

    Attributes:
        level: confidence of the repeated intervals (two-sided), ``0 < level < 1``.
        min_pairs: first look, >= 3 (with 2 pairs the t statistic has 1 degree of freedom).
        max_pairs: last look, >= ``min_pairs``.
        precision_pct: stop when the interval's half-width is at most this, percent of
            baseline time, > 0; ``None`` turns the precision stop off.
        time_budget_s: stop when another pair, at the mean pair duration so far, would end
            past this many seconds of the loop; ``None`` for no budget.
        spending: ``"obrien_fleming"`` or ``"pocock"``.
        trim: fraction of pairs trimmed per end of the log ratios (Yuen), ``0 <= trim < 0.5``.
        min_gain_pct, mde_power: as in :func:`afbench.analysis.paired.paired_gain`.

    Raises:
        ValueError: on construction, for any setting outside the ranges above.
    """

    level: float = 0.95
    min_pairs: int = DEFAULT_MIN_PAIRS
    max_pairs: int = DEFAULT_MAX_PAIRS
    precision_pct: float | None = DEFAULT_PRECISION_PCT
    time_budget_s: float | None = None
    spending: str = OBRIEN_FLEMING
    trim: float = DEFAULT_SEQUENTIAL_TRIM
    min_gain_pct: float = DEFAULT_MIN_GAIN_PCT
    mde_power: float = DEFAULT_MDE_POWER

    def __post_init__(self) -> None:
        if not 0 < self.level < 1:
            raise ValueError(f"level must be within (0, 1), got {self.level}")
        if self.min_pairs < 3:
            raise ValueError(f"min_pairs must be >= 3, got {self.min_pairs}")
        if self.max_pairs < self.min_pairs:
            raise ValueError(
                f"max_pairs ({self.max_pairs}) must be >= min_pairs ({self.min_pairs})"
            )
        if self.precision_pct is not None and not self.precision_pct > 0:
            raise ValueError(f"precision_pct must be > 0, got {self.precision_pct}")
        if self.time_budget_s is not None and not self.time_budget_s > 0:
            raise ValueError(f"time_budget_s must be > 0, got {self.time_budget_s}")
        if self.spending not in SPENDING_FUNCTIONS:
            raise ValueError(
                f"spending must be one of {SPENDING_FUNCTIONS}, got {self.spending!r}"
            )
        if not 0 <= self.trim < 0.5:
            raise ValueError(f"trim must be within [0, 0.5), got {self.trim}")

    def boundaries(self) -> tuple[float, ...]:
        """Critical ``|t|`` at each look, for ``min_pairs, ..., max_pairs`` pairs."""
        return t_boundaries(
            self.min_pairs, self.max_pairs, 1.0 - self.level, self.spending, self.trim
        )

    def stopped_boundary(self, n_pairs: int) -> float:
        """Critical ``|t|`` of the final analysis when a time budget ends the loop at
        ``n_pairs`` (:func:`stopped_boundary`); the planned last boundary at ``max_pairs``.

        Raises:
            ValueError: ``n_pairs`` outside ``min_pairs..max_pairs``.
        """
        self.boundary(n_pairs)  # the same range check
        return stopped_boundary(
            self.min_pairs, self.max_pairs, n_pairs, 1.0 - self.level, self.spending, self.trim
        )

    def boundary(self, n_pairs: int) -> float:
        """Critical ``|t|`` at the look with ``n_pairs`` pairs.

        Raises:
            ValueError: ``n_pairs`` outside ``min_pairs..max_pairs``.
        """
        if not self.min_pairs <= n_pairs <= self.max_pairs:
            raise ValueError(
                f"no look at {n_pairs} pairs: the design looks at {self.min_pairs}.."
                f"{self.max_pairs}"
            )
        return self.boundaries()[n_pairs - self.min_pairs]


@dataclass(frozen=True)
class StopDecision:
    """The rule's answer after a pair.

    Attributes:
        stop: whether to stop adding pairs.
        reason: ``continue``, ``excludes_zero``, ``precision_reached``, ``max_pairs`` or
            ``time_budget``.
        n_pairs: pairs seen.
        estimate: the gain with its repeated confidence interval (``None`` before
            ``min_pairs``: no interval exists yet).
        message: one progress line, e.g. ``"pair 4/8: gain +3.10% [-2.02%, +8.21%]
            (95% repeated CI), continue"``.
    """

    stop: bool
    reason: str
    n_pairs: int
    estimate: GainEstimate | None
    message: str


def spent_alpha(t: float, alpha: float, spending: str) -> float:
    """Two-sided error spent by information fraction ``t`` (0 < t <= 1), Lan & DeMets 1983.

    Raises:
        ValueError: ``t`` outside (0, 1], ``alpha`` outside (0, 1) or an unknown spending.
    """
    if not 0 < t <= 1:
        raise ValueError(f"information fraction must be within (0, 1], got {t}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be within (0, 1), got {alpha}")
    if spending == OBRIEN_FLEMING:
        # scipy costs ~0.8 s to import: only when a quantile is needed
        from scipy import stats

        return float(2.0 - 2.0 * stats.norm.cdf(stats.norm.ppf(1 - alpha / 2) / math.sqrt(t)))
    if spending == POCOCK:
        return alpha * math.log(1.0 + (math.e - 1.0) * t)
    raise ValueError(f"spending must be one of {SPENDING_FUNCTIONS}, got {spending!r}")


@lru_cache(maxsize=4)
def _h0_t_paths(min_pairs: int, max_pairs: int, trim: float) -> tuple[np.ndarray, ...]:
    """``|T_k|`` at looks ``min_pairs..max_pairs`` of the seeded H0 paths (normal log ratios),
    one array of ``_N_SIMULATIONS`` per look, and the looks' degrees of freedom."""
    d = np.random.default_rng(_SEED).standard_normal((_N_SIMULATIONS, max_pairs))
    out = []
    for n in range(min_pairs, max_pairs + 1):
        center, se, df = trimmed_t_parts(d[:, :n], trim)
        out.append((np.abs(center) / np.maximum(se, 1e-300), int(df[0])))
    return tuple(out)


@lru_cache(maxsize=32)
def t_boundaries(
    min_pairs: int,
    max_pairs: int,
    alpha: float,
    spending: str = OBRIEN_FLEMING,
    trim: float = 0.0,
) -> tuple[float, ...]:
    """Critical values of ``|T_k|`` at looks ``n_k = min_pairs..max_pairs``, for a two-sided
    error ``alpha`` spent by ``spending``; ``T_k`` is the paired t of the first ``n_k`` log
    ratios, trimmed by ``trim`` per end as in :func:`afbench.analysis.paired.trimmed_t_parts`.

    Seeded Monte Carlo (400,000 paths, fixed seed: deterministic; cached). The first
    boundary is exact (scipy's t quantile) when that look trims nothing. Boundaries are
    floored at the fixed-n quantile at ``alpha``: a look never demands less than a single
    test at the full level would.

    Raises:
        ValueError: ``min_pairs < 2``, ``max_pairs < min_pairs``, ``alpha`` outside (0, 1),
            ``trim`` outside [0, 0.5).
    """
    if min_pairs < 2 or max_pairs < min_pairs:
        raise ValueError(f"need 2 <= min_pairs <= max_pairs, got {min_pairs}, {max_pairs}")
    # scipy costs ~0.8 s to import: only when a quantile is needed
    from scipy import stats

    looks = list(range(min_pairs, max_pairs + 1))
    spent = [spent_alpha(n / max_pairs, alpha, spending) for n in looks]
    first_trims = math.floor(trim * min_pairs + 1e-9) > 0
    if len(looks) == 1 and not first_trims:
        return (float(stats.t.ppf(1 - spent[0] / 2, min_pairs - 1)),)
    alive = np.ones(_N_SIMULATIONS, dtype=bool)
    bounds: list[float] = []
    for k, (t_abs, df) in enumerate(_h0_t_paths(min_pairs, max_pairs, trim)):
        floor = float(stats.t.ppf(1 - alpha / 2, df))
        if k == 0 and not first_trims:
            c = float(stats.t.ppf(1 - spent[0] / 2, df))
        else:
            # first crossings allowed at this look: the newly spent error, as paths
            n_cross = int(round((spent[k] - (spent[k - 1] if k else 0.0)) * _N_SIMULATIONS))
            survivors = np.sort(t_abs[alive])[::-1]
            c = float(survivors[n_cross]) if 0 <= n_cross < survivors.size else floor
        c = max(c, floor)
        bounds.append(c)
        alive &= t_abs <= c
    return tuple(bounds)


@lru_cache(maxsize=64)
def stopped_boundary(
    min_pairs: int,
    max_pairs: int,
    n_pairs: int,
    alpha: float,
    spending: str = OBRIEN_FLEMING,
    trim: float = 0.0,
) -> float:
    """Critical value of ``|T_k|`` when a data-independent stop (a time budget) makes the
    look at ``n_pairs`` the final analysis: the looks before it keep the boundaries of
    :func:`t_boundaries`, and this one is the quantile at which the probability under H0 of
    surviving them and then crossing here is ``alpha - alpha(t_{k-1})``, the error not yet
    spent (Jennison & Turnbull 2000, §7.2). Same seeded Monte Carlo as :func:`t_boundaries`;
    exactly Student's t quantile at ``1 - alpha/2`` when ``n_pairs == min_pairs`` and that
    look trims nothing (nothing was spent before it); the planned last boundary at
    ``max_pairs``. Never below the fixed-n quantile at ``alpha``.

    Raises:
        ValueError: as :func:`t_boundaries`, or ``n_pairs`` outside ``min_pairs..max_pairs``.
    """
    bounds = t_boundaries(min_pairs, max_pairs, alpha, spending, trim)
    if not min_pairs <= n_pairs <= max_pairs:
        raise ValueError(f"no look at {n_pairs} pairs: the design looks at {min_pairs}..{max_pairs}")
    if n_pairs == max_pairs:
        return bounds[-1]
    from scipy import stats  # ~0.8 s to import: only when a quantile is needed

    first_trims = math.floor(trim * min_pairs + 1e-9) > 0
    if n_pairs == min_pairs and not first_trims:
        return float(stats.t.ppf(1 - alpha / 2, min_pairs - 1))
    paths = _h0_t_paths(min_pairs, max_pairs, trim)
    alive = np.ones(_N_SIMULATIONS, dtype=bool)
    for (earlier, _), c in zip(paths[: n_pairs - min_pairs], bounds):
        alive &= earlier <= c
    t_abs, df = paths[n_pairs - min_pairs]
    left = alpha - spent_alpha((n_pairs - 1) / max_pairs, alpha, spending) if n_pairs > min_pairs \
        else alpha
    n_cross = int(round(left * _N_SIMULATIONS))
    survivors = np.sort(t_abs[alive])[::-1]
    floor = float(stats.t.ppf(1 - alpha / 2, df))
    c = float(survivors[n_cross]) if 0 <= n_cross < survivors.size else floor
    return max(c, floor)


def _progress(
    n: int, design: SequentialDesign, estimate: GainEstimate | None, reason: str
) -> str:
    head = f"pair {n}/{design.max_pairs}: "
    if estimate is None:
        return head + f"no interval before {design.min_pairs} pairs, continue"
    kind = "CI, final analysis" if reason == TIME_BUDGET else "repeated CI"
    body = (
        f"gain {estimate.gain_pct:+.2f}% [{estimate.ci_low_pct:+.2f}%, "
        f"{estimate.ci_high_pct:+.2f}%] ({estimate.level * 100:g}% {kind})"
    )
    if reason == EXCLUDES_ZERO:
        word = f"stop: interval excludes 0 ({estimate.decision})"
    elif reason == PRECISION_REACHED:
        word = f"stop: half-width <= {design.precision_pct:g}%"
    elif reason == MAX_PAIRS:
        word = "stop: max pairs reached"
    elif reason == TIME_BUDGET:
        word = "stop: time budget would be exceeded by another pair (the error left is spent here)"
    else:
        word = "continue"
    return head + body + ", " + word


def sequential_estimate(
    baseline_runs: Sequence[Sequence[float]],
    variant_runs: Sequence[Sequence[float]],
    design: SequentialDesign,
    reason: str = CONTINUE,
) -> GainEstimate:
    """The gain at the look of ``len(baseline_runs)`` pairs: the repeated confidence interval
    at that look's boundary, or, when ``reason`` is ``time_budget`` (a stop that did not look
    at the data), the final analysis at :func:`stopped_boundary`, which spends the error left.
    ``method`` names the design and, for a budget stop, says so.

    Raises:
        ValueError: pairs outside ``min_pairs..max_pairs``, unequal numbers of runs, or a run
            that :func:`afbench.analysis.paired.run_statistic` rejects.
    """
    n = len(baseline_runs)
    final = reason == TIME_BUDGET
    method = (
        f"group-sequential paired log-ratio t (Yuen, trim {design.trim:g}) of per-run medians, "
        f"{design.spending.replace('_', '-')} alpha spending (Lan-DeMets), "
        f"repeated CI (Jennison-Turnbull), looks at {design.min_pairs}..{design.max_pairs} pairs"
    )
    if final and n < design.max_pairs:
        method += f"; time budget ended it at {n} pairs: final analysis spends the error left"
    return paired_gain(
        baseline_runs,
        variant_runs,
        design.level,
        min_gain_pct=design.min_gain_pct,
        mde_power=design.mde_power,
        critical_value=design.stopped_boundary(n) if final else design.boundary(n),
        trim=design.trim,
        method=method,
    )


def sequential_decision(
    baseline_runs: Sequence[Sequence[float]],
    variant_runs: Sequence[Sequence[float]],
    design: SequentialDesign,
    *,
    elapsed_s: float | None = None,
) -> StopDecision:
    """Stop or continue, after the latest pair.

    Stops, in this order of precedence, when the repeated confidence interval excludes 0
    (``excludes_zero``), when its half-width is at most ``precision_pct``
    (``precision_reached``), at ``max_pairs`` (``max_pairs``), or when another pair would
    overrun ``time_budget_s`` at the mean pair duration ``elapsed_s / n`` (``time_budget``).
    The estimate is :func:`sequential_estimate`'s: the repeated CI at the boundary of this
    look, or for a budget stop the final analysis that spends the error left; its decision
    follows :func:`afbench.analysis.paired.decide`.

    Args:
        baseline_runs, variant_runs: per-repeat measured step times (seconds) so far, paired
            by repeat index, in the order the pairs ran.
        design: the rule's settings.
        elapsed_s: wall seconds since the first pair started (for the time budget).

    Raises:
        ValueError: more pairs than ``design.max_pairs``, unequal numbers of runs, no pairs,
            or a run that :func:`afbench.analysis.paired.run_statistic` rejects.
    """
    n = len(baseline_runs)
    if n != len(variant_runs):
        raise ValueError(
            f"paired design needs as many baseline as variant runs, got {n} and "
            f"{len(variant_runs)}"
        )
    if n < 1:
        raise ValueError("no pairs yet")
    if n > design.max_pairs:
        raise ValueError(f"{n} pairs exceed the design's max_pairs={design.max_pairs}")
    over_budget = (
        design.time_budget_s is not None
        and elapsed_s is not None
        and elapsed_s * (n + 1) / n > design.time_budget_s
    )
    if n < design.min_pairs:
        estimate = None
        reason = TIME_BUDGET if over_budget else CONTINUE
    else:
        estimate = sequential_estimate(baseline_runs, variant_runs, design)
        if estimate.decision in (FASTER, SLOWER):
            reason = EXCLUDES_ZERO
        elif design.precision_pct is not None and estimate.half_width_pct <= design.precision_pct:
            reason = PRECISION_REACHED
        elif n >= design.max_pairs:
            reason = MAX_PAIRS
        elif over_budget:
            reason = TIME_BUDGET
            estimate = sequential_estimate(baseline_runs, variant_runs, design, reason)
        else:
            reason = CONTINUE
    return StopDecision(
        stop=reason != CONTINUE,
        reason=reason,
        n_pairs=n,
        estimate=estimate,
        message=_progress(n, design, estimate, reason),
    )
