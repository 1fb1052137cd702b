"""Quick-round verdict (docs/reference.md §1)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from afbench.verdict.words import (
    NO_GAIN,
    RUN_FAILED,
    SKIPPED,
    gain_pct,
    quick_verdict,
    verdict_label,
)


def test_gain_is_time_saved_in_percent_of_baseline():
    assert gain_pct(0.30, 0.24) == pytest.approx(20.0)
    assert gain_pct(0.24, 0.30) == pytest.approx(-25.0)


@pytest.mark.parametrize("baseline", [0.0, -1.0, math.nan, math.inf])
def test_gain_needs_a_finite_positive_baseline(baseline):
    with pytest.raises(ValueError):
        gain_pct(baseline, 0.2)


@pytest.mark.parametrize(
    ("variant", "label"),
    [
        ("af_on", "AF_ON_FASTER"),
        ("add-rmsnorm", "ADD_RMSNORM_FASTER"),
        ("npugraph ex.2", "NPUGRAPH_EX_2_FASTER"),
    ],
)
def test_label_upper_cases_and_replaces_non_alphanumerics(variant, label):
    assert verdict_label(variant) == label


def test_faster_variant_gets_its_label():
    assert quick_verdict("af_on", 0.30, 0.25, failed=False) == "AF_ON_FASTER"


def test_slower_or_equal_variant_is_no_gain():
    assert quick_verdict("af_on", 0.25, 0.30, failed=False) == NO_GAIN
    assert quick_verdict("af_on", 0.25, 0.25, failed=False) == NO_GAIN


def test_failed_run_is_run_failed_even_when_faster():
    assert quick_verdict("af_on", 0.30, 0.25, failed=True) == RUN_FAILED


@pytest.mark.parametrize(
    ("baseline", "variant"), [(None, 0.2), (0.2, None), (None, None), (0.2, math.nan)]
)
def test_missing_mean_from_an_invalid_log_is_run_failed(baseline, variant):
    assert quick_verdict("af_on", baseline, variant, failed=False) == RUN_FAILED


def test_verdict_constants_are_their_names():
    assert (NO_GAIN, RUN_FAILED, SKIPPED) == ("NO_GAIN", "RUN_FAILED", "SKIPPED")


def test_analysis_package_imports_without_torch():
    import afbench

    src = str(Path(afbench.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    code = "import sys, afbench.analysis; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
