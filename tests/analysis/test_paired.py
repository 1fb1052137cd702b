"""Paired comparison statistics on synthetic data with known answers."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from scipy import stats

from afbench.analysis.paired import (
    FASTER,
    INCONCLUSIVE,
    NO_GAIN,
    SLOWER,
    counterbalanced_order,
    decide,
    hierarchical_bootstrap_gain,
    lag1_autocorrelation,
    paired_gain,
    run_statistic,
    step_level_gain,
    sweep_level,
    trimmed_t_parts,
    verdict_word,
)
from afbench.analysis import paired
from afbench.analysis.stats import t_interval_of_gain


def _steps(rng, level_s, n=20, cv=0.04):
    return list(level_s * np.exp(rng.normal(0.0, cv, n)))


def test_run_statistic_is_the_median_with_log_mad_spread():
    steps = [0.10, 0.12, 0.11, 0.13, 0.09]
    r = run_statistic(steps)
    assert r.location_s == pytest.approx(0.11)
    logs = np.log(steps)
    mad = np.median(np.abs(logs - np.log(0.11)))
    assert r.spread_pct == pytest.approx(1.4826 * mad * 100)
    assert (r.n_steps, r.n_bursts, r.burst_indices) == (5, 0, ())


def test_burst_inside_a_run_is_flagged_counted_and_barely_moves_the_median():
    rng = np.random.default_rng(3)
    quiet = _steps(rng, 0.05, n=18)
    burst = list(quiet)
    burst[7] *= 3.5  # a load burst from another process
    r_quiet, r_burst = run_statistic(quiet), run_statistic(burst)
    assert r_burst.burst_indices == (7,)
    assert r_burst.n_bursts == 1 and r_burst.n_steps == 18
    assert r_quiet.n_bursts == 0
    # the median moves by at most one order statistic; the mean moves by ~14%
    assert abs(r_burst.location_s / r_quiet.location_s - 1) < 0.03
    assert np.mean(burst) / np.mean(quiet) - 1 > 0.1


def test_run_statistic_rejects_a_non_positive_step_naming_the_run():
    with pytest.raises(ValueError, match="baseline repeat 2"):
        run_statistic([0.1, 0.0, 0.1], "baseline repeat 2")
    with pytest.raises(ValueError, match="no measured steps"):
        run_statistic([], "variant repeat 1")


def test_paired_gain_is_the_t_interval_of_per_pair_log_ratios():
    # constant steps: each run's median is exact, so the log ratios are known
    base_levels = [0.100, 0.110, 0.105]
    ratios = [0.95, 0.97, 0.96]
    baseline = [[b] * 5 for b in base_levels]
    variant = [[b * q] * 5 for b, q in zip(base_levels, ratios)]
    est = paired_gain(baseline, variant, 0.95)
    d = np.log(ratios)
    se = d.std(ddof=1) / math.sqrt(3)
    t = stats.t.ppf(0.975, 2)
    assert est.gain_pct == pytest.approx((1 - math.exp(d.mean())) * 100)
    assert est.ci_low_pct == pytest.approx((1 - math.exp(d.mean() + t * se)) * 100)
    assert est.ci_high_pct == pytest.approx((1 - math.exp(d.mean() - t * se)) * 100)
    assert est.critical_value == pytest.approx(t) and est.df == 2
    mde_log = (t + stats.t.ppf(0.8, 2)) * se
    assert est.mde_pct == pytest.approx((1 - math.exp(-mde_log)) * 100)
    assert est.n_pairs == 3 and est.n_steps_baseline == 15 and est.n_steps_variant == 15
    assert est.decision == FASTER
    assert est.verdict("af_on") == "AF_ON_FASTER"


def test_pairing_cancels_a_drifting_machine_where_unpaired_means_cannot_tell():
    rng = np.random.default_rng(11)
    order = counterbalanced_order(6)
    slot = 0
    baseline, variant = [], []
    for first, _second in order:
        runs = {}
        for who in (first, _second):
            drift = 1.0 + 0.03 * slot  # the machine slows 3% per run
            true = 0.050 * (0.96 if who == "variant" else 1.0)  # variant 4% faster
            runs[who] = _steps(rng, true * drift, n=20, cv=0.02)
            slot += 1
        baseline.append(runs["baseline"])
        variant.append(runs["variant"])
    paired = paired_gain(baseline, variant)
    assert paired.decision == FASTER
    assert paired.ci_low_pct < 4.0 < paired.ci_high_pct
    _, low, high = t_interval_of_gain([np.mean(r) for r in baseline], [np.mean(r) for r in variant])
    assert low < 0 < high  # unpaired: the drift swamps the 4% gain


def test_aa_pairs_give_no_faster_or_slower_beyond_the_level():
    rng = np.random.default_rng(2024)
    trials, wrong = 400, 0
    for _ in range(trials):
        levels = 0.05 * np.exp(rng.normal(0, 0.015, 6))
        baseline = [_steps(rng, lv, n=10) for lv in levels[:3]]
        variant = [_steps(rng, lv, n=10) for lv in levels[3:]]
        wrong += paired_gain(baseline, variant).decision in (FASTER, SLOWER)
    # alpha 0.05 plus three Monte Carlo standard errors
    assert wrong / trials <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / trials)


def test_identical_repeats_read_no_gain():
    baseline = [[0.10, 0.11, 0.10], [0.12, 0.11, 0.12], [0.10, 0.10, 0.11]]
    est = paired_gain(baseline, [list(r) for r in baseline])
    assert est.gain_pct == 0 and est.ci_low_pct == 0 and est.ci_high_pct == 0
    assert est.decision == NO_GAIN


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        (0.5, 4.0, FASTER),
        (-6.0, -0.1, SLOWER),
        (-3.0, 1.5, NO_GAIN),
        (-3.0, 2.0, INCONCLUSIVE),
        (-8.0, 9.0, INCONCLUSIVE),
    ],
)
def test_decision_from_the_interval_and_the_smallest_gain_that_matters(low, high, expected):
    assert decide(low, high, min_gain_pct=2.0) == expected


def test_decide_rejects_reversed_bounds():
    with pytest.raises(ValueError, match="reversed"):
        decide(3.0, 1.0, 2.0)


def test_verdict_words_name_the_variant():
    assert verdict_word(SLOWER, "af-on") == "AF_ON_SLOWER"
    assert verdict_word(NO_GAIN, "af_on") == "NO_GAIN"
    assert verdict_word(INCONCLUSIVE, "x") == "INCONCLUSIVE"
    with pytest.raises(ValueError, match="unknown decision"):
        verdict_word("MAYBE", "x")


def test_paired_gain_needs_equal_runs_and_two_pairs():
    with pytest.raises(ValueError, match="as many baseline as variant"):
        paired_gain([[0.1]] * 3, [[0.1]] * 2)
    with pytest.raises(ValueError, match="step_level_gain"):
        paired_gain([[0.1, 0.1]], [[0.1, 0.1]])


def test_one_round_small_difference_inside_a_wide_step_spread_is_inconclusive():
    rng = np.random.default_rng(7)
    baseline = _steps(rng, 0.300, n=5, cv=0.08)
    variant = list(np.asarray(baseline) * (1 - 0.0087))  # +0.87%, as in the issue
    rng.shuffle(variant)
    est = step_level_gain(baseline, variant)
    assert est.gain_pct > 0
    assert est.decision == INCONCLUSIVE
    assert est.n_pairs == 1 and est.method.startswith("step-level")


def test_one_round_large_difference_in_quiet_runs_is_faster():
    rng = np.random.default_rng(8)
    est = step_level_gain(_steps(rng, 0.300, n=20, cv=0.01), _steps(rng, 0.270, n=20, cv=0.01))
    assert est.decision == FASTER
    assert est.ci_low_pct < 10.0 < est.ci_high_pct


def _ar1(rng, n, rho, sd):
    e = rng.normal(0, sd * math.sqrt(1 - rho**2), n)
    x = np.empty(n)
    x[0] = rng.normal(0, sd)
    for i in range(1, n):
        x[i] = rho * x[i - 1] + e[i]
    return x


def test_one_round_interval_covers_on_autocorrelated_steps():
    # neighbouring steps share load (rho 0.6): an iid interval would be ~2x too narrow
    rng = np.random.default_rng(99)
    trials, covered, naive_covered = 300, 0, 0
    for _ in range(trials):
        b = 0.1 * np.exp(_ar1(rng, 30, 0.6, 0.04))
        v = 0.1 * np.exp(_ar1(rng, 30, 0.6, 0.04))
        est = step_level_gain(b, v)
        covered += est.ci_low_pct <= 0 <= est.ci_high_pct
        _, lo, hi = t_interval_of_gain(b, v)  # treats steps as independent
        naive_covered += lo <= 0 <= hi
    assert covered / trials >= 0.90
    assert naive_covered / trials < covered / trials


def _flicker(rng, n, sd=0.04, taus=(1, 10, 100, 1000)):
    """Flicker-like log noise: equal-variance AR(1) components with time constants from 1 to
    1000 steps (a sum of relaxation processes, the textbook construction of 1/f noise), so
    the level wanders on every time scale, as a shared CPU's speed does."""
    return sum(_ar1(rng, n, math.exp(-1.0 / tau), sd / math.sqrt(len(taus))) for tau in taus)


