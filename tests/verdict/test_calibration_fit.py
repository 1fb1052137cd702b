"""One round checks its runs against what their kind of run took when calibrated
(afbench.verdict.RunSpread.fit_of): a host that became noisier or slower since its calibration
no longer fakes a winner (bench/verdict_sim.py's 'host noisier since' cells, small and seeded)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from afbench.verdict import (
    FASTER,
    INCONCLUSIVE,
    SLOWER,
    RunLocation,
    RunSpread,
    combine,
    compare_runs,
    one_kind,
    run_spread_from_pairs,
)
from afbench.verdict.calibration import FIT_LEVEL, combined_record, pool
from afbench.verdict.estimate import CALIBRATION_STALE


def runs(rng, spread, n, log_mu=0.0, within=0.03, steps=5):
    return [
        list(np.exp(log_mu + rng.normal(0, spread) + rng.normal(0, within, steps)))
        for _ in range(n)
    ]


def calibrated(rng, spread, log_mu=0.0, pairs=12):
    """A kind's calibration as afbench keeps it: an A/A of ``pairs`` pairs (one_kind)."""
    return one_kind(
        run_spread_from_pairs(runs(rng, spread, pairs, log_mu), runs(rng, spread, pairs, log_mu))
    )


def at(step_s, spread=5.0, n_runs=24, df=11):
    return RunLocation(step_s=step_s, n_runs=n_runs, spread_pct=spread, df=df)


def test_a_run_where_its_calibration_ran_fits_and_one_30_pct_slower_does_not():
    cal = RunSpread(
        spread_pct=5.0,
        df=22,
        n_pairs=12,
        baseline_runs=at(0.25, df=22),
        variant_runs=at(0.20, df=22),
    )
    same = cal.fit_of([0.25], [0.20])
    assert same.fits and same.statistic == pytest.approx(0.0) and same.n_runs == 2
    slow = cal.fit_of([0.25 * 1.3], [0.20])
    assert not slow.fits and slow.shift_pct == pytest.approx(30.0)
    # threshold: 2 runs, k F(k, df) at FIT_LEVEL
    from scipy import stats

    assert slow.threshold == pytest.approx(2 * stats.f.ppf(FIT_LEVEL, 2, 22))
    # a side whose location is not known is not checked; nothing known: no check at all
    assert replace(cal, variant_runs=None).fit_of([0.25], [0.10]).n_runs == 1
    assert replace(cal, baseline_runs=None, variant_runs=None).fit_of([0.25], [0.2]) is None


def test_one_round_whose_runs_left_their_calibration_says_so_instead_of_a_winner():
    rng = np.random.default_rng(3)
    cal = calibrated(rng, 0.03)
    assert cal.usable_for_one_round
    b, v = runs(rng, 0.0, 1, math.log(1.4)), runs(rng, 0.0, 1)  # the baseline now 40% slower
    speed = compare_runs(b, v, calibration=cal)
    assert speed.decision == INCONCLUSIVE and speed.no_interval_reason == CALIBRATION_STALE
    assert speed.calibration_shift_pct == pytest.approx(40.0, abs=6.0)
    assert speed.gain_pct == pytest.approx(100 * (1 - 1 / 1.4), abs=4.0)  # the point gain stays
    # without the locations (a calibration recorded before afbench kept them) it decides
    old = compare_runs(b, v, calibration=replace(cal, baseline_runs=None, variant_runs=None))
    assert old.decision == FASTER


def test_a_host_noisier_since_its_calibration_keeps_one_round_near_its_level():
    """The calibrations' A/As ran at 3% run-to-run spread, the experiment at 6%: unchecked,
    one round calls the A/A different about a quarter of the time; checked, about 5%."""
    rng = np.random.default_rng(11)
    n, unchecked, checked, stale = 500, [], [], 0
    for _ in range(n):
        both = combine(calibrated(rng, 0.03), calibrated(rng, 0.03))
        b, v = runs(rng, 0.06, 1), runs(rng, 0.06, 1)
        bare = replace(both, baseline_runs=None, variant_runs=None)
        unchecked.append(compare_runs(b, v, calibration=bare).decision in (FASTER, SLOWER))
        speed = compare_runs(b, v, calibration=both)
        checked.append(speed.decision in (FASTER, SLOWER))
        stale += speed.no_interval_reason == CALIBRATION_STALE
    mc = 3 * math.sqrt(0.05 * 0.95 / n)
    assert np.mean(unchecked) > 0.15
    assert np.mean(checked) <= 0.05 + mc
    assert stale > 0.2 * n  # it says why


