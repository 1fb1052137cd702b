"""No screen hides a cost (issue 30): outlier runs set aside must not change a verdict,
flagged steps do not decide a run's median, and the calibration is only taken as a RunSpread."""

from __future__ import annotations

import math

import numpy as np
import pytest

from afbench.verdict import (
    AUTO,
    FASTER,
    INCONCLUSIVE,
    NO_GAIN,
    SLOWER,
    Design,
    RunSpread,
    SequentialTest,
    compare_runs,
    run_spread_from_pairs,
)
from afbench.verdict.runs import run_statistic

#: a 5-step window with a 1-2% step-to-step spread (seconds)
WINDOW = [1.00, 1.02, 0.99, 1.01, 0.98]


def runs(medians, window=WINDOW):
    """One run per median: the window scaled to it."""
    return [[t * m for t in window] for m in medians]


def med(steps):
    """A run's median on the log scale, as afbench.verdict.runs takes it."""
    return math.exp(float(np.median(np.log(steps))))


def steady(n, level=1.0):
    """``n`` run medians around ``level`` with a 0.5% spread, fixed (no seed needed)."""
    return [level * (1 + 0.005 * math.sin(1.7 * k)) for k in range(n)]


def test_a_variant_that_stalls_is_never_no_gain_on_its_screened_runs():
    base = steady(8)
    var = steady(8)
    var[2] *= 2.0  # two of its eight runs stall 2x: its mean time +25%
    var[6] *= 2.0
    speed = compare_runs(runs(base), runs(var))
    # the six screened pairs alone are NO_GAIN (within +-2%) ...
    six = compare_runs(
        runs([b for k, b in enumerate(base) if k not in (2, 6)]),
        runs([v for k, v in enumerate(var) if k not in (2, 6)]),
    )
    assert six.decision == NO_GAIN
    # ... but the stalls change the answer: INCONCLUSIVE naming them
    assert speed.decision == INCONCLUSIVE and speed.screen == "changes_answer"
    assert (speed.n_outliers_baseline, speed.n_outliers_variant) == (0, 2)
    assert speed.with_outliers_low_pct < -2.0  # with them the interval reaches past the margin
    assert speed.ci_low_pct == pytest.approx(six.ci_low_pct)  # the screened interval is kept


def test_stalls_that_make_the_variant_slower_give_slower_from_every_run():
    base = steady(20)
    var = steady(20)
    for k in (1, 5, 9, 13, 17):  # a quarter of its runs stall 2x
        var[k] *= 2.0
    speed = compare_runs(runs(base), runs(var))
    assert speed.decision == SLOWER and speed.screen == "all_runs"
    assert speed.n_pairs == 20 and speed.n_outliers_variant == 5
    assert (speed.ci_low_pct, speed.ci_high_pct) == (
        speed.with_outliers_low_pct,
        speed.with_outliers_high_pct,
    )


def test_faster_typical_runs_with_stalls_are_not_faster():
    base = steady(8)
    var = [0.9 * m for m in steady(8)]  # 10% faster in typical runs ...
    var[3] *= 2.0  # ... stalling 2x in a quarter of them (mean time +12.5%)
    var[7] *= 2.0
    screened = compare_runs(
        runs([b for k, b in enumerate(base) if k not in (3, 7)]),
        runs([v for k, v in enumerate(var) if k not in (3, 7)]),
    )
    assert screened.decision == FASTER
    speed = compare_runs(runs(base), runs(var))
    assert speed.decision != FASTER and speed.screen in ("changes_answer", "all_runs")


def test_two_stalls_in_twenty_runs_are_not_priced_as_a_fixed_cost():
    """10% faster typically, 2 of 20 variant runs stalled 2x: adding their observed cost to the
    screened interval alone would still say FASTER (the stall rate seen, 10%, is not known that
    well); put back, the pairs' own spread carries the stall count's uncertainty."""
    base = steady(20)
    var = [0.9 * m for m in steady(20)]
    var[4] *= 2.0
    var[14] *= 2.0
    speed = compare_runs(runs(base), runs(var))
    assert speed.decision == INCONCLUSIVE and speed.screen == "changes_answer"
    assert speed.with_outliers_low_pct < 0 < speed.ci_low_pct


