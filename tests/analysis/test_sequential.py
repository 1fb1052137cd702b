"""The group-sequential stopping rule: boundaries, error rate, power, stop reasons."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from afbench.analysis.paired import FASTER, SLOWER, trimmed_t_parts
from afbench.analysis.sequential import (
    CONTINUE,
    EXCLUDES_ZERO,
    MAX_PAIRS,
    POCOCK,
    PRECISION_REACHED,
    TIME_BUDGET,
    SequentialDesign,
    sequential_decision,
    spent_alpha,
    stopped_boundary,
    t_boundaries,
)


def _paths(rng, trials, n, shift=0.0, sd=0.03):
    """Per-pair log ratios of ``trials`` simulated comparisons."""
    return rng.normal(shift, sd, (trials, n))


def _first_crossing(d, looks, bounds, trim=0.0):
    """(crossed at some look, pairs used) for each simulated path."""
    crossed = np.zeros(d.shape[0], dtype=bool)
    used = np.full(d.shape[0], looks[-1])
    for n, c in zip(looks, bounds):
        center, se, _ = trimmed_t_parts(d[:, :n], trim)
        t = center / se
        hit = ~crossed & (np.abs(t) > c)
        used[hit] = n
        crossed |= hit
    return crossed, used


def test_one_look_is_the_fixed_n_t_quantile():
    assert t_boundaries(5, 5, 0.05) == pytest.approx((stats.t.ppf(0.975, 4),))


def test_first_boundary_is_exact_and_later_ones_shrink_towards_the_fixed_quantile():
    bounds = t_boundaries(3, 8, 0.05)
    first_alpha = spent_alpha(3 / 8, 0.05, "obrien_fleming")
    assert bounds[0] == pytest.approx(stats.t.ppf(1 - first_alpha / 2, 2))
    assert all(a > b for a, b in zip(bounds, bounds[1:]))
    assert bounds[-1] > stats.t.ppf(0.975, 7)  # repeated looks cost a little at the end


def test_obrien_fleming_spending_spends_little_early_and_all_at_the_end():
    assert spent_alpha(1.0, 0.05, "obrien_fleming") == pytest.approx(0.05)
    assert spent_alpha(0.25, 0.05, "obrien_fleming") < 0.0001
    assert spent_alpha(1.0, 0.05, POCOCK) == pytest.approx(0.05)
    assert spent_alpha(0.5, 0.05, POCOCK) == pytest.approx(0.05 * math.log(1 + (math.e - 1) / 2))


def test_sequential_false_positive_rate_stays_at_alpha_while_naive_peeking_inflates_it():
    rng = np.random.default_rng(12345)  # independent of the boundaries' own seed
    d = _paths(rng, 40_000, 8)
    looks = list(range(3, 9))
    crossed, _ = _first_crossing(d, looks, t_boundaries(3, 8, 0.05))
    mc_se = math.sqrt(0.05 * 0.95 / d.shape[0])
    assert crossed.mean() <= 0.05 + 3 * mc_se
    naive = [stats.t.ppf(0.975, n - 1) for n in looks]  # a full-level test at every look
    peeked, _ = _first_crossing(d, looks, naive)
    assert peeked.mean() > 0.08


def test_trimmed_boundaries_keep_the_false_positive_rate():
    rng = np.random.default_rng(54321)
    d = _paths(rng, 40_000, 8)
    crossed, _ = _first_crossing(d, list(range(3, 9)), t_boundaries(3, 8, 0.05, trim=0.2), 0.2)
    assert crossed.mean() <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / d.shape[0])


def test_sequential_power_is_near_fixed_n_at_max_pairs_with_fewer_pairs_used():
    rng = np.random.default_rng(777)
    d = _paths(rng, 20_000, 8, shift=math.log(1.05), sd=0.03)
    looks = list(range(3, 9))
    seq, used = _first_crossing(d, looks, t_boundaries(3, 8, 0.05))
    fixed8, _ = _first_crossing(d, [8], [stats.t.ppf(0.975, 7)])
    fixed3, _ = _first_crossing(d, [3], [stats.t.ppf(0.975, 2)])
    # documented trade: a few points of power at max pairs for stopping early
    assert seq.mean() >= fixed8.mean() - 0.05
    assert used.mean() < 7.0
    assert seq.mean() > fixed3.mean() + 0.3  # far above today's 3 repeats


def _synthetic_runs(rng, n_pairs, ratio, between=0.015, cv=0.04, steps=15):
    baseline, variant = [], []
    for _ in range(n_pairs):
        baseline.append(list(0.05 * math.exp(rng.normal(0, between)) * np.exp(rng.normal(0, cv, steps))))
        level = 0.05 * ratio * math.exp(rng.normal(0, between))
        variant.append(list(level * np.exp(rng.normal(0, cv, steps))))
    return baseline, variant


def _run_loop(rng, design, ratio):
    baseline, variant = [], []
    while True:
        b, v = _synthetic_runs(rng, 1, ratio)
        baseline += b
        variant += v
        decision = sequential_decision(baseline, variant, design)
        if decision.stop:
            return decision


def test_aa_loop_through_the_api_rarely_calls_faster_or_slower():
    rng = np.random.default_rng(31)
    design = SequentialDesign(max_pairs=6, precision_pct=None)
    trials = 250
    wrong = sum(
        _run_loop(rng, design, 1.0).estimate.decision in (FASTER, SLOWER) for _ in range(trials)
    )
    assert wrong / trials <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / trials)


def test_large_gain_stops_early_because_the_interval_excludes_zero():
    rng = np.random.default_rng(5)
    decision = _run_loop(rng, SequentialDesign(), 0.85)
    assert decision.reason == EXCLUDES_ZERO and decision.stop
    assert decision.n_pairs < 8
    assert decision.estimate.decision == FASTER
    assert "stop: interval excludes 0" in decision.message


def test_quiet_aa_stops_when_precise_enough():
    rng = np.random.default_rng(6)
    baseline, variant = [], []
    for _ in range(8):
        b, v = _synthetic_runs(rng, 1, 1.0, between=0.001, cv=0.002)
        baseline += b
        variant += v
        decision = sequential_decision(baseline, variant, SequentialDesign(precision_pct=1.0))
        if decision.stop:
            break
    assert decision.reason == PRECISION_REACHED
    assert decision.estimate.half_width_pct <= 1.0


def test_noisy_aa_runs_to_max_pairs():
    rng = np.random.default_rng(8)
    decision = _run_loop(rng, SequentialDesign(max_pairs=4, precision_pct=0.1), 1.0)
    assert decision.n_pairs == 4 and decision.reason in (MAX_PAIRS, EXCLUDES_ZERO)


def test_time_budget_stops_when_another_pair_would_overrun():
    baseline = [[0.10, 0.10, 0.10]] * 3
    variant = [[r * 0.10] * 3 for r in (1.02, 0.98, 1.00)]  # mean log ratio ~0: no crossing
    design = SequentialDesign(time_budget_s=100.0, precision_pct=None)
    # 3 pairs took 80 s: a 4th at ~26.7 s would end at ~107 s
    late = sequential_decision(baseline, variant, design, elapsed_s=80.0)
    early = sequential_decision(baseline, variant, design, elapsed_s=60.0)
    assert late.reason == TIME_BUDGET and late.stop
    assert early.reason == CONTINUE and not early.stop
    # the budget, blind to the data, makes this look the final analysis: nothing was spent
    # before the first look, so its interval is the fixed-n paired t, not the 27.0 boundary
    assert early.estimate.critical_value == pytest.approx(design.boundary(3))
    assert late.estimate.critical_value == pytest.approx(stats.t.ppf(0.975, 2))
    assert late.estimate.gain_pct == pytest.approx(early.estimate.gain_pct)
    assert late.estimate.half_width_pct < early.estimate.half_width_pct / 5
    assert "final analysis spends the error left" in late.estimate.method
    assert "(95% CI, final analysis), stop: time budget" in late.message
    assert "(95% repeated CI), continue" in early.message


def test_a_budget_stop_spends_the_error_left_and_no_more():
    bounds = t_boundaries(3, 8, 0.05)
    stopped = [stopped_boundary(3, 8, n, 0.05) for n in range(3, 9)]
    assert stopped[-1] == bounds[-1]  # at max_pairs it is the planned last look
    assert stopped[0] == pytest.approx(stats.t.ppf(0.975, 2))
    for n, c, planned in zip(range(3, 9), stopped, bounds):
        assert stats.t.ppf(0.975, n - 1) - 1e-9 <= c <= planned + 1e-9

    # simulated: a budget that ends the loop at a look drawn independently of the data
    rng = np.random.default_rng(777)  # independent of the boundaries' own seed
    d = _paths(rng, 40_000, 8)
    looks = list(range(3, 9))
    mc_se = math.sqrt(0.05 * 0.95 / d.shape[0])
    for stop_at in (3, 4, 6):
        k = stop_at - 3
        crossed = (_first_crossing(d, looks[:k], bounds[:k])[0] if k
                   else np.zeros(d.shape[0], dtype=bool))
        center, se, _ = trimmed_t_parts(d[:, :stop_at], 0.0)
        final = ~crossed & (np.abs(center / se) > stopped[k])
        rate = (crossed | final).mean()
        # all of alpha is spent, not less (the repeated interval alone would spend ~0)
        assert abs(rate - 0.05) <= 4 * mc_se, (stop_at, rate)


def test_before_min_pairs_there_is_no_interval_and_the_loop_continues():
    rng = np.random.default_rng(10)
    baseline, variant = _synthetic_runs(rng, 2, 0.5)
    decision = sequential_decision(baseline, variant, SequentialDesign())
    assert (decision.stop, decision.reason, decision.estimate) == (False, CONTINUE, None)
    assert decision.message == "pair 2/8: no interval before 3 pairs, continue"


def test_reported_interval_uses_the_looks_boundary():
    rng = np.random.default_rng(11)
    baseline, variant = _synthetic_runs(rng, 5, 1.0)
    design = SequentialDesign()
    decision = sequential_decision(baseline, variant, design)
    assert decision.estimate.critical_value == pytest.approx(design.boundary(5))
    assert "Lan-DeMets" in decision.estimate.method
    assert decision.message.startswith("pair 5/8: gain ")


def test_more_pairs_than_the_design_allows_is_an_error():
    rng = np.random.default_rng(12)
    baseline, variant = _synthetic_runs(rng, 4, 1.0)
    with pytest.raises(ValueError, match="max_pairs=3"):
        sequential_decision(baseline, variant, SequentialDesign(max_pairs=3))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"min_pairs": 2}, "min_pairs must be >= 3"),
        ({"min_pairs": 5, "max_pairs": 4}, "max_pairs"),
        ({"precision_pct": 0.0}, "precision_pct"),
        ({"spending": "linear"}, "spending"),
        ({"level": 1.0}, "level"),
        ({"time_budget_s": -1.0}, "time_budget_s"),
    ],
)
def test_design_rejects_bad_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SequentialDesign(**kwargs)
