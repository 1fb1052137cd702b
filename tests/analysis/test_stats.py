"""Descriptive statistics and the confidence interval of the gain."""

from __future__ import annotations

import math

import numpy as np
import pytest

from afbench.analysis.stats import describe, percentile, t_cdf, t_interval_of_gain, t_ppf


def test_describe_summarises_a_sample():
    d = describe([0.30, 0.28, 0.29, 0.31, 0.27])
    assert d["n"] == 5
    assert d["mean"] == pytest.approx(0.29)
    assert d["std"] == pytest.approx(np.std([0.30, 0.28, 0.29, 0.31, 0.27], ddof=1))
    assert d["cv"] == pytest.approx(d["std"] / 0.29)
    assert (d["min"], d["max"]) == (0.27, 0.31)
    assert d["p50"] == pytest.approx(0.29)
    assert d["p90"] == pytest.approx(0.306)


def test_describe_of_one_value_has_undefined_spread():
    d = describe([0.5])
    assert d["n"] == 1 and d["mean"] == 0.5
    assert math.isnan(d["std"]) and math.isnan(d["cv"])


@pytest.mark.parametrize("values", [[], [1.0, math.nan], [math.inf]])
def test_describe_rejects_empty_or_non_finite_samples(values):
    with pytest.raises(ValueError):
        describe(values)


def test_percentile_interpolates_linearly():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([1, 2, 3, 4], 100) == 4
    with pytest.raises(ValueError):
        percentile([1, 2], 101)


@pytest.mark.parametrize(
    ("p", "df", "quantile"),
    [
        (0.975, 1, 12.706204736),
        (0.975, 10, 2.228138852),
        (0.995, 30, 2.749995654),
        (0.95, 4, 2.131846786),
        (0.025, 10, -2.228138852),
    ],
)
def test_t_quantile_matches_tables(p, df, quantile):
    assert t_ppf(p, df) == pytest.approx(quantile, abs=1e-8)
    assert t_cdf(quantile, df) == pytest.approx(p, abs=1e-10)


def test_t_quantile_tends_to_normal():
    assert t_ppf(0.975, math.inf) == pytest.approx(1.959963985)
    assert t_ppf(0.975, 1e7) == pytest.approx(1.959963985, abs=1e-6)


def test_gain_interval_centres_on_gain_of_the_means():
    baseline = [0.300, 0.305, 0.295, 0.302, 0.298]
    variant = [0.250, 0.255, 0.245, 0.252, 0.248]
    gain, low, high = t_interval_of_gain(baseline, variant)
    assert gain == pytest.approx((1 - 0.25 / 0.30) * 100)
    assert low < gain < high
    assert high - gain == pytest.approx(gain - low)
    assert low > 0  # a clear 16.7% gain excludes zero


def test_gain_interval_matches_welch_delta_method_by_hand():
    b = np.array([10.0, 12.0, 11.0, 13.0])
    v = np.array([9.0, 9.5, 10.5, 8.0, 9.0])
    mb, mv = b.mean(), v.mean()
    term_v = v.var(ddof=1) / (len(v) * mb**2)
    term_b = mv**2 * b.var(ddof=1) / (len(b) * mb**4)
    df = (term_v + term_b) ** 2 / (term_v**2 / (len(v) - 1) + term_b**2 / (len(b) - 1))
    half = t_ppf(0.95, df) * math.sqrt(term_v + term_b) * 100
    gain, low, high = t_interval_of_gain(b, v, level=0.90)
    assert (low, high) == pytest.approx((gain - half, gain + half))


def test_noisy_small_gain_interval_includes_zero():
    gain, low, high = t_interval_of_gain([0.30, 0.36, 0.27, 0.33], [0.31, 0.26, 0.35, 0.30])
    assert low < 0 < high


def test_interval_without_spread_collapses_to_the_gain():
    assert t_interval_of_gain([2.0, 2.0], [1.0, 1.0]) == (50.0, 50.0, 50.0)


def test_wider_level_gives_wider_interval():
    b, v = [1.0, 1.1, 0.9, 1.05], [0.9, 0.95, 0.85, 0.92]
    _, lo90, hi90 = t_interval_of_gain(b, v, level=0.90)
    _, lo99, hi99 = t_interval_of_gain(b, v, level=0.99)
    assert lo99 < lo90 and hi99 > hi90


@pytest.mark.parametrize(
    ("baseline", "variant", "level"),
    [([1.0], [1.0, 2.0], 0.95), ([1.0, 2.0], [1.0, 2.0], 1.0), ([-1.0, -2.0], [1.0, 2.0], 0.95)],
)
def test_interval_rejects_too_few_values_bad_level_or_non_positive_baseline(
    baseline, variant, level
):
    with pytest.raises(ValueError):
        t_interval_of_gain(baseline, variant, level)


def test_finite_mean_leaves_out_missing_and_non_finite_entries():
    from afbench.analysis.stats import finite_mean

    assert finite_mean([1.0, None, float("nan"), 3.0, float("inf")]) == 2.0
    assert finite_mean([None, float("nan")]) is None
    assert finite_mean([]) is None