def test_a_baseline_stall_does_not_stop_a_variant_from_being_faster():
    base = steady(8)
    base[4] *= 2.0  # the baseline's stall costs the baseline: it cannot make the variant faster
    var = [0.9 * m for m in steady(8)]
    speed = compare_runs(runs(base), runs(var))
    assert speed.decision == FASTER and speed.screen == "holds"
    assert (speed.n_outliers_baseline, speed.n_outliers_variant) == (1, 0)
    assert speed.n_pairs == 7  # the screened interval decides, and is printed


def test_the_sequential_design_puts_the_stalls_back_too():
    rng = np.random.default_rng(30)
    test = SequentialTest(Design(rounds=AUTO, max_pairs=12, max_set_aside=12))
    for k in range(12):
        stall = 2.0 if k % 4 == 1 else 1.0  # a quarter of the variant's runs
        look = test.add(
            list(np.exp(rng.normal(0, 0.01, 5))), list(stall * np.exp(rng.normal(0, 0.01, 5)))
        )
        assert look.speed is None or look.speed.decision in (INCONCLUSIVE, SLOWER), k
        if look.stop:
            break
    assert look.speed.n_outliers_variant >= 1


def test_a_compile_straggler_does_not_decide_the_run_statistic():
    stat = run_statistic([5.0 * WINDOW[0]] + WINDOW[1:])  # the first step still compiling
    assert stat.n_bursts == 1 and stat.n_leading == 1 and stat.burst_indices == (0,)
    assert stat.location_s == pytest.approx(med(WINDOW[1:]))  # the median of the others
    late = run_statistic(WINDOW[:2] + [5.0] + WINDOW[3:])  # a burst mid-window: not leading
    assert late.n_bursts == 1 and late.n_leading == 0
    # equal steady states: the variant's straggler changes nothing, and is counted
    base = steady(8)
    strag = [5.0 * WINDOW[0]] + WINDOW[1:]
    speed = compare_runs(runs(base), runs(base, strag))
    assert speed.gain_pct == pytest.approx(100 * (1 - med(WINDOW[1:]) / med(WINDOW)))
    assert (speed.n_leading_baseline, speed.n_leading_variant) == (0, 8)
    assert speed.decision != SLOWER


@pytest.mark.parametrize(
    "bare",
    [{"run_spread_pct": 5.0}, {"calibration": 5.0}, {"calibration": {"spread_pct": 5.0, "df": 23}}],
)
def test_a_bare_calibration_is_refused_with_what_to_pass(bare):
    with pytest.raises(ValueError, match="RunSpread"):
        compare_runs(runs([1.0]), runs([0.7]), **bare)


def test_a_run_spread_with_its_df_decides_one_round():
    rng = np.random.default_rng(31)
    base, var = (
        [
            list(np.exp(math.log(level) + rng.normal(0, 0.03) + rng.normal(0, 0.01, 5)))
            for _ in range(24)
        ]
        for level in (1.0, 0.7)
    )
    cal = run_spread_from_pairs(base, var)  # 24 pairs of each kind, the effect removed
    assert isinstance(cal, RunSpread) and cal.df == 23
    speed = compare_runs(runs([1.0]), runs([0.7]), calibration=cal)
    assert speed.decision == FASTER and speed.df == 23 and speed.run_spread_pct == cal.spread_pct


def test_one_design_holds_every_default_and_refuses_bad_settings():
    from afbench.config.verdict import VerdictConfig
    from afbench.verdict import DEFAULT

    verdict = VerdictConfig()
    assert (
        verdict.rounds,
        verdict.min_rounds,
        verdict.max_rounds,
        verdict.precision_pct,
        verdict.time_budget_s,
    ) == (
        DEFAULT.rounds,
        DEFAULT.min_pairs,
        DEFAULT.max_pairs,
        DEFAULT.precision_pct,
        DEFAULT.time_budget_s,
    )
    assert (verdict.confidence, verdict.min_gain_pct) == (DEFAULT.level, DEFAULT.min_gain_pct)
    assert [Design(rounds=r).kind for r in (1, 3, AUTO)] == ["one_round", "fixed", "sequential"]
    for bad in ({"rounds": 0}, {"rounds": "many"}, {"min_pairs": 2}, {"level": 1.0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            Design(**bad)
