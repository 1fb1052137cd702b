"""The gain of a variant over the baseline from paired runs: :func:`compare_runs` -> :class:`Speed`.

Pairing: ``baseline[k]`` and ``variant[k]`` ran adjacently (round ``k``), so slow drift of the
machine moves both alike and cancels in ``d_k = ln(variant median / baseline median)``. Pairs
whose runs were contended (measured, passed in) or that hold an outlier run
(:func:`afbench.verdict.runs.outlier_runs`) are set aside, each with its reason; the rest decide.

No screen hides a cost (:func:`afbench.verdict.screen.screen_check`): a user pays for every
run, stalled or not, so a decision on the screened pairs stands only when putting back the
outlier runs that count against it leaves it standing (FASTER: the variant's; SLOWER: the
baseline's; NO_GAIN: every one). Otherwise the interval of every uncontended pair decides when
it is FASTER or SLOWER (a variant whose stalls make it slower is SLOWER), else INCONCLUSIVE
naming the stalls.
Measured: a variant stalling 2x in 20% of its runs was NO_GAIN in 9-59% of experiments and a
variant 10% faster in typical runs with those stalls FASTER in 95-98% without this rule
(bench/README.md, "Stalls and stragglers"). A sensitivity analysis in the sense of Kalibera &
Jones (2013, section 7): the estimand is the time of the runs the user would run.

The interval of the mean log ratio, by design:

* **3 or more pairs**: Student's paired t on the pairs' log ratios, ``n - 1`` df (pairs, not
  steps, are the independent units: Kalibera & Jones, "Rigorous Benchmarking in Reasonable
  Time", ISMM 2013). Exact under normal log ratios; nothing is trimmed, so no level is lost at
  small ``n`` and no power is lost against the plain paired t (issue 20's audit found Yuen's 20%
  trimming at 6.3-8.7% false positives and less power).
* **1 or 2 pairs**: a pair's own spread is unknown (1 pair) or rests on 1 df (2 pairs). With a
  host calibration (``run_spread_pct``: the standard deviation of a run's log statistic between
  processes on this host, for this kind of run, on ``run_spread_df`` df), the variance of one
  pair is ``2 * run_spread^2``, pooled with the pairs' own on ``n - 1 + run_spread_df`` df.
  The calibration decides only when the runs fit it (``RunSpread.fit_of``: each run's step
  time against what its kind of run took when calibrated); runs that do not (the host changed
  since: a host twice as spread as when calibrated made one round call an A/A different 24%
  of the time) give INCONCLUSIVE with the reason ``calibration_stale``.
  Without one, no FASTER/SLOWER is possible: the steps of one run cannot show how much a whole
  run moves between processes (an A/A pair was called different 2-43% of the time by a
  step-level interval), so the decision is INCONCLUSIVE with the reason ``uncalibrated`` and
  the point gain only. Two uncalibrated pairs give the plain paired t on 1 df.

Gains are percent of the baseline's time, positive = variant faster:
``gain = (1 - exp(d)) * 100``; the interval maps exactly through that transformation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from afbench.verdict.power import claim_power, mde_pct, pairs_for_mde
from afbench.verdict.runs import RunStatistic, outlier_runs, run_statistic
from afbench.verdict.words import INCONCLUSIVE, decide

#: Default smallest gain that matters, percent: NO_GAIN means the interval lies within +-2%.
DEFAULT_MIN_GAIN_PCT = 2.0
#: Pairs from which the pairs' own spread decides alone (below it a calibration is used).
OWN_SPREAD_MIN_PAIRS = 3

ONE_ROUND = "one_round"
FIXED = "fixed"
SEQUENTIAL = "sequential"

#: Why a pair was set aside.
CONTENDED = "contended"
OUTLIER = "outlier"
#: Why a comparison has no interval.
UNCALIBRATED = "uncalibrated"
#: Contended runs were kept (verdict.contention=keep) but fell on one side of a pair: the
#: contention, not the switch, would decide (issue 34: +78.84..+97.17% for a +13% effect).
ONE_SIDED_CONTENTION = "one_sided_contention"
#: A calibration too small, or one that saw outlier runs, does not decide one round.
CALIBRATION_UNFIT = "calibration_unfit"
#: The runs do not fit their calibration (the host or the workload changed since it).
CALIBRATION_STALE = "calibration_stale"
NO_PAIRS_LEFT = "no_pairs_left"

#: Rounds were run but set-aside pairs left one, and no calibration can stand in for its spread.
ONE_PAIR_LEFT = "one_pair_left"
#: An unpaired comparison (:func:`afbench.verdict.compare_groups`) with a side whose every run
#: was set aside.
NO_RUNS_LEFT = "no_runs_left"

PAIRED_T = "paired t of per-run median log ratios (Student, n-1 df)"
CALIBRATED = "paired log ratios with the host calibration's run-to-run spread (pooled variance)"


@dataclass(frozen=True)
class SetAside:
    """A pair left out of the verdict. ``pair``: 1-based round; ``side``: ``baseline``,
    ``variant`` or ``both``; ``reason``: ``contended`` or ``outlier``; ``detail``: what was
    measured (e.g. the contention reasons), for the report: opaque to the verdict (a string,
    or the caller's structured record of it). In an unpaired comparison
    (:func:`afbench.verdict.compare_groups`) a run left out: ``pair`` is its 1-based index
    within its side, ``side`` ``history`` or ``newest``."""

    pair: int
    side: str
    reason: str
    detail: Any = ""


@dataclass(frozen=True)
class Speed:
    """The verdict on speed: the gain, its interval and what they let us say.

    Attributes:
        decision: ``FASTER`` | ``SLOWER`` | ``NO_GAIN`` | ``INCONCLUSIVE``
            (:func:`afbench.verdict.words.decide`).
        gain_pct: point estimate, percent of the baseline's time, positive = variant faster:
            ``(1 - variant/baseline) * 100`` of the geometric mean of the pairs' median ratios;
            ``None`` when no pair is left.
        ci_low_pct, ci_high_pct: the interval at ``level``, percent; ``None`` without one.
        level: confidence of the interval (a sweep passes its per-comparison level).
        mde_pct: minimum detectable effect at ``level`` and ``mde_power``, percent
            (:mod:`afbench.verdict.power`: noncentral t, median-unbiased spread, allowing for
            5% of runs being 2x outliers the screen cannot see); ``None`` without an interval.
        mde_power: the power of ``mde_pct``.
        min_gain_pct: the smallest gain that matters (the NO_GAIN margin).
        n_pairs: pairs that decided.
        n_pairs_run: pairs measured, set-aside ones included.
        method: the interval's method in words (the report translates the design, not this).
        design: ``one_round`` | ``fixed`` | ``sequential``.
        df: degrees of freedom of the critical value (``inf`` for none).
        critical_value: the multiplier of the standard error (t quantile or boundary).
        spread_pct: standard deviation of one pair's log ratio used, ``100 * sd``.
        spread_source: ``pairs``, ``calibration`` or ``pairs+calibration``; ``None``.
        run_spread_pct: the host calibration's run-to-run spread used, or ``None``.
        set_aside: the pairs left out and why (unpaired, design ``history``: the runs, by
            side ``history`` or ``newest`` and 1-based run index).
        no_interval_reason: ``uncalibrated``, ``calibration_unfit``, ``calibration_stale``
            (the runs do not fit the calibration: ``calibration_shift_pct``), ``no_pairs_left``,
            ``one_pair_left`` (rounds were run, set-aside pairs left one and no calibration is
            known) or (unpaired) ``no_runs_left`` when there is no interval.
        below_min_gain: FASTER whose interval's upper end is below ``min_gain_pct``: faster, but
            by less than the gain that matters.
        pairs_for_min_gain: pairs a fixed design would need for an MDE of ``min_gain_pct`` at
            this spread (:func:`afbench.verdict.power.pairs_for_mde`); ``None`` without a spread.
        pairs_for_gain: an undecided interval whose gain is beyond the margin but below the
            MDE: the pairs a fixed design would need for an MDE of the gain seen (``|gain_pct|``)
            at this spread, what deciding an effect of this size would take; else ``None``.
        stop_reason: why a sequential design stopped (``None`` otherwise).
        n_steps_baseline, n_steps_variant, n_bursts_baseline, n_bursts_variant: measured steps
            and steps flagged as bursts (counted, left out of their run's median) over the
            deciding pairs.
        n_leading_baseline, n_leading_variant: flagged steps that opened a deciding run's
            window (the window started before compilation or warm-up ended).
        screen: ``None`` when no outlier run was set aside; else ``holds`` (the decision stands
            with the outlier runs that count against it put back), ``all_runs`` (the interval of
            every uncontended pair decided: the outlier runs changed the screened answer) or
            ``changes_answer`` (INCONCLUSIVE: the outlier runs change the answer)
            (:func:`afbench.verdict.screen.screen_check`).
        n_outliers_baseline, n_outliers_variant: runs of each side set aside as outlier runs.
        with_outliers_low_pct, with_outliers_high_pct: the interval with the outlier runs put
            back that :func:`screen_check` judged (equal to the interval under ``all_runs``).
        baseline_location_s, variant_location_s: geometric mean of the deciding runs' median
            step times, seconds, per side (what a calibration keeps of its runs); ``None``
            without a deciding pair.
        calibration_shift_pct: when a calibration's run locations were checked
            (``RunSpread.fit_of``), the run farthest from its calibration, percent of the
            calibration's step time (positive: slower than calibrated); else ``None``.
    """

    decision: str
    gain_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None
    level: float
    mde_pct: float | None
    mde_power: float
    min_gain_pct: float
    n_pairs: int
    n_pairs_run: int
    method: str
    design: str
    df: float = math.inf
    critical_value: float | None = None
    spread_pct: float | None = None
    spread_source: str | None = None
    run_spread_pct: float | None = None
    set_aside: tuple[SetAside, ...] = field(default_factory=tuple)
    no_interval_reason: str | None = None
    below_min_gain: bool = False
    pairs_for_min_gain: int | None = None
    pairs_for_gain: int | None = None
    stop_reason: str | None = None
    n_steps_baseline: int = 0
    n_steps_variant: int = 0
    n_bursts_baseline: int = 0
    n_bursts_variant: int = 0
    baseline_location_s: float | None = None
    variant_location_s: float | None = None
    calibration_shift_pct: float | None = None
    n_leading_baseline: int = 0
    n_leading_variant: int = 0
    screen: str | None = None
    n_outliers_baseline: int = 0
    n_outliers_variant: int = 0
    with_outliers_low_pct: float | None = None
    with_outliers_high_pct: float | None = None

    @property
    def half_width_pct(self) -> float | None:
        """Half the interval's width, percent; ``None`` without an interval."""
        if self.ci_low_pct is None or self.ci_high_pct is None:
            return None
        return (self.ci_high_pct - self.ci_low_pct) / 2.0


@dataclass(frozen=True)
class Pairs:
    """Pairs after setting aside: ``d`` the deciding log ratios (in round order), ``stats`` their
    run statistics ``(baseline, variant)``, ``set_aside`` the rest, ``n_run`` all measured;
    ``rounds`` the deciding pairs' 0-based rounds, ``all_stats`` every pair's statistics and
    ``outliers`` per round set aside as holding an outlier run, ``(baseline, variant)`` flags."""

    d: np.ndarray
    stats: tuple[tuple[RunStatistic, RunStatistic], ...]
    set_aside: tuple[SetAside, ...]
    n_run: int
    rounds: tuple[int, ...] = ()
    all_stats: tuple[tuple[RunStatistic, RunStatistic], ...] = ()
    outliers: dict[int, tuple[bool, bool]] = field(default_factory=dict)

    def outlier_counts(self) -> tuple[int, int]:
        """Runs set aside as outliers, ``(baseline, variant)``."""
        return (
            sum(b for b, _ in self.outliers.values()),
            sum(v for _, v in self.outliers.values()),
        )

    def with_back(self, side: str) -> "Pairs":
        """These pairs with the pairs set aside for an outlier run of ``side`` (``baseline``,
        ``variant`` or ``both``: any) put back, in round order."""
        back = {
            k
            for k, (b, v) in self.outliers.items()
            if side == "both" or (b if side == "baseline" else v)
        }
        keep = sorted(set(self.rounds) | back)
        stats = tuple(self.all_stats[k] for k in keep)
        d = np.array([math.log(v.location_s / b.location_s) for b, v in stats])
        return replace(
            self,
            d=d,
            stats=stats,
            rounds=tuple(keep),
            set_aside=tuple(a for a in self.set_aside if a.pair - 1 not in back),
            outliers={k: f for k, f in self.outliers.items() if k not in back},
        )


def check_settings(
    confidence: float,
    min_gain_pct: float,
    run_spread_pct: float | None,
    run_spread_df: float | None,
) -> None:
    """Raises ValueError naming the setting that is out of range."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be within (0, 1), got {confidence}")
    if not 0 < min_gain_pct < 100:
        raise ValueError(f"min_gain_pct must be within (0, 100), got {min_gain_pct}")
    if run_spread_pct is not None:
        if not (math.isfinite(run_spread_pct) and run_spread_pct > 0):
            raise ValueError(f"run_spread_pct must be finite and > 0, got {run_spread_pct}")
        if run_spread_df is not None and not run_spread_df >= 1:
            raise ValueError(f"run_spread_df must be >= 1, got {run_spread_df}")


def pair_up(
    baseline: Sequence[Sequence[float]],
    variant: Sequence[Sequence[float]],
    contended: Sequence[tuple[bool, bool]] | None = None,
    contention_detail: Sequence[Any] | None = None,
    keep_contended: bool = False,
) -> Pairs:
    """The one pairing rule: pair by index, set aside contended pairs, then pairs holding an
    outlier run (:func:`afbench.verdict.runs.outlier_runs`, over each side's uncontended runs).
    ``keep_contended`` (verdict.contention=keep): a pair whose two runs were both contended
    decides (contention balanced across its sides); one contended on one side only is still
    set aside (``contended``, its ``side``): contention never decides alone.

    Raises:
        ValueError: unequal numbers of runs, no runs, a run without steps or with a step time
            not finite and > 0, or ``contended`` of another length.
    """
    n = len(baseline)
    if n != len(variant):
        raise ValueError(
            f"paired design needs as many baseline as variant runs (paired by "
            f"round), got {n} and {len(variant)}"
        )
    if n < 1:
        raise ValueError("no pairs: at least one baseline and one variant run are needed")
    flags = list(contended) if contended is not None else [(False, False)] * n
    if len(flags) != n:
        raise ValueError(f"contended has {len(flags)} entries for {n} pairs")
    stats = [
        (run_statistic(b, f"baseline run {k + 1}"), run_statistic(v, f"variant run {k + 1}"))
        for k, (b, v) in enumerate(zip(baseline, variant))
    ]
    aside: dict[int, SetAside] = {}
    for k, (cb, cv) in enumerate(flags):
        if (cb or cv) and not (keep_contended and cb and cv):
            side = "both" if cb and cv else "baseline" if cb else "variant"
            detail = contention_detail[k] if contention_detail else ""
            aside[k] = SetAside(pair=k + 1, side=side, reason=CONTENDED, detail=detail)
    clean = [k for k in range(n) if k not in aside]
    outliers: dict[int, tuple[bool, bool]] = {}
    for which, side in ((0, "baseline"), (1, "variant")):
        logs = [math.log(stats[k][which].location_s) for k in clean]
        for i in outlier_runs(logs):
            k = clean[i]
            prev = aside.get(k)
            aside[k] = SetAside(pair=k + 1, side="both" if prev else side, reason=OUTLIER)
            outliers[k] = (which == 0 or bool(prev), which == 1)
    keep = [k for k in range(n) if k not in aside]
    d = np.array([math.log(stats[k][1].location_s / stats[k][0].location_s) for k in keep])
    return Pairs(
        d=d,
        stats=tuple(stats[k] for k in keep),
        set_aside=tuple(aside[k] for k in sorted(aside)),
        n_run=n,
        rounds=tuple(keep),
        all_stats=tuple(stats),
        outliers=outliers,
    )


def gain_from_log(d: float) -> float:
    """``(1 - exp(d)) * 100``: a log ratio ``ln(variant/baseline)`` as a gain in percent."""
    return (1.0 - math.exp(d)) * 100.0


def interval_speed(
    pairs: Pairs,
    center: float,
    se: float,
    critical: float,
    df: float,
    *,
    level: float,
    min_gain_pct: float,
    mde_power: float,
    method: str,
    design: str,
    spread_source: str,
    run_spread_pct: float | None,
    stop_reason: str | None = None,
    pairs_hint: bool = True,
) -> Speed:
    """A :class:`Speed` from an interval ``center -+ critical * se`` of the mean log ratio
    (``pairs_hint=False`` leaves ``pairs_for_min_gain`` out: a sequential look that goes on)."""
    low, high = gain_from_log(center + critical * se), gain_from_log(center - critical * se)
    decision = decide(low, high, min_gain_pct)
    n = pairs.d.size
    sd_pair = se * math.sqrt(n)
    mde = mde_pct(critical, df, se, claim_power(mde_power, n))
    seen = abs(gain_from_log(center))
    for_gain = (
        pairs_for_mde(sd_pair, seen, level, mde_power)
        if pairs_hint
        and decision == "INCONCLUSIVE"
        and math.isfinite(sd_pair)
        and min_gain_pct < seen < mde
        else None
    )
    return Speed(
        decision=decision,
        gain_pct=gain_from_log(center),
        ci_low_pct=low,
        ci_high_pct=high,
        level=level,
        mde_pct=mde,
        mde_power=mde_power,
        min_gain_pct=min_gain_pct,
        n_pairs=n,
        n_pairs_run=pairs.n_run,
        method=method,
        design=design,
        df=df,
        critical_value=critical,
        spread_pct=sd_pair * 100.0,
        spread_source=spread_source,
        run_spread_pct=run_spread_pct,
        set_aside=pairs.set_aside,
        below_min_gain=decision == "FASTER" and high < min_gain_pct,
        pairs_for_min_gain=(
            pairs_for_mde(sd_pair, min_gain_pct, level, mde_power)
            if pairs_hint and math.isfinite(sd_pair)
            else None
        ),
        pairs_for_gain=for_gain,
        stop_reason=stop_reason,
        **_step_counts(pairs),
    )


def side_locations(pairs: Pairs) -> tuple[float | None, float | None]:
    """Geometric mean of the deciding runs' median step times (seconds), per side
    ``(baseline, variant)``; ``None`` without a deciding pair."""
    n = len(pairs.stats)
    if not n:
        return None, None
    b, v = (math.exp(sum(math.log(s[side].location_s) for s in pairs.stats) / n) for side in (0, 1))
    return b, v


def _step_counts(pairs: Pairs) -> dict[str, Any]:
    where = side_locations(pairs)
    return {
        "n_steps_baseline": sum(b.n_steps for b, _ in pairs.stats),
        "n_steps_variant": sum(v.n_steps for _, v in pairs.stats),
        "n_bursts_baseline": sum(b.n_bursts for b, _ in pairs.stats),
        "n_bursts_variant": sum(v.n_bursts for _, v in pairs.stats),
        "n_leading_baseline": sum(b.n_leading for b, _ in pairs.stats),
        "n_leading_variant": sum(v.n_leading for _, v in pairs.stats),
        "baseline_location_s": where[0],
        "variant_location_s": where[1],
    }


def no_interval(
    pairs: Pairs,
    reason: str,
    *,
    level: float,
    min_gain_pct: float,
    mde_power: float,
    design: str,
    stop_reason: str | None = None,
    calibration_shift_pct: float | None = None,
) -> Speed:
    """INCONCLUSIVE without an interval: the point gain (when a pair is left) and ``reason``."""
    gain = gain_from_log(float(pairs.d.mean())) if pairs.d.size else None
    return Speed(
        decision=INCONCLUSIVE,
        gain_pct=gain,
        ci_low_pct=None,
        ci_high_pct=None,
        level=level,
        mde_pct=None,
        mde_power=mde_power,
        min_gain_pct=min_gain_pct,
        n_pairs=int(pairs.d.size),
        n_pairs_run=pairs.n_run,
        method="none",
        design=design,
        set_aside=pairs.set_aside,
        no_interval_reason=reason,
        stop_reason=stop_reason,
        calibration_shift_pct=calibration_shift_pct,
        **_step_counts(pairs),
    )


def sweep_level(level: float, m: int) -> float:
    """Per-comparison confidence for ``m`` comparisons of one sweep (Bonferroni):
    ``1 - (1 - level) / m``, so every FASTER/SLOWER of the sweep is covered by one family-wise
    error rate whatever the comparisons' dependence (they share a baseline).

    Raises:
        ValueError: ``level`` outside (0, 1) or ``m < 1``.
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be within (0, 1), got {level}")
    if m < 1:
        raise ValueError(f"number of comparisons must be >= 1, got {m}")
    return 1.0 - (1.0 - level) / m