@pytest.mark.parametrize("n_steps", [18, 30])
def test_one_round_interval_covers_when_the_machine_speed_drifts_on_every_time_scale(n_steps):
    # A/A: two runs of one flicker-noise series, 30 steps apart (a worker start-up)
    rng = np.random.default_rng(2013 + n_steps)
    trials, covered, ar1_covered = 400, 0, 0
    for _ in range(trials):
        x = _flicker(rng, 2 * n_steps + 30)
        b, v = 0.1 * np.exp(x[:n_steps]), 0.1 * np.exp(x[n_steps + 30:])
        est = step_level_gain(b, v)
        covered += est.ci_low_pct <= 0 <= est.ci_high_pct
        # the AR(1)-only interval, rebuilt from its parts
        se_b, _ = paired._median_se_and_df(np.log(b))
        se_v, _ = paired._median_se_and_df(np.log(v))
        d = float(np.median(np.log(v)) - np.median(np.log(b)))
        ar1_covered += abs(d) <= 1.96 * math.hypot(se_b, se_v)
    assert covered / trials >= 0.90
    assert ar1_covered / trials < 0.80  # what the drift term is there for
    assert "half-split drift" in est.method


def test_one_round_drift_term_takes_over_when_a_run_shifts_level_and_needs_4_steps():
    rng = np.random.default_rng(3)
    steady = _steps(rng, 0.3, n=20, cv=0.01)
    shifted = _steps(rng, 0.3, n=10, cv=0.01) + _steps(rng, 0.33, n=10, cv=0.01)  # +10% midway
    est = step_level_gain(steady, shifted)
    assert est.critical_value == pytest.approx(stats.t.ppf(0.975, 2))
    assert est.decision == INCONCLUSIVE  # the run moved 10% by itself: no verdict from it
    # 3 steps cannot be split into halves of 2: no interval, rather than the AR(1) one alone
    with pytest.raises(ValueError, match="at least 4 measured steps per run"):
        step_level_gain(_steps(rng, 0.3, n=3, cv=0.01), _steps(rng, 0.33, n=3, cv=0.01))


