"""afbench.verdict.compare_runs on synthetic step times with known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from afbench.verdict import (
    FASTER,
    INCONCLUSIVE,
    NO_GAIN,
    SLOWER,
    compare_runs,
    decide,
    run_spread_from_pairs,
)
from afbench.verdict.calibration import RunSpread


def runs(medians, steps=5, jitter=0.0, seed=0):
    """One run per median (seconds): ``steps`` step times around it."""
    rng = np.random.default_rng(seed)
    return [list(m * np.exp(rng.normal(0, jitter, steps))) for m in medians]


FIT = RunSpread(spread_pct=5.0, df=23, n_pairs=24)


def test_one_round_without_a_calibration_never_names_a_winner():
    speed = compare_runs(runs([1.0]), runs([0.5]))  # even a 2x gain
    assert speed.decision == INCONCLUSIVE
    assert speed.no_interval_reason == "uncalibrated"
    assert speed.ci_low_pct is None and speed.mde_pct is None
    assert speed.gain_pct == pytest.approx(50.0)


def test_one_round_on_a_calibrated_host_decides_a_large_effect_and_not_a_small_one():
    big = compare_runs(runs([1.0]), runs([0.7]), calibration=FIT)  # 30% on a 5% host
    assert big.decision == FASTER and big.spread_source == "calibration"
    se = math.sqrt(2) * 0.05
    c = stats.t.ppf(0.975, 23)
    assert big.ci_low_pct == pytest.approx((1 - math.exp(math.log(0.7) + c * se)) * 100)
    small = compare_runs(runs([1.0]), runs([0.97]), calibration=FIT)
    assert small.decision == INCONCLUSIVE and small.ci_low_pct < 0 < small.ci_high_pct


@pytest.mark.parametrize(
    "calibration",
    [
        RunSpread(spread_pct=5.0, df=7, n_pairs=8),  # too few pairs
        RunSpread(spread_pct=5.0, df=23, n_pairs=24, n_outlier_pairs=1),  # saw an outlier run
    ],
)
def test_an_unfit_calibration_does_not_decide_one_round(calibration):
    speed = compare_runs(runs([1.0]), runs([0.5]), calibration=calibration)
    assert (speed.decision, speed.no_interval_reason) == (INCONCLUSIVE, "calibration_unfit")


def test_two_pairs_decide_on_their_own_spread_whether_or_not_an_unfit_calibration_exists():
    # a sweep job whose outlier run left two pairs: an unfit calibration (8 pairs) in the
    # history must not turn the pairs' own paired t (1 df) into calibration_unfit
    base, var = runs([1.0, 1.01]), runs([1.2, 1.21])
    alone = compare_runs(base, var)
    unfit = compare_runs(base, var, calibration=RunSpread(spread_pct=5.0, df=7, n_pairs=8))
    assert alone.decision == SLOWER and alone.spread_source == "pairs"
    assert (unfit.decision, unfit.ci_low_pct, unfit.ci_high_pct) == (
        alone.decision,
        alone.ci_low_pct,
        alone.ci_high_pct,
    )


def test_a_contended_run_never_decides_even_on_a_calibrated_host():
    # the baseline shared the CPU: 1.9x slower, measured as contended
    speed = compare_runs(
        runs([1.9]),
        runs([1.0]),
        calibration=FIT,
        contended=[(True, False)],
        contention_detail=["a-train-r1: CPU pressure 61%"],
    )
    assert speed.decision == INCONCLUSIVE and speed.no_interval_reason == "no_pairs_left"
    (aside,) = speed.set_aside
    assert (aside.pair, aside.side, aside.reason) == (1, "baseline", "contended")
    assert "CPU pressure" in aside.detail


@pytest.mark.parametrize("calibration", [None, FIT])
@pytest.mark.parametrize("n", [1, 3, 5])
def test_keeping_contended_runs_never_decides_on_contention_one_sided(n, calibration):
    """issue 34: verdict.contention=keep with every contended run on the baseline's side (1.9x
    slower) read AF_ON_FASTER; kept one-sided, the contention was the effect measured."""
    rng = np.random.default_rng(n)
    base = runs(np.exp(rng.normal(0, 0.01, n)) * ([1.9] + [1.0] * (n - 1)), jitter=0.01)
    var = runs(np.exp(rng.normal(0, 0.01, n)), jitter=0.01)
    one_sided = [(True, False)] + [(False, False)] * (n - 1)
    speed = compare_runs(
        base, var, calibration=calibration, contended=one_sided, keep_contended=True
    )
    assert (speed.decision, speed.no_interval_reason) == (INCONCLUSIVE, "one_sided_contention")
    assert [(a.pair, a.side) for a in speed.set_aside] == [(1, "baseline")]


def test_keeping_contended_runs_lets_a_pair_contended_on_both_sides_decide():
    base, var = (
        runs([1.05, 1.0, 1.01, 0.99], jitter=0.01),
        runs([0.84, 0.8, 0.82, 0.79], jitter=0.01),
    )
    both = [(True, True)] + [(False, False)] * 3
    kept = compare_runs(base, var, contended=both, keep_contended=True)
    assert kept.decision == FASTER and kept.n_pairs == 4 and not kept.set_aside
    aside = compare_runs(base, var, contended=both)
    assert aside.n_pairs == 3 and aside.set_aside[0].side == "both"


def test_a_sequential_design_keeping_contended_runs_sets_one_sided_pairs_aside():
    from afbench.verdict import SequentialTest

    test = SequentialTest(keep_contended=True)
    for k in range(4):
        look = test.add(
            [1.9 if k == 0 else 1.0] * 5,
            [1.0] * 5,
            contended=(k == 0, False) if k < 2 else (True, True),
        )
    assert [(a.pair, a.side) for a in look.speed.set_aside] == [(1, "baseline")]
    assert look.n_pairs == 3


def test_history_keeping_contended_runs_decides_only_with_contention_on_both_sides():
    from afbench.verdict import compare_groups

    hist, new = runs([1.0, 1.01, 0.99, 1.9], jitter=0.01), runs([1.3, 1.31, 1.29], jitter=0.01)
    one = compare_groups(
        hist,
        new,
        history_contended=[False, False, False, True],
        newest_contended=[False] * 3,
        keep_contended=True,
    )
    assert (one.decision, one.no_interval_reason) == (INCONCLUSIVE, "one_sided_contention")
    assert [(a.side, a.pair) for a in one.set_aside] == [("history", 4)]
    both = compare_groups(
        hist,
        new,
        history_contended=[False, False, False, True],
        newest_contended=[True, False, False],
        keep_contended=True,
    )
    assert both.ci_low_pct is not None
    assert not [a for a in both.set_aside if a.reason == "contended"]  # kept, deciding


def test_fixed_repeats_are_the_plain_paired_t_on_log_run_medians():
    rng = np.random.default_rng(3)
    base_m = np.exp(rng.normal(0, 0.05, 6))
    var_m = base_m * np.exp(rng.normal(-0.04, 0.03, 6))
    speed = compare_runs(runs(base_m), runs(var_m))
    d = np.log(var_m) - np.log(base_m)
    half = stats.t.ppf(0.975, 5) * d.std(ddof=1) / math.sqrt(6)
    assert speed.ci_low_pct == pytest.approx((1 - math.exp(d.mean() + half)) * 100)
    assert speed.ci_high_pct == pytest.approx((1 - math.exp(d.mean() - half)) * 100)
    assert (speed.design, speed.df, speed.n_pairs) == ("fixed", 5.0, 6)


def test_an_outlier_run_is_set_aside_and_the_rest_decide():
    base = [1.0, 1.01, 0.99, 2.0, 1.0]  # the 4th baseline run ran 2x slow
    var = [0.90, 0.91, 0.89, 0.90, 0.905]
    speed = compare_runs(runs(base), runs(var))
    assert [(a.pair, a.side, a.reason) for a in speed.set_aside] == [(4, "baseline", "outlier")]
    assert speed.n_pairs == 4 and speed.n_pairs_run == 5
    assert speed.decision == FASTER


@pytest.mark.parametrize(
    "low, high, expected",
    [
        (1.0, 9.0, FASTER),
        (-9.0, -1.0, SLOWER),
        (-1.5, 1.5, NO_GAIN),
        (-5.0, 1.0, INCONCLUSIVE),  # may hide a 5% slowdown: never NO_GAIN
        (-1.0, 3.0, INCONCLUSIVE),
    ],
)
def test_no_gain_means_the_whole_interval_lies_within_the_margin(low, high, expected):
    assert decide(low, high, 2.0) == expected


def test_a_faster_verdict_below_the_margin_says_so():
    base = [1.0, 1.002, 0.998, 1.001, 0.999, 1.0]
    var = [m * 0.99 for m in base]  # 1% faster, very steady
    speed = compare_runs(runs(base), runs([v * (1 + 0.001 * i) for i, v in enumerate(var)]))
    assert speed.decision == FASTER and speed.below_min_gain


def test_a_calibration_from_paired_runs_is_half_the_variance_of_their_log_ratios():
    rng = np.random.default_rng(5)
    base_m = np.exp(rng.normal(0, 0.05, 12))
    var_m = np.exp(rng.normal(0.1, 0.05, 12))  # an effect does not change the spread
    spread = run_spread_from_pairs(runs(base_m), runs(var_m))
    d = np.log(var_m) - np.log(base_m)
    assert spread.spread_pct == pytest.approx(math.sqrt(d.var(ddof=1) / 2) * 100)
    assert (spread.df, spread.n_pairs, spread.usable_for_one_round) == (11, 12, True)


@pytest.mark.parametrize(
    "bad",
    [
        dict(baseline=[[1.0]], variant=[[1.0], [1.0]]),
        dict(baseline=[[1.0, float("nan")]], variant=[[1.0]]),
        dict(baseline=[[]], variant=[[1.0]]),
        dict(baseline=[[1.0]], variant=[[1.0]], confidence=1.5),
        dict(baseline=[[1.0]], variant=[[1.0]], min_gain_pct=0),
        dict(baseline=[[1.0]], variant=[[1.0]], contended=[(True, False), (False, False)]),
    ],
)
def test_bad_input_is_a_value_error_naming_what_is_wrong(bad):
    with pytest.raises(ValueError):
        compare_runs(**bad)


def test_a_new_run_against_its_history_uses_the_historys_own_spread():
    from afbench.verdict import compare_groups

    rng = np.random.default_rng(9)
    history = runs(np.exp(rng.normal(0, 0.03, 6)))
    slower = compare_groups(history, runs([1.3]))
    assert slower.decision == SLOWER and slower.design == "history" and slower.df == 5
    same = compare_groups(history, runs([1.0]))
    assert same.decision in (INCONCLUSIVE, NO_GAIN)
    alone = compare_groups(history[:1], runs([1.3]))  # one run a side: no spread to judge by
    assert alone.decision == INCONCLUSIVE and alone.no_interval_reason == "uncalibrated"
    assert (
        compare_groups(history[:1], runs([1.3]), run_spread_pct=5.0, run_spread_df=23).decision
        == SLOWER
    )


def test_contended_runs_of_either_side_never_decide_a_comparison_with_history():
    from afbench.verdict import compare_groups

    rng = np.random.default_rng(4)
    history = runs(np.exp(rng.normal(0, 0.03, 6)))
    # two history runs slowed by a shared machine, marked contended: left out, named by side
    slowed = history[:4] + runs([1.5, 1.6])
    speed = compare_groups(
        slowed, runs([1.3, 1.31, 1.29]), history_contended=[False] * 4 + [True, True]
    )
    assert [(a.side, a.pair, a.reason) for a in speed.set_aside] == [
        ("history", 5, "contended"),
        ("history", 6, "contended"),
    ]
    assert speed.decision == SLOWER
    # an outlier history run is a history run, not a "baseline" one
    outlier = compare_groups(history[:5] + runs([3.0]), runs([1.0, 1.01]))
    assert [(a.side, a.pair, a.reason) for a in outlier.set_aside] == [("history", 6, "outlier")]
    # nothing left on one side: no verdict, and why
    none_left = compare_groups(history, runs([1.3]), newest_contended=[True])
    assert none_left.decision == INCONCLUSIVE and none_left.no_interval_reason == "no_runs_left"
    assert none_left.set_aside[0].side == "newest"
    with pytest.raises(ValueError, match="history_contended has 1 flags for 6 runs"):
        compare_groups(history, runs([1.3]), history_contended=[True])


def test_an_undecided_effect_beyond_the_margin_says_how_many_pairs_would_decide_it():
    # the quiet calibrated main job: +5.5% seen, one-round MDE 19.6% on a 4.85% host
    host = RunSpread(spread_pct=4.85, df=11, n_pairs=12)
    seen = compare_runs(runs([1.0]), runs([0.945]), calibration=host)
    assert seen.decision == INCONCLUSIVE and seen.mde_pct > 15
    from afbench.verdict import pairs_for_mde

    sd_pair = math.sqrt(2) * 0.0485  # one pair's log-ratio spread from the calibration
    assert seen.pairs_for_gain == pairs_for_mde(sd_pair, abs(seen.gain_pct), 0.95, 0.8)
    assert 5 < seen.pairs_for_gain < seen.pairs_for_min_gain  # fewer than for the 2% margin
    # nothing to add where the gain seen is within the margin, or already decided
    assert compare_runs(runs([1.0]), runs([0.99]), calibration=host).pairs_for_gain is None
    assert compare_runs(runs([1.0]), runs([0.6]), calibration=host).pairs_for_gain is None


def test_rounds_that_set_aside_all_but_one_pair_say_so_not_one_round_advice():
    # 3 rounds, the first two pairs' baseline runs measured contended: one pair decides nothing
    # without a calibration, and the reason is not "one round" (3 rounds were run)
    from afbench.verdict.estimate import ONE_PAIR_LEFT

    b, v = [[1.0] * 5, [1.0] * 5, [1.0] * 5], [[0.8] * 5, [0.8] * 5, [0.8] * 5]
    speed = compare_runs(b, v, contended=[(True, False), (True, False), (False, False)])
    assert speed.decision == "INCONCLUSIVE" and speed.no_interval_reason == ONE_PAIR_LEFT
    assert (speed.n_pairs, speed.n_pairs_run, speed.design) == (1, 3, "fixed")
    one = compare_runs(b[:1], v[:1])
    assert one.no_interval_reason == "uncalibrated"