def test_on_a_host_that_fits_the_check_costs_about_its_level_and_keeps_a_30_pct_gain():
    """Its price: about 1 - FIT_LEVEL of the one-round verdicts on a host that still fits."""
    rng = np.random.default_rng(5)
    n, found, aa_wrong = 300, 0, 0
    gain = math.log(0.7)
    for _ in range(n):
        both = combine(calibrated(rng, 0.05), calibrated(rng, 0.05, gain))
        b, v = runs(rng, 0.05, 1), runs(rng, 0.05, 1, gain)
        found += compare_runs(b, v, calibration=both).decision == FASTER
        aa = combine(calibrated(rng, 0.05), calibrated(rng, 0.05))
        aa_wrong += compare_runs(
            runs(rng, 0.05, 1), runs(rng, 0.05, 1), calibration=aa
        ).decision in (FASTER, SLOWER)
    assert found / n >= 0.80  # unchecked: ~99% (bench/README.md §8); the check gives up ~10%
    assert aa_wrong / n <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / n)


def test_locations_follow_the_kind_through_one_kind_pool_and_combine():
    aa = RunSpread(
        spread_pct=4.0,
        df=11,
        n_pairs=12,
        baseline_runs=at(0.30, 4.0, 12),
        variant_runs=at(0.27, 4.0, 12),
    )
    kind = one_kind(aa)
    assert kind.baseline_runs == kind.variant_runs
    assert kind.baseline_runs.step_s == pytest.approx(math.sqrt(0.30 * 0.27))
    assert kind.baseline_runs.n_runs == 24
    older = RunSpread(spread_pct=2.0, df=11, n_pairs=12, baseline_runs=at(0.40, 2.0, 24))
    pooled = pool([older, kind])  # the newest estimate's location, the pooled spread
    assert pooled.baseline_runs.step_s == pytest.approx(kind.baseline_runs.step_s)
    assert pooled.baseline_runs.spread_pct == pytest.approx(pooled.spread_pct)
    assert pooled.baseline_runs.df == pooled.df == 22
    compiled = RunSpread(spread_pct=6.0, df=11, n_pairs=12, baseline_runs=at(0.2, 6.0, 24))
    both = combine(kind, compiled)
    assert both.baseline_runs == kind.baseline_runs and both.variant_runs == compiled.baseline_runs
    rec = combined_record(
        {
            "kind": "a",
            "host_id": "h",
            "spread_pct": 4.0,
            "df": 11,
            "n_pairs": 12,
            "baseline_runs": vars(kind.baseline_runs),
        },
        {
            "kind": "b",
            "host_id": "h",
            "spread_pct": 6.0,
            "df": 11,
            "n_pairs": 12,
            "baseline_runs": vars(compiled.baseline_runs),
        },
    )
    assert RunSpread.of(rec).variant_runs == compiled.baseline_runs


@pytest.mark.parametrize(
    "field, value",
    [
        ("n_runs", True),
        ("n_runs", 2.0),
        ("n_runs", 0),
        ("step_s", True),
        ("df", False),
        ("spread_pct", -1.0),
    ],
)
def test_a_run_location_refuses_a_boolean_or_out_of_range_field_by_name(field, value):
    # n_runs: true in a hand-edited record would otherwise be 1 run (a bool is a Python int)
    record = {"step_s": 0.25, "n_runs": 24, "spread_pct": 5.0, "df": 11, field: value}
    with pytest.raises(ValueError, match=f"^run location: {field} must be"):
        RunLocation.of(record)
    with pytest.raises(ValueError, match=f"^run location: {field} must be"):
        RunSpread.of({"spread_pct": 5.0, "df": 11, "n_pairs": 12, "baseline_runs": record})