def test_pairs_for_mde_is_the_fewest_pairs_whose_mde_reaches_the_target():
    def mde_pct(n, sd):
        c = stats.t.ppf(0.975, n - 1) + stats.t.ppf(0.8, n - 1)
        return (1 - math.exp(-c * sd / math.sqrt(n))) * 100

    for sd, target in ((0.05, 5.0), (0.11, 2.0), (0.01, 2.0)):
        n = paired.pairs_for_mde(sd, target)
        assert mde_pct(n, sd) <= target and (n == 2 or mde_pct(n - 1, sd) > target)
    # the normal approximation, ((1.96 + 0.84) sd / ln(1/0.95))^2 = 7.4, is a few pairs short
    assert paired.pairs_for_mde(0.05, 5.0) == 10
    assert paired.pairs_for_mde(10.0, 0.1) == paired.MAX_PAIRS_FOR_MDE
    with pytest.raises(ValueError, match="target_pct"):
        paired.pairs_for_mde(0.05, 0.0)


def test_paired_estimate_says_how_many_pairs_its_spread_needs_and_one_round_does_not():
    rng = np.random.default_rng(21)
    base = [_steps(rng, 0.3, cv=0.01) for _ in range(3)]
    var = [list(np.asarray(b) * f) for b, f in zip(base, (1.06, 0.95, 1.02))]  # sd ~5%
    est = paired_gain(base, var)
    sd = float(np.std(np.log([np.median(v) / np.median(b) for b, v in zip(base, var)]), ddof=1))
    assert est.pairs_for_min_gain == paired.pairs_for_mde(sd, 2.0)
    assert est.pairs_for_min_gain > 3
    assert step_level_gain(base[0], var[0]).pairs_for_min_gain is None


