"""Descriptive statistics and the confidence interval of the gain."""

from __future__ import annotations

import math

import numpy as np
import pytest

from afbench.analysis.stats import describe, percentile


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


def test_finite_mean_leaves_out_missing_and_non_finite_entries():
    from afbench.analysis.stats import finite_mean

    assert finite_mean([1.0, None, float("nan"), 3.0, float("inf")]) == 2.0
    assert finite_mean([None, float("nan")]) is None
    assert finite_mean([]) is None
