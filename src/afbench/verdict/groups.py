"""Unpaired comparison of two groups of runs: a new result against its history.

:func:`compare_runs` pairs runs that ran side by side. A regression gate compares the newest
record's runs with earlier records' runs that ran hours or days apart: there is no pairing, so
the unit is the run and the spread is the history's own run-to-run spread (which, unlike an
adjacent pair's, includes day-to-day drift: what a regression must exceed).

* both sides with 2+ runs: Welch's t on the log run medians (Welch, Biometrika 34, 1947);
* one new run against ``k >= 2`` history runs: the prediction-interval t,
  ``d = x_new - mean(history)``, ``se = s_history sqrt(1 + 1/k)``, ``k - 1`` df (the new run is
  one more draw from the history's distribution under "no change");
* one run on each side: only with a host calibration (``se = sqrt(2) sigma_run``, its df), else
  INCONCLUSIVE (``uncalibrated``).

Runs measured as contended (either side) never decide: they are set aside first, then the
outlier runs (:func:`afbench.verdict.runs.outlier_runs`) of the history; each is named in
``set_aside`` by its side (``history`` or ``newest``) and index. The decision words, the
equivalence NO_GAIN and the noncentral-t MDE are :func:`compare_runs`'s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from afbench.verdict.estimate import (CONTENDED, DEFAULT_MIN_GAIN_PCT, NO_RUNS_LEFT,
                                      ONE_SIDED_CONTENTION, OUTLIER,
                                      UNCALIBRATED, SetAside, Speed, check_settings,
                                      gain_from_log)
from afbench.verdict.power import DEFAULT_MDE_POWER, mde_pct, t_quantile
from afbench.verdict.runs import outlier_runs, run_statistic
from afbench.verdict.words import INCONCLUSIVE, decide

HISTORY = "history"
#: The sides of an unpaired comparison, as ``SetAside.side``.
HISTORY_SIDE = "history"
NEWEST_SIDE = "newest"
WELCH = "Welch t of log run medians (newest runs against the history's runs)"
PREDICTION = "prediction-interval t: the newest run against the history's run-to-run spread"
CALIBRATED_ONE = "one run on each side with the host calibration's run-to-run spread"


def compare_groups(history: Sequence[Sequence[float]], newest: Sequence[Sequence[float]], *,
                   confidence: float = 0.95, min_gain_pct: float = DEFAULT_MIN_GAIN_PCT,
                   run_spread_pct: float | None = None, run_spread_df: float | None = None,
                   mde_power: float = DEFAULT_MDE_POWER,
                   history_contended: Sequence[bool | None] | None = None,
                   newest_contended: Sequence[bool | None] | None = None,
                   keep_contended: bool = False) -> Speed:
    """The gain of ``newest`` over ``history`` (each a list of runs, each a list of measured
    step times in seconds); positive = the newest is faster, as in :func:`compare_runs`.

    ``history_contended`` / ``newest_contended``: per run, whether it was measured as
    contended (None: not measured, kept); a contended run is set aside. A side left without a
    run gives INCONCLUSIVE with ``no_interval_reason`` ``no_runs_left``. ``keep_contended``
    (``history check --contention keep``): contended runs decide when both sides hold some;
    contended runs on one side only give INCONCLUSIVE with ``one_sided_contention``, naming
    them (kept, the contention would be the change measured).

    Raises:
        ValueError: settings out of range, a side without runs, a contention list of another
            length than its side, or a run with no steps or a step time not finite and > 0.
    """
    check_settings(confidence, min_gain_pct, run_spread_pct, run_spread_df)
    if not history or not newest:
        raise ValueError("compare_groups needs at least one run on each side")
    flags = {}
    for side, runs, given in ((HISTORY_SIDE, history, history_contended),
                              (NEWEST_SIDE, newest, newest_contended)):
        if given is not None and len(given) != len(runs):
            raise ValueError(f"{side}_contended has {len(given)} flags for {len(runs)} runs")
        flags[side] = [bool(c) for c in given] if given is not None else [False] * len(runs)
    if keep_contended:
        one_sided = any(flags[HISTORY_SIDE]) != any(flags[NEWEST_SIDE])
        if one_sided:
            return Speed(decision=INCONCLUSIVE, gain_pct=None, ci_low_pct=None,
                         ci_high_pct=None, level=confidence, mde_pct=None, mde_power=mde_power,
                         min_gain_pct=min_gain_pct, n_pairs=0, n_pairs_run=0, method="none",
                         design=HISTORY, no_interval_reason=ONE_SIDED_CONTENTION,
                         set_aside=tuple(SetAside(pair=i + 1, side=side, reason=CONTENDED)
                                         for side in (HISTORY_SIDE, NEWEST_SIDE)
                                         for i, c in enumerate(flags[side]) if c))
        flags = {side: [False] * len(f) for side, f in flags.items()}
    hist = [math.log(run_statistic(r, f"history run {i + 1}").location_s)
            for i, r in enumerate(history)]
    new = [math.log(run_statistic(r, f"newest run {i + 1}").location_s)
           for i, r in enumerate(newest)]
    aside = [SetAside(pair=i + 1, side=side, reason=CONTENDED)
             for side in (HISTORY_SIDE, NEWEST_SIDE) for i, c in enumerate(flags[side]) if c]
    kept = [i for i, c in enumerate(flags[HISTORY_SIDE]) if not c]
    out = {kept[j] for j in outlier_runs([hist[i] for i in kept])}
    aside += [SetAside(pair=i + 1, side=HISTORY_SIDE, reason=OUTLIER) for i in sorted(out)]
    aside = sorted(aside, key=lambda x: (x.side != HISTORY_SIDE, x.pair))
    a = np.array([hist[i] for i in kept if i not in out])
    b = np.array([x for x, c in zip(new, flags[NEWEST_SIDE]) if not c])
    common = {"level": confidence, "min_gain_pct": min_gain_pct, "mde_power": mde_power}
    if not a.size or not b.size:
        return Speed(decision=INCONCLUSIVE, gain_pct=None, ci_low_pct=None, ci_high_pct=None,
                     mde_pct=None, n_pairs=0, n_pairs_run=0, method="none", design=HISTORY,
                     set_aside=tuple(aside), no_interval_reason=NO_RUNS_LEFT, **common)
    d = float(b.mean() - a.mean())
    if a.size >= 2 and b.size >= 2:
        va, vb = float(a.var(ddof=1)) / a.size, float(b.var(ddof=1)) / b.size
        se = math.sqrt(va + vb)
        df = ((va + vb) ** 2 / (va ** 2 / (a.size - 1) + vb ** 2 / (b.size - 1))
              if se > 0 else float(a.size + b.size - 2))
        method = WELCH
    elif a.size >= 2:
        se, df, method = float(a.std(ddof=1)) * math.sqrt(1 + 1 / a.size), float(a.size - 1), \
            PREDICTION
    elif run_spread_pct is not None:
        se = math.sqrt(2) * run_spread_pct / 100.0
        df = math.inf if run_spread_df is None else float(run_spread_df)
        method = CALIBRATED_ONE
    else:
        return Speed(decision=INCONCLUSIVE, gain_pct=gain_from_log(d), ci_low_pct=None,
                     ci_high_pct=None, mde_pct=None, n_pairs=0, n_pairs_run=0, method="none",
                     design=HISTORY, set_aside=tuple(aside), no_interval_reason=UNCALIBRATED,
                     **common)
    c = t_quantile(0.5 + confidence / 2, df)
    low, high = gain_from_log(d + c * se), gain_from_log(d - c * se)
    decision = decide(low, high, min_gain_pct)
    return Speed(decision=decision, gain_pct=gain_from_log(d), ci_low_pct=low, ci_high_pct=high,
                 mde_pct=mde_pct(c, df, se, mde_power) if se > 0 else 0.0, n_pairs=0,
                 n_pairs_run=0, method=method, design=HISTORY, df=df, critical_value=c,
                 spread_pct=se * 100.0, spread_source="calibration" if
                 method == CALIBRATED_ONE else "runs", run_spread_pct=run_spread_pct,
                 set_aside=tuple(aside), below_min_gain=decision == "FASTER" and high < min_gain_pct,
                 **common)
