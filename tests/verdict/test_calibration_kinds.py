"""One round with a calibration per kind of run (afbench.verdict.combine): a switch whose runs
vary more from process to process than the baseline's no longer fakes a winner (the misfit
cells of bench/verdict_sim.py, small and seeded)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from afbench.verdict import FASTER, SLOWER, RunSpread, combine, compare_runs, run_spread_from_pairs
from afbench.verdict.calibration import combined_record


def test_two_kinds_of_one_spread_combine_like_pooling():
    one = RunSpread(spread_pct=3.0, df=11, n_pairs=12)
    both = combine(one, one)
    assert both.spread_pct == pytest.approx(3.0) and both.df == pytest.approx(22)


def test_a_noisier_variant_widens_the_pair_and_its_df_follow_welch_satterthwaite():
    eager, compiled = RunSpread(2.5, 11, 12), RunSpread(6.0, 4, 5, n_outlier_pairs=1)
    both = combine(eager, compiled)
    assert both.spread_pct == pytest.approx(math.sqrt((2.5**2 + 6.0**2) / 2))
    vb, vv = 2.5**2, 6.0**2
    assert both.df == pytest.approx((vb + vv) ** 2 / (vb**2 / 11 + vv**2 / 4))
    assert 4 < both.df < 15  # between the noisier kind's df and the sum
    # one round needs both kinds to rest on 12 clean pairs
    assert (both.n_pairs, both.n_outlier_pairs) == (5, 1) and not both.usable_for_one_round


def test_a_combined_record_names_both_kinds_and_the_older_update():
    b = {
        "kind": "cpu|k",
        "host_id": "h",
        "spread_pct": 2.0,
        "df": 23,
        "n_pairs": 24,
        "updated_at": "2026-12-02T10:00:00+00:00",
    }
    v = {
        **b,
        "kind": "cpu|k|sw:autofuse",
        "spread_pct": 4.0,
        "updated_at": "2026-12-01T10:00:00+00:00",
    }
    rec = combined_record(b, v)
    assert rec["kind"] == "cpu|k + cpu|k|sw:autofuse" and rec["host_id"] == "h"
    assert rec["updated_at"] == v["updated_at"]
    assert rec["spread_pct"] == pytest.approx(math.sqrt(10.0))
    where = {"step_s": 0.3, "n_runs": 24, "spread_pct": 2.0, "df": 23}
    assert combined_record(b, dict(b)) == {**b, "variant_runs": None}  # no location known
    one = {**b, "baseline_runs": where}
    assert combined_record(one, dict(one))["variant_runs"] == where  # one kind: both checked


def runs(rng, spread, n, within=0.03, steps=5):
    return [list(np.exp(rng.normal(0, spread) + rng.normal(0, within, steps))) for _ in range(n)]


def test_a_noisier_variant_calibrated_as_its_own_kind_keeps_one_round_at_its_level():
    """A/A in the mean, the variant's runs spread 10% and the baseline's 5% (a compile switch
    on a CPU). A calibration of the baseline's kind alone calls a winner far above 5%; each
    kind calibrated by its own A/A of 12 pairs, combined, holds the level."""
    rng = np.random.default_rng(7)
    n, alone, per_kind = 600, [], []
    for _ in range(n):
        cal_b = run_spread_from_pairs(runs(rng, 0.05, 12), runs(rng, 0.05, 12))
        cal_v = run_spread_from_pairs(runs(rng, 0.10, 12), runs(rng, 0.10, 12))
        b, v = runs(rng, 0.05, 1), runs(rng, 0.10, 1)
        # the baseline kind's spread alone, as afbench used it before it kept run locations
        unchecked = replace(cal_b, baseline_runs=None, variant_runs=None)
        alone.append(compare_runs(b, v, calibration=unchecked).decision in (FASTER, SLOWER))
        per_kind.append(
            compare_runs(b, v, calibration=combine(cal_b, cal_v)).decision in (FASTER, SLOWER)
        )
    mc = 3 * math.sqrt(0.05 * 0.95 / n)
    assert np.mean(alone) > 0.10  # the misfit bench/README.md §8 measured (16.7%)
    assert np.mean(per_kind) <= 0.05 + mc