def test_lag1_autocorrelation_of_alternating_series_is_negative():
    assert lag1_autocorrelation([1, -1, 1, -1, 1, -1]) == pytest.approx(-5 / 6)
    assert lag1_autocorrelation([1, 2]) == 0.0


def test_sweep_level_is_bonferroni():
    assert sweep_level(0.95, 1) == pytest.approx(0.95)
    assert sweep_level(0.95, 4) == pytest.approx(0.9875)
    with pytest.raises(ValueError, match=">= 1"):
        sweep_level(0.95, 0)


def test_counterbalanced_order_alternates_and_seeded_order_is_reproducible():
    assert counterbalanced_order(3) == [
        ("baseline", "variant"),
        ("variant", "baseline"),
        ("baseline", "variant"),
    ]
    assert counterbalanced_order(8, seed=5) == counterbalanced_order(8, seed=5)
    assert set(counterbalanced_order(8, seed=5)) <= {("baseline", "variant"), ("variant", "baseline")}


def test_hierarchical_bootstrap_is_seeded_and_brackets_the_estimate():
    rng = np.random.default_rng(4)
    baseline = [_steps(rng, 0.05 * s, n=12) for s in (1.0, 1.02, 0.99, 1.01)]
    variant = [_steps(rng, 0.05 * s * 0.9, n=12) for s in (1.0, 1.02, 0.99, 1.01)]
    a = hierarchical_bootstrap_gain(baseline, variant, seed=1)
    b = hierarchical_bootstrap_gain(baseline, variant, seed=1)
    assert a == b
    assert a.ci_low_pct < a.gain_pct < a.ci_high_pct
    assert a.decision == FASTER and a.ci_low_pct < 10.0 < a.ci_high_pct


def test_estimates_convert_to_plain_dicts():
    est = paired_gain([[0.1, 0.11]] * 2 + [[0.12, 0.1]], [[0.1, 0.1]] * 3)
    d = dataclasses.asdict(est)
    assert d["n_pairs"] == 3 and d["decision"] in (FASTER, SLOWER, NO_GAIN, INCONCLUSIVE)
    assert set(d) >= {"gain_pct", "ci_low_pct", "ci_high_pct", "level", "method", "mde_pct"}


def test_trimmed_t_matches_yuen_by_hand():
    d = np.array([[0.01, 0.02, 0.03, 0.04, 0.30]])  # g = floor(0.2 * 5) = 1
    center, se, df = trimmed_t_parts(d, 0.2)
    winsorized = np.array([0.02, 0.02, 0.03, 0.04, 0.04])
    assert center[0] == pytest.approx(0.03)
    assert se[0] == pytest.approx(winsorized.std(ddof=1) / (0.6 * math.sqrt(5)))
    assert df[0] == 2
    plain_center, plain_se, plain_df = trimmed_t_parts(d, 0.0)
    assert plain_center[0] == pytest.approx(d.mean()) and plain_df[0] == 4
    assert plain_se[0] == pytest.approx(d.std(ddof=1) / math.sqrt(5))


def test_one_loaded_repeat_does_not_hide_a_clear_gain():
    rng = np.random.default_rng(21)
    levels = 0.05 * np.exp(rng.normal(0, 0.01, 8))
    baseline = [_steps(rng, lv, n=15, cv=0.02) for lv in levels]
    variant = [_steps(rng, lv * 0.95, n=15, cv=0.02) for lv in levels]
    variant[5] = list(np.asarray(variant[5]) * 1.3)  # another process loaded this whole run
    assert paired_gain(baseline, variant, trim=0.0).decision == INCONCLUSIVE
    trimmed = paired_gain(baseline, variant)
    assert trimmed.decision == FASTER and trimmed.df == 5
