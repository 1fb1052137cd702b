"""The history gate with the record as the unit (issue 30): ``history check`` on nightly
series written to SQLite, whose night levels move; the rates themselves are measured in
bench/history_gate_sim.py (bench/README.md §13)."""

from __future__ import annotations

import math
import random
from datetime import timedelta

import numpy as np
import pytest
from scipy import stats

from afbench.history.__main__ import main
from afbench.history.check import compare_history, is_regression
from afbench.history.trend import change_points, decorrelate
from afbench.verdict import MIN_RECORDS, compare_records
from test_history import T0, _write_all, planted


def _nightly(url: str, levels: list[float], runs: int = 5) -> None:
    """One record a night, its step times 10 ms x (1 + level) x 3% step noise (test_history's
    planted: two variants, ``runs`` runs each)."""
    _write_all(
        url,
        *[
            planted("nightly", T0 + timedelta(days=j), 1 + lv, 100 + j, runs=runs)
            for j, lv in enumerate(levels)
        ],
    )


def _night_levels(seed: int, n: int, spread: float) -> list[float]:
    rng = random.Random(seed)
    return [math.exp(rng.gauss(0, spread)) - 1 for _ in range(n)]


def test_an_unchanged_nightly_series_passes_and_a_10pct_slowdown_fails_on_its_night(
    tmp_path, capsys
):
    levels = _night_levels(31, 11, 0.03)  # 3% night spread, 5 runs per record
    unchanged = f"sqlite:///{tmp_path / 'same.sqlite'}"
    _nightly(unchanged, levels)
    assert main(["--url", unchanged, "check", "--experiment", "nightly"]) == 0
    out = capsys.readouterr().out
    assert out.count("OK nightly/") == 2
    assert "prediction interval of record means" in out and "10 earlier record(s)" in out
    assert "fails this check on at most 2.5% of nights" in out and "about 53% of months" in out
    slower = f"sqlite:///{tmp_path / 'slower.sqlite'}"
    _nightly(slower, levels[:-1] + [(1 + levels[-1]) * 1.10 - 1])
    assert main(["--url", slower, "check", "--experiment", "nightly", "--variant", "fused"]) == 1
    line = capsys.readouterr().out.strip()
    assert line.startswith("REGRESSION nightly/fused:")
    # against the history's mean night: this night sat 2.3% below it before the 10%
    assert 5 < float(line.split(": ")[1].split("%")[0]) < 12


def test_a_slow_night_within_the_hosts_night_spread_is_not_a_regression(tmp_path, capsys):
    """Nights spread 3.5%; the newest is 6.5% slow, unchanged. Its five runs agree with each
    other, so runs judged as independent draws call it a regression (pseudo-replication);
    the records' spread does not."""
    levels = [x / 100 for x in (-4, 4, -3, 3, -2, 2, -1, 1, -5, 5, 6.5)]
    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    _nightly(url, levels)
    assert main(["--url", url, "check", "--experiment", "nightly", "--variant", "fused"]) == 0
    assert capsys.readouterr().out.startswith("OK nightly/fused: no slowdown")
    rng = random.Random(1)
    runs = [
        [[0.01 * (1 + lv) * rng.lognormvariate(0, 0.03) for _ in range(8)] for _ in range(5)]
        for lv in levels
    ]
    history = [r for rec in runs[:-1] for r in rec]
    keys = [j for j, rec in enumerate(runs[:-1]) for _ in rec]
    assert is_regression(compare_history(history, runs[-1]), 5.0)  # runs as independent
    assert not is_regression(compare_history(history, runs[-1], history_record=keys), 5.0)


