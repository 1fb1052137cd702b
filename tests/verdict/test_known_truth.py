"""The verdict's error rates, MDE and sequential design, measured on simulated runs with a
known truth (small, seeded versions of bench/verdict_sim.py's cells)."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
from scipy import stats

from afbench.verdict import (
    AUTO,
    FASTER,
    NO_GAIN,
    SLOWER,
    Design,
    SequentialTest,
    compare_runs,
    pairs_for_mde,
    run_sequential,
)
from afbench.verdict.power import SCREEN_MISS, claim_power, mde_log


def host(rng, spread=0.05, within=0.03, steps=5):
    """A run: steps around exp(u_run), u_run ~ N(0, spread) between processes."""

    def run(log_mu=0.0):
        return list(np.exp(log_mu + rng.normal(0, spread) + rng.normal(0, within, steps)))

    return run


def test_fixed_three_pairs_hold_their_level_and_never_call_a_slowdown_no_gain():
    rng = np.random.default_rng(11)
    run = host(rng)
    aa = [
        compare_runs([run() for _ in range(3)], [run() for _ in range(3)]).decision
        for _ in range(400)
    ]
    rate = np.mean([d in (FASTER, SLOWER) for d in aa])
    assert rate <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 400)  # 5% within Monte Carlo error
    slow = [
        compare_runs([run() for _ in range(3)], [run(math.log(1.1)) for _ in range(3)])
        for _ in range(300)
    ]
    assert not any(s.decision == NO_GAIN for s in slow)


def test_the_printed_mde_is_met_with_its_stated_power():
    """Paired t, n=5: the effect at the median printed MDE is found ~80% of the time."""
    rng = np.random.default_rng(2)
    n, sigma = 5, 0.05
    c = stats.t.ppf(0.975, n - 1)
    s = rng.normal(0, sigma, (4000, n)).std(axis=1, ddof=1)
    printed = np.median([mde_log(c, n - 1, x / math.sqrt(n)) for x in s[:400]])
    d = rng.normal(-printed, sigma, (8000, n))
    found = np.mean(d.mean(1) / (d.std(1, ddof=1) / math.sqrt(n)) < -c)
    assert 0.77 <= found <= 0.83


def test_pairs_for_mde_is_the_fewest_pairs_whose_mde_reaches_the_target():
    n = pairs_for_mde(0.05, 5.0)

    def mde(k):
        power = claim_power(0.8, k)
        return (
            1 - math.exp(-mde_log(stats.t.ppf(0.975, k - 1), k - 1, 0.05 / math.sqrt(k), power))
        ) * 100

    assert mde(n) <= 5.0 < mde(n - 1)


def outlier_host(rng, spread=0.05, share=0.05):
    """Runs as ``host``'s, but ``share`` of them 2x slower and not flagged (issue 20's model)."""

    def run(log_mu=0.0):
        slow = math.log(2.0) if rng.random() < share else 0.0
        return list(np.exp(log_mu + slow + rng.normal(0, spread) + rng.normal(0, 0.03, 5)))

    return run


def test_the_mde_is_met_unless_a_variant_run_was_set_aside_as_an_outlier():
    """Three pairs: the effect at the median MDE printed under A/A is found with the stated 80%
    on a clean host, and on a host where 5% of runs are 2x slower and unseen (the allowance)
    whenever no variant run was set aside: a variant run set aside is put back before FASTER
    stands (afbench.verdict.screen), so those experiments find less (a user pays for that run)."""
    found, put_back = {}, 0.0
    for share in (0.05, 0.0):
        rng = np.random.default_rng(5)
        run = outlier_host(rng, share=share)
        mdes = [
            compare_runs([run() for _ in range(3)], [run() for _ in range(3)]).mde_pct
            for _ in range(600)
        ]
        true = -math.log(1 - np.median([m for m in mdes if m is not None]) / 100)
        speeds = [
            compare_runs([run() for _ in range(3)], [run(-true) for _ in range(3)])
            for _ in range(1500)
        ]
        clean = [
            s.decision == FASTER
            for s in speeds
            if s.mde_pct is not None and not s.n_outliers_variant
        ]
        found[share] = np.mean(clean)
        if share:
            put_back = np.mean([s.decision == FASTER for s in speeds if s.n_outliers_variant])
        assert found[share] >= 0.80 - 3 * math.sqrt(0.8 * 0.2 / len(clean)), share
    assert found[0.0] > found[0.05] > put_back


def test_the_screen_misses_what_the_mde_allowance_says_it_misses():
    """SCREEN_MISS re-measured against the outlier screen as it is: a change to the screen
    must change the table (bench/verdict_sim.py --screen-miss prints it)."""
    from afbench.verdict.runs import outlier_runs

    rng = np.random.default_rng(3)
    for n in (3, 5, 8):
        has = miss = 0
        while has < 600:
            slow = rng.random(n) < 0.05
            seen = set(outlier_runs(rng.normal(0, 0.05, n) + math.log(2) * slow))
            has += int(slow.sum())
            miss += sum(int(k not in seen) for k in np.flatnonzero(slow))
        assert abs(miss / has - SCREEN_MISS[n]) < 3 * math.sqrt(0.25 / 600) + 0.01, n


def test_sequential_stops_at_the_first_look_for_a_large_effect():
    rng = np.random.default_rng(4)
    run = host(rng, spread=0.005, within=0.005)
    speed = run_sequential(lambda: (run(), run(math.log(0.7))))
    assert speed.decision == FASTER and speed.n_pairs == 3 and speed.stop_reason == "excludes_zero"


def test_sequential_replaces_a_contended_pair_and_names_it():
    rng = np.random.default_rng(6)
    run = host(rng, spread=0.005, within=0.005)
    test = SequentialTest(Design(rounds=AUTO))
    look = test.add(run(math.log(1.9)), run(math.log(0.7)), contended=(True, False))
    looks = [test.add(run(), run(math.log(0.7))) for _ in range(3)]
    assert not looks[1].stop and looks[2].stop  # the set-aside pair is not a look
    assert looks[2].n_pairs == 3 and looks[2].n_pairs_run == 4
    assert looks[2].speed.set_aside[0].reason == "contended"
    assert look.speed.ci_low_pct is None


def test_sequential_a_a_error_rate_holds_its_level():
    rng = np.random.default_rng(8)
    run = host(rng)
    calls = []
    for _ in range(150):
        speed = run_sequential(lambda: (run(), run()), precision_pct=None)
        calls.append(speed.decision in (FASTER, SLOWER))
    assert np.mean(calls) <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 150)


def test_the_verdict_library_imports_no_torch_pandas_matplotlib_or_pydantic():
    code = (
        "import sys, afbench.verdict as v; v.compare_runs([[1.0, 1.1]], [[0.9, 1.0]]);"
        "print(sorted(m for m in ('torch', 'pandas', 'matplotlib', 'pydantic') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
