"""The fixed designs' verdict: one round, or a fixed number of paired rounds
(:func:`compare_runs`). The pairing, the interval by design and the calibration's role are
:mod:`afbench.verdict.estimate`'s (its docstring); the check that the outlier runs set aside do
not change the answer is :mod:`afbench.verdict.screen`'s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from afbench.verdict.calibration import RunSpread
from afbench.verdict.design import DEFAULT
from afbench.verdict.estimate import (
    CALIBRATED,
    CALIBRATION_STALE,
    CALIBRATION_UNFIT,
    CONTENDED,
    FIXED,
    NO_PAIRS_LEFT,
    ONE_PAIR_LEFT,
    ONE_ROUND,
    ONE_SIDED_CONTENTION,
    OWN_SPREAD_MIN_PAIRS,
    PAIRED_T,
    UNCALIBRATED,
    Pairs,
    Speed,
    check_settings,
    interval_speed,
    no_interval,
    pair_up,
)
from afbench.verdict.power import DEFAULT_MDE_POWER, t_quantile
from afbench.verdict.screen import screen_check


def compare_runs(
    baseline: Sequence[Sequence[float]],
    variant: Sequence[Sequence[float]],
    *,
    confidence: float = DEFAULT.level,
    min_gain_pct: float = DEFAULT.min_gain_pct,
    contended: Sequence[tuple[bool, bool]] | None = None,
    contention_detail: Sequence[Any] | None = None,
    mde_power: float = DEFAULT_MDE_POWER,
    calibration: RunSpread | None = None,
    keep_contended: bool = False,
    run_spread_pct: None = None,
) -> Speed:
    """The verdict of a fixed design (one round, or a fixed number of paired rounds).

    Args:
        baseline, variant: ``baseline[k]`` / ``variant[k]``: the measured step times (seconds)
            of the k-th run of each side; pairs by index (the runs of a round ran adjacently).
        confidence: two-sided level of the interval, ``0 < confidence < 1``.
        min_gain_pct: the smallest gain that matters, percent, ``0 < min_gain_pct < 100``.
        contended: per pair ``(baseline_contended, variant_contended)``, measured per run
            (a contended run never decides); ``None``: none known.
        contention_detail: per pair, what was measured (kept in :class:`SetAside`).
        mde_power: power at which the MDE is stated.
        calibration: the host's run-to-run spread as a
            :class:`afbench.verdict.calibration.RunSpread` (from
            :func:`afbench.verdict.run_spread_from_pairs` / :func:`afbench.verdict.one_kind`,
            or ``RunSpread.of`` a stored record): its spread with its degrees of freedom, whether
            the host was seen to produce outlier runs (then, or below 12 calibration pairs, one
            round stays INCONCLUSIVE with the reason ``calibration_unfit``) and what its runs
            took: runs that do not fit that (``RunSpread.fit_of``) give INCONCLUSIVE with the
            reason ``calibration_stale``. ``None``: no calibration.
        keep_contended: verdict.contention=keep: pairs contended on both sides decide; a pair
            contended on one side only makes the comparison INCONCLUSIVE with the reason
            ``one_sided_contention`` (those pairs in ``set_aside``): kept one-sided, the
            contention would be the effect measured.
        run_spread_pct: refused: a bare spread, without its degrees of freedom and fit check,
            called an A/A different in 8.1% of one-round experiments on a host that fits its
            calibration (with the RunSpread: 0.8%; bench/README.md).

    Returns:
        A :class:`Speed` (module docstring for the design of the interval).

    Raises:
        ValueError: settings out of range, ``run_spread_pct`` given or ``calibration`` not a
            RunSpread, unequal numbers of runs, no runs, or a run with no steps or a step time
            not finite and > 0.
    """
    if run_spread_pct is not None or not (
        calibration is None or isinstance(calibration, RunSpread)
    ):
        bare = run_spread_pct if run_spread_pct is not None else calibration
        raise ValueError(
            f"a bare run-to-run spread ({bare!r}) is not accepted: pass calibration=RunSpread "
            f"(afbench.verdict.run_spread_from_pairs(...) or RunSpread.of(record)), which "
            f"carries its degrees of freedom and the check that the runs fit it"
        )
    check_settings(
        confidence,
        min_gain_pct,
        calibration.spread_pct if calibration else None,
        calibration.df if calibration else None,
    )
    pairs = pair_up(baseline, variant, contended, contention_detail, keep_contended)
    common = {
        "level": confidence,
        "min_gain_pct": min_gain_pct,
        "mde_power": mde_power,
        "design": ONE_ROUND if pairs.n_run == 1 else FIXED,
    }
    if keep_contended and any(a.reason == CONTENDED for a in pairs.set_aside):
        return no_interval(pairs, ONE_SIDED_CONTENTION, **common)

    def judge(p: Pairs) -> Speed:
        return fixed_speed(p, calibration, common)

    return screen_check(judge(pairs), pairs, judge)


def fixed_speed(pairs: Pairs, calibration: RunSpread | None, common: dict[str, Any]) -> Speed:
    """The fixed design's verdict of ``pairs`` (module docstring); ``common``: level,
    min_gain_pct, mde_power and design."""
    n = int(pairs.d.size)
    confidence = common["level"]
    if n == 0:
        return no_interval(pairs, NO_PAIRS_LEFT, **common)
    center = float(pairs.d.mean())
    own_var = float(pairs.d.var(ddof=1)) if n >= 2 else 0.0
    # two pairs decide on their own spread (1 df) where no usable calibration could add to it:
    # a calibration too small to decide one round must not leave them undecided
    unusable = calibration is None or not calibration.usable_for_one_round
    if n >= OWN_SPREAD_MIN_PAIRS or (unusable and n == 2):
        se, df = math.sqrt(own_var / n), float(n - 1)
        return interval_speed(
            pairs,
            center,
            se,
            t_quantile(0.5 + confidence / 2, df),
            df,
            method=PAIRED_T,
            spread_source="pairs",
            run_spread_pct=None,
            **common,
        )
    if calibration is None:
        return no_interval(pairs, UNCALIBRATED if pairs.n_run == 1 else ONE_PAIR_LEFT, **common)
    if not calibration.usable_for_one_round:
        return no_interval(pairs, CALIBRATION_UNFIT, **common)
    fit = calibration.fit_of(
        [b.location_s for b, _ in pairs.stats], [v.location_s for _, v in pairs.stats]
    )
    shift = fit.shift_pct if fit is not None else None
    if fit is not None and not fit.fits:
        return no_interval(pairs, CALIBRATION_STALE, calibration_shift_pct=shift, **common)
    run_spread_pct = calibration.spread_pct
    cal_var = 2.0 * (run_spread_pct / 100.0) ** 2  # one pair: two runs' spread
    cal_df = float(calibration.df)
    df = (n - 1) + cal_df
    pair_var = ((n - 1) * own_var + cal_df * cal_var) / df
    critical = t_quantile(0.5 + confidence / 2, df)
    speed = interval_speed(
        pairs,
        center,
        math.sqrt(pair_var / n),
        critical,
        df,
        method=CALIBRATED,
        spread_source="calibration" if n == 1 else "pairs+calibration",
        run_spread_pct=run_spread_pct,
        **common,
    )
    return replace(speed, calibration_shift_pct=shift)
