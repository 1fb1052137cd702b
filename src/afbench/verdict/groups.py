"""Unpaired comparison of two groups of runs: a new result against its history.

:func:`compare_records` is the history gate: the **record** (one experiment, one night) is the
unit, because a night's runs share that night's level of the host; :func:`compare_groups`
below treats runs as independent and is the gate's fallback while there are too few records.

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
from typing import Any

import numpy as np

from afbench.verdict.estimate import (
    CONTENDED,
    DEFAULT_MIN_GAIN_PCT,
    NO_RUNS_LEFT,
    ONE_SIDED_CONTENTION,
    OUTLIER,
    UNCALIBRATED,
    SetAside,
    Speed,
    check_settings,
    gain_from_log,
)
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
RECORDS_PI = (
    "prediction interval of record means: the newest record's mean log run median "
    "against the earlier records' means and their spread (t, k - 1 df)"
)
#: Earlier records the record-level prediction interval needs (k - 1 = 4 df at least): with
#: fewer, the spread of record means is too uncertain to gate on (t_{0.975,1} = 12.7).
MIN_RECORDS = 5
#: Night-to-night spread assumed while there are fewer than :data:`MIN_RECORDS` earlier
#: records, percent (sd of a record's level, log scale); bench/history_gate_sim.py measures
#: what it holds when the host's nights move more.
DEFAULT_NIGHT_SPREAD_PCT = 3.0


def compare_groups(
    history: Sequence[Sequence[float]],
    newest: Sequence[Sequence[float]],
    *,
    confidence: float = 0.95,
    min_gain_pct: float = DEFAULT_MIN_GAIN_PCT,
    run_spread_pct: float | None = None,
    run_spread_df: float | None = None,
    mde_power: float = DEFAULT_MDE_POWER,
    history_contended: Sequence[bool | None] | None = None,
    newest_contended: Sequence[bool | None] | None = None,
    night_spread_pct: float | None = None,
    history_records: int = 1,
    keep_contended: bool = False,
) -> Speed:
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
    for side, runs, given in (
        (HISTORY_SIDE, history, history_contended),
        (NEWEST_SIDE, newest, newest_contended),
    ):
        if given is not None and len(given) != len(runs):
            raise ValueError(f"{side}_contended has {len(given)} flags for {len(runs)} runs")
        flags[side] = [bool(c) for c in given] if given is not None else [False] * len(runs)
    if keep_contended:
        one_sided = _one_sided(
            flags[HISTORY_SIDE],
            flags[NEWEST_SIDE],
            level=confidence,
            min_gain_pct=min_gain_pct,
            mde_power=mde_power,
        )
        if one_sided is not None:
            return one_sided
        flags = {side: [False] * len(f) for side, f in flags.items()}
    hist = [
        math.log(run_statistic(r, f"history run {i + 1}").location_s) for i, r in enumerate(history)
    ]
    new = [
        math.log(run_statistic(r, f"newest run {i + 1}").location_s) for i, r in enumerate(newest)
    ]
    aside = [
        SetAside(pair=i + 1, side=side, reason=CONTENDED)
        for side in (HISTORY_SIDE, NEWEST_SIDE)
        for i, c in enumerate(flags[side])
        if c
    ]
    kept = [i for i, c in enumerate(flags[HISTORY_SIDE]) if not c]
    out = {kept[j] for j in outlier_runs([hist[i] for i in kept])}
    aside += [SetAside(pair=i + 1, side=HISTORY_SIDE, reason=OUTLIER) for i in sorted(out)]
    aside = sorted(aside, key=lambda x: (x.side != HISTORY_SIDE, x.pair))
    a = np.array([hist[i] for i in kept if i not in out])
    b = np.array([x for x, c in zip(new, flags[NEWEST_SIDE]) if not c])
    common = {"level": confidence, "min_gain_pct": min_gain_pct, "mde_power": mde_power}
    if not a.size or not b.size:
        return Speed(
            decision=INCONCLUSIVE,
            gain_pct=None,
            ci_low_pct=None,
            ci_high_pct=None,
            mde_pct=None,
            n_pairs=0,
            n_pairs_run=0,
            method="none",
            design=HISTORY,
            set_aside=tuple(aside),
            no_interval_reason=NO_RUNS_LEFT,
            **common,
        )
    d = float(b.mean() - a.mean())
    if a.size >= 2 and b.size >= 2:
        va, vb = float(a.var(ddof=1)) / a.size, float(b.var(ddof=1)) / b.size
        se = math.sqrt(va + vb)
        df = (
            (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))
            if se > 0
            else float(a.size + b.size - 2)
        )
        method = WELCH
    elif a.size >= 2:
        se, df, method = (
            float(a.std(ddof=1)) * math.sqrt(1 + 1 / a.size),
            float(a.size - 1),
            PREDICTION,
        )
    elif run_spread_pct is not None:
        se = math.sqrt(2) * run_spread_pct / 100.0
        df = math.inf if run_spread_df is None else float(run_spread_df)
        method = CALIBRATED_ONE
    else:
        return Speed(
            decision=INCONCLUSIVE,
            gain_pct=gain_from_log(d),
            ci_low_pct=None,
            ci_high_pct=None,
            mde_pct=None,
            n_pairs=0,
            n_pairs_run=0,
            method="none",
            design=HISTORY,
            set_aside=tuple(aside),
            no_interval_reason=UNCALIBRATED,
            **common,
        )
    if night_spread_pct:
        se = math.sqrt(se**2 + (1 + 1 / history_records) * (night_spread_pct / 100.0) ** 2)
        method += f"; plus an assumed night-to-night spread of {night_spread_pct:g}%"
    c = t_quantile(0.5 + confidence / 2, df)
    low, high = gain_from_log(d + c * se), gain_from_log(d - c * se)
    decision = decide(low, high, min_gain_pct)
    return Speed(
        decision=decision,
        gain_pct=gain_from_log(d),
        ci_low_pct=low,
        ci_high_pct=high,
        mde_pct=mde_pct(c, df, se, mde_power) if se > 0 else 0.0,
        n_pairs=0,
        n_pairs_run=0,
        method=method,
        design=HISTORY,
        df=df,
        critical_value=c,
        spread_pct=se * 100.0,
        spread_source="calibration" if method == CALIBRATED_ONE else "runs",
        run_spread_pct=run_spread_pct,
        set_aside=tuple(aside),
        below_min_gain=decision == "FASTER" and high < min_gain_pct,
        **common,
    )


def _one_sided(history: Sequence[bool], newest: Sequence[bool], **common: Any) -> Speed | None:
    """``keep_contended``'s rule: contended runs on one side only give INCONCLUSIVE with
    ``one_sided_contention``, naming them (kept, the contention would be the change measured);
    None when both sides or neither hold one (then they decide)."""
    if any(history) == any(newest):
        return None
    return Speed(
        decision=INCONCLUSIVE,
        gain_pct=None,
        ci_low_pct=None,
        ci_high_pct=None,
        mde_pct=None,
        n_pairs=0,
        n_pairs_run=0,
        method="none",
        design=HISTORY,
        no_interval_reason=ONE_SIDED_CONTENTION,
        set_aside=tuple(
            SetAside(pair=i + 1, side=side, reason=CONTENDED)
            for side, fl in ((HISTORY_SIDE, history), (NEWEST_SIDE, newest))
            for i, c in enumerate(fl)
            if c
        ),
        **common,
    )


def compare_records(
    history: Sequence[Sequence[Sequence[float]]],
    newest: Sequence[Sequence[float]],
    *,
    confidence: float = 0.95,
    min_gain_pct: float = DEFAULT_MIN_GAIN_PCT,
    night_spread_pct: float = DEFAULT_NIGHT_SPREAD_PCT,
    min_records: int = MIN_RECORDS,
    run_spread_pct: float | None = None,
    run_spread_df: float | None = None,
    mde_power: float = DEFAULT_MDE_POWER,
    history_contended: Sequence[Sequence[bool | None]] | None = None,
    newest_contended: Sequence[bool | None] | None = None,
    keep_contended: bool = False,
) -> Speed:
    """The history gate: the gain of the newest record over earlier records of the same
    program on the same host, with the **record** (one experiment, e.g. one night) as the unit.

    ``history``: the earlier records, each a list of runs, each a list of measured step times
    in seconds; ``newest``: the newest record's runs. ``history_contended``: per record, per
    run, whether it was measured as contended; ``newest_contended``: per run. Contended runs
    are set aside (named by side and 1-based run index over the side's runs, records in the
    order given); a record left without a run does not count.

    With ``k >= min_records`` earlier records: each record is reduced to its mean log run
    median ``m_i``; under "no change" the newest record's ``m_0`` is one more draw of the same
    distribution, whose variance (night-to-night plus run-to-run over the record's runs) the
    records' own spread ``s`` estimates, so ``d = m_0 - mean(m)``, ``se = s sqrt(1 + 1/k)``,
    ``k - 1`` df: the prediction interval for one future observation (Hahn & Meeker,
    *Statistical Intervals*, 1991, ch. 4; Geisser, *Predictive Inference*, 1993). It is
    exact for normal log levels and records of equal runs. Runs of one night are not
    independent draws (they share the night's level): treating them as such, as Welch's t on
    runs does, is pseudo-replication (Hurlbert, Ecol. Monogr. 54, 1984; Kalibera & Jones,
    ISMM 2013), which failed an unchanged program on 7-18% of nights.

    With fewer earlier records the spread of record means is not known well enough:
    :func:`compare_groups` on the runs, plus an assumed night-to-night spread
    ``night_spread_pct`` (0: none), and the method says so. ``run_spread_*``: the host
    calibration, for one run on each side there. ``keep_contended``: as in
    :func:`compare_groups` (contended runs decide only when both sides hold some).

    Raises:
        ValueError: settings out of range, no earlier record or no newest run, a contention
            list of another shape than its runs, or a step time not finite and > 0.
    """
    check_settings(confidence, min_gain_pct, run_spread_pct, run_spread_df)
    if not (math.isfinite(night_spread_pct) and night_spread_pct >= 0):
        raise ValueError(f"night_spread_pct must be finite and >= 0, got {night_spread_pct}")
    if min_records < 2:
        raise ValueError(f"min_records must be >= 2, got {min_records}")
    if not history or not newest:
        raise ValueError("compare_records needs an earlier record and a newest run")
    flags = (
        [[False] * len(r) for r in history]
        if history_contended is None
        else [[bool(c) for c in f] for f in history_contended]
    )
    if len(flags) != len(history) or any(len(f) != len(r) for f, r in zip(flags, history)):
        raise ValueError("history_contended must give one flag per run of each record")
    flat = [run for r in history for run in r]
    flat_flags = [c for f in flags for c in f]
    if keep_contended:
        one_sided = _one_sided(
            flat_flags,
            [bool(c) for c in newest_contended or ()],
            level=confidence,
            min_gain_pct=min_gain_pct,
            mde_power=mde_power,
        )
        if one_sided is not None:
            return one_sided
        flags = [[False] * len(r) for r in history]
        flat_flags, newest_contended = [False] * len(flat), None
    kept = [r for r, f in zip(history, flags) if r and not all(f)]
    if len(kept) < min_records:
        return compare_groups(
            flat,
            newest,
            confidence=confidence,
            min_gain_pct=min_gain_pct,
            run_spread_pct=run_spread_pct,
            run_spread_df=run_spread_df,
            mde_power=mde_power,
            history_contended=flat_flags,
            newest_contended=newest_contended,
            night_spread_pct=night_spread_pct,
            history_records=max(1, len(kept)),
        )
    new_flags = (
        [bool(c) for c in newest_contended]
        if newest_contended is not None
        else [False] * len(newest)
    )
    if len(new_flags) != len(newest):
        raise ValueError(f"newest_contended has {len(new_flags)} flags for {len(newest)} runs")
    aside = [
        SetAside(pair=i + 1, side=side, reason=CONTENDED)
        for side, fl in ((HISTORY_SIDE, flat_flags), (NEWEST_SIDE, new_flags))
        for i, c in enumerate(fl)
        if c
    ]
    means = []
    for r, f in zip(history, flags):
        logs = [math.log(run_statistic(t, "history run").location_s) for t, c in zip(r, f) if not c]
        if logs:
            means.append(float(np.mean(logs)))
    new = [
        math.log(run_statistic(t, f"newest run {i + 1}").location_s)
        for i, (t, c) in enumerate(zip(newest, new_flags))
        if not c
    ]
    common = {
        "level": confidence,
        "min_gain_pct": min_gain_pct,
        "mde_power": mde_power,
        "n_pairs": 0,
        "n_pairs_run": 0,
        "design": HISTORY,
        "set_aside": tuple(aside),
    }
    if not new:
        return Speed(
            decision=INCONCLUSIVE,
            gain_pct=None,
            ci_low_pct=None,
            ci_high_pct=None,
            mde_pct=None,
            method="none",
            no_interval_reason=NO_RUNS_LEFT,
            **common,
        )
    m = np.array(means)
    k = m.size
    d = float(np.mean(new) - m.mean())
    se = float(m.std(ddof=1)) * math.sqrt(1 + 1 / k)
    df = float(k - 1)
    c = t_quantile(0.5 + confidence / 2, df)
    low, high = gain_from_log(d + c * se), gain_from_log(d - c * se)
    decision = decide(low, high, min_gain_pct)
    return Speed(
        decision=decision,
        gain_pct=gain_from_log(d),
        ci_low_pct=low,
        ci_high_pct=high,
        mde_pct=mde_pct(c, df, se, mde_power) if se > 0 else 0.0,
        method=RECORDS_PI,
        df=df,
        critical_value=c,
        spread_pct=se * 100.0,
        spread_source="records",
        below_min_gain=decision == "FASTER" and high < min_gain_pct,
        **common,
    )
