"""A sweep's main effects (afbench.verdict.effects): factorial contrasts of the combinations'
paired gains, Holm-adjusted across keys; small seeded versions of bench/sweep_effects_sim.py."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from afbench.verdict import FASTER, SLOWER, compare_runs
from afbench.verdict.effects import Contrast, PairedGain, factorial_contrasts, holm, main_effects
from afbench.verdict.power import t_quantile


def gain(name: str, log_ratio: float, se: float = 0.01, df: float = 4.0) -> PairedGain:
    return PairedGain(name=name, log_ratio=log_ratio, se=se, df=df, n_pairs=5)


def grid(n_keys: int) -> list[dict[str, str]]:
    return [
        dict(zip([f"k{i}" for i in range(n_keys)], v))
        for v in itertools.product(("off", "on"), repeat=n_keys)
    ]


def test_holm_multiplies_the_ordered_p_values_and_keeps_them_monotone():
    # sorted 0.01, 0.03, 0.04: x3, x2 (0.06), x1 (0.04, raised to the 0.06 before it)
    assert holm([0.04, 0.01, 0.03]) == pytest.approx([0.06, 0.03, 0.06])
    assert holm([0.9, 0.8]) == [1.0, 1.0]
    with pytest.raises(ValueError, match="within"):
        holm([1.5])


def test_a_key_effect_is_the_mean_over_cells_of_the_paired_gain_differences():
    settings = grid(2)  # (off,off) is the baseline: no term
    gains = [None, gain("b", 0.10), gain("a", -0.20), gain("ab", -0.04)]
    effects = {
        (k, v): (c, d)
        for k, v, c, d in factorial_contrasts(settings, gains, ["k0", "k1"], settings[0])
    }
    k0, dropped = effects[("k0", "on")]
    # cells k1=off: D(on,off) - 0 = -0.20; k1=on: D(on,on) - D(off,on) = -0.14
    assert k0.estimate == pytest.approx((-0.20 + (-0.04 - 0.10)) / 2) and dropped == 0
    assert k0.se == pytest.approx(math.sqrt(3 * (0.01 / 2) ** 2))
    assert {g.name for _, g in k0.terms} == {"a", "ab", "b"}
    assert effects[("k1", "on")][0].estimate == pytest.approx((0.10 + (-0.04 + 0.20)) / 2)


def test_a_cell_without_a_paired_gain_is_dropped_and_counted():
    settings = grid(2)
    gains = [None, gain("b", 0.1), None, gain("ab", 0.0)]  # (on,off) has no result
    effects = {
        k: (c, d) for k, _, c, d in factorial_contrasts(settings, gains, ["k0", "k1"], settings[0])
    }
    k0, dropped = effects["k0"]
    assert dropped == 1 and [g.name for _, g in k0.terms] == ["ab", "b"]
    assert k0.estimate == pytest.approx(0.0 - 0.1)
    only = factorial_contrasts(settings[:2], [None, None], ["k0", "k1"], settings[0])
    assert only == [("k1", "on", None, 1)]


def test_an_interval_excludes_zero_exactly_when_holm_rejects():
    rng = np.random.default_rng(3)
    for _ in range(200):
        contrasts = [
            Contrast(
                (
                    (
                        1.0,
                        gain(
                            "x",
                            float(rng.normal(0, 0.02)),
                            se=float(rng.uniform(0.003, 0.02)),
                            df=float(rng.integers(2, 12)),
                        ),
                    ),
                )
            )
            for _ in range(int(rng.integers(1, 5)))
        ]
        for e in main_effects(contrasts, confidence=0.95):
            called = e.decision in (FASTER, SLOWER)
            assert called == (e.p_holm <= 0.05) == (e.ci_low_pct > 0 or e.ci_high_pct < 0)
            assert e.level >= 0.95 and e.family == len(contrasts)


def test_the_term_of_a_speed_gives_back_its_interval():
    rng = np.random.default_rng(5)
    base = [list(np.exp(rng.normal(0, 0.03) + rng.normal(0, 0.02, 6))) for _ in range(4)]
    var = [list(np.exp(-0.1 + rng.normal(0, 0.03) + rng.normal(0, 0.02, 6))) for _ in range(4)]
    speed = compare_runs(base, var, confidence=0.9)
    g = PairedGain.of("v", speed)
    crit = t_quantile(0.95, g.df)
    assert (1 - math.exp(g.log_ratio + crit * g.se)) * 100 == pytest.approx(speed.ci_low_pct)
    assert (1 - math.exp(g.log_ratio - crit * g.se)) * 100 == pytest.approx(speed.ci_high_pct)
    assert g.n_pairs == 4 and g.df == 3
    assert PairedGain.of("none", compare_runs(base[:1], var[:1])) is None  # no interval


@pytest.mark.parametrize("n_keys", [2, 3])
def test_an_unchanged_sweep_calls_a_main_effect_at_most_at_its_family_wise_level(n_keys):
    """Every combination's paired gain is t-distributed noise around 0 (3 pairs, 2 df): the
    share of sweeps with any main effect called stays within 5% plus Monte Carlo error."""
    rng = np.random.default_rng(10 + n_keys)
    settings = grid(n_keys)
    keys = list(settings[0])
    n, called = 1500, 0
    for _ in range(n):
        gains = [None] + [
            PairedGain("c", float(np.mean(d)), float(np.std(d, ddof=1) / math.sqrt(3)), 2.0, 3)
            for d in rng.normal(0, 0.04, (len(settings) - 1, 3))
        ]
        contrasts = [c for *_, c, _ in factorial_contrasts(settings, gains, keys, settings[0])]
        called += any(e.decision in (FASTER, SLOWER) for e in main_effects(contrasts))
    assert called / n <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / n)


def test_a_real_effect_of_one_key_is_found_and_the_others_are_not():
    settings = grid(3)
    keys = list(settings[0])
    gains = [None] + [
        gain(",".join(s.values()), math.log(0.9) if s["k0"] == "on" else 0.0, se=0.005)
        for s in settings[1:]
    ]
    contrasts = [c for *_, c, _ in factorial_contrasts(settings, gains, keys, settings[0])]
    first, *others = main_effects(contrasts)
    assert first.decision == FASTER and first.gain_pct == pytest.approx(10.0)
    assert first.ci_low_pct < 10.0 < first.ci_high_pct
    assert [e.decision for e in others] == ["NO_GAIN", "NO_GAIN"]


def test_main_effects_refuse_a_bad_level_and_an_empty_contrast():
    with pytest.raises(ValueError, match="confidence"):
        main_effects([], confidence=1.0)
    with pytest.raises(ValueError, match="at least one"):
        main_effects([Contrast(())])