def test_the_record_gate_is_the_prediction_interval_of_record_means():
    means = [0.0, 0.02, -0.01, 0.03, -0.02, 0.01]
    history = [[[0.01 * math.exp(m)] * 4, [0.01 * math.exp(m)] * 4] for m in means]
    newest = [[0.01 * math.exp(0.08)] * 4]
    speed = compare_records(history, newest, confidence=0.9)
    k = len(means)
    se = float(np.std(means, ddof=1)) * math.sqrt(1 + 1 / k)
    c = stats.t.ppf(0.95, k - 1)
    d = 0.08 - float(np.mean(means))
    assert speed.df == k - 1 and speed.spread_source == "records"
    assert speed.gain_pct == pytest.approx((1 - math.exp(d)) * 100)
    assert speed.ci_low_pct == pytest.approx((1 - math.exp(d + c * se)) * 100)
    assert speed.ci_high_pct == pytest.approx((1 - math.exp(d - c * se)) * 100)
    # a contended history run is set aside; a record left without runs does not count
    flags = [[True, True]] + [[False, False]] * (k - 1)
    fewer = compare_records(history, newest, history_contended=flags, min_records=3)
    assert fewer.df == k - 2 and [(a.side, a.pair) for a in fewer.set_aside] == [
        ("history", 1),
        ("history", 2),
    ]
    with pytest.raises(ValueError, match="night_spread_pct"):
        compare_records(history, newest, night_spread_pct=-1.0)
    with pytest.raises(ValueError, match="history_contended"):
        compare_records(history, newest, history_contended=[[False]] * k)


def test_few_records_assume_a_night_spread_and_say_so(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    _nightly(url, [0.0, 0.065])  # one earlier record; a 6.5% slower night
    assert main(["--url", url, "check", "--experiment", "nightly", "--variant", "fused"]) == 0
    out = capsys.readouterr().out
    assert (
        f"1 earlier record(s): the record-level gate needs {MIN_RECORDS} to see how much "
        "the host moves from night to night, so a night-to-night spread of 3% is assumed"
    ) in out
    assert "plus an assumed night-to-night spread of 3%" in out
    # a host the user knows to be steady from night to night: the runs' spread alone
    assert (
        main(
            [
                "--url",
                url,
                "check",
                "--experiment",
                "nightly",
                "--variant",
                "fused",
                "--night-spread-pct",
                "0",
            ]
        )
        == 1
    )
    assert "night-to-night spread of 0% is assumed" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        main(["--url", url, "check", "--experiment", "nightly", "--night-spread-pct", "-1"])
    assert exit_.value.code == 2 and "--night-spread-pct" in capsys.readouterr().err


def test_change_points_do_not_read_autocorrelated_nights_as_new_levels():
    """An AR(1) host level (coefficient 0.8, sd 3%), 30 nights, no change: PELT on the series
    with its lag-1 scale marks a change in most series; decorrelated first (Chakar et al.
    2017) in under half as many. The coefficient is estimated as it is."""
    rng = np.random.default_rng(8)
    noise = rng.normal(0, 0.03 * math.sqrt(1 - 0.64), 20000)
    x = np.zeros(noise.size)
    for t in range(1, x.size):
        x[t] = 0.8 * x[t - 1] + noise[t]
    assert decorrelate(x)[1] == pytest.approx(0.8, abs=0.1)  # the robust ratio is noisy
    assert decorrelate(noise)[1] < 0.1
    marked = {True: 0, False: 0}
    for seed in range(200):
        rng = np.random.default_rng(seed)
        level = [rng.normal(0, 0.03)]
        for _ in range(29):
            level.append(0.8 * level[-1] + rng.normal(0, 0.03 * math.sqrt(1 - 0.64)))
        values = list(0.01 * np.exp(np.array(level)))
        for how in marked:
            marked[how] += bool(change_points(values, decorrelated=how))
    assert marked[True] * 2 < marked[False]


def test_a_record_whose_runs_were_all_contended_does_not_count_as_a_night(tmp_path, capsys):
    from test_history_contention import _shared_machine_history

    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    _shared_machine_history(url)  # 10 ms; 13 ms, every run contended; 13 ms now
    assert main(["--url", url, "check", "--experiment", "gate", "--variant", "fused"]) == 1
    assert "; 1 earlier record(s): the record-level gate needs" in capsys.readouterr().out
