"""The product's verdicts from stored step times (compare.speed_of): one round, fixed paired
rounds and rounds=auto, on synthetic measured windows; no run is launched."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from afbench.collect import Collected
from afbench.compare import speed_of
from afbench.config import validate_config
from afbench.config.verdict import VerdictConfig
from afbench.plan import add_round, make_plan
from afbench.report.render import labels, verdict_words
from afbench.runspec import AutoStop
from afbench.store import ExperimentRecord

# a measured window with a 6-11% step-to-step spread (seconds), in step order
SPREAD = [1.00, 1.09, 0.94, 1.11, 0.97, 1.04, 0.92, 1.07, 0.99, 1.10]


def collected(
    compose_cfg,
    tmp_path: Path,
    steps: dict[str, list[float]],
    *overrides: str,
    stops: dict[str, AutoStop] | None = None,
    added: int = 0,
    calibration: dict | None = None,
) -> Collected:
    """A Collected of sft_af_compare's plan (with ``added`` rounds appended as the adaptive
    loop appends them) whose verdict-phase windows are ``steps``."""
    plan = make_plan(
        validate_config(compose_cfg("experiment=sft_af_compare", *overrides)), tmp_path
    )
    for _ in range(added):
        plan = add_round(plan, ["af_on"])
    if stops:
        plan = plan.model_copy(update={"auto_stops": stops})
    empty = pd.DataFrame()
    experiment = ExperimentRecord(calibration=calibration)
    return Collected(tmp_path, plan, experiment, empty, empty, empty, {}, steps)


#: A host calibration fit for one round: a 3% run-to-run spread on 24 pairs.
CALIBRATION = {
    "kind": "cpu|builtin|sft|qwen3_tiny|seq256|gbs4|window5",
    "host_id": "0123456789abcdef",
    "spread_pct": 3.0,
    "df": 23,
    "n_pairs": 24,
    "n_outlier_pairs": 0,
    "n_experiments": 2,
    "updated_at": "2026-12-02T06:00:00+00:00",
}


def note(speed) -> str:
    return str(verdict_words("en").speed_note(speed))


def rounds(n: int, factors: list[float], noise: list[float]) -> dict[str, list[float]]:
    """``n`` rounds: baseline window SPREAD x noise[k], variant window x factors[k]."""
    out = {}
    for k in range(n):
        base = [t * noise[k] for t in SPREAD]
        out[f"af_off-train-r{k + 1}"] = base
        out[f"af_on-train-r{k + 1}"] = [t * factors[k] for t in base[::-1]]
    return out


def test_one_round_without_a_calibration_is_inconclusive_beside_the_reference(
    compose_cfg, tmp_path
):
    col = collected(
        compose_cfg,
        tmp_path,
        {"af_off-train-r1": SPREAD, "af_on-train-r1": [t * 0.6 for t in SPREAD]},
    )
    speed = speed_of(col, "af_on", VerdictConfig())
    assert speed.gain_pct == pytest.approx(40.0, abs=1e-6)
    assert speed.decision == "INCONCLUSIVE" and speed.design == "one_round"
    assert speed.no_interval_reason == "uncalibrated" and speed.ci_low_pct is None
    assert speed.reference_verdict == "AF_ON_FASTER"  # the reference's gain > 0 rule
    assert "reference rule: gain > 0, one round: AF_ON_FASTER" in note(speed)
    assert "experiment=calibrate_host" in note(speed)


def test_one_round_on_a_calibrated_host_decides_a_large_gain_and_says_which_calibration(
    compose_cfg, tmp_path
):
    large = speed_of(
        collected(
            compose_cfg,
            tmp_path / "l",
            {"af_off-train-r1": SPREAD, "af_on-train-r1": [t * 0.6 for t in SPREAD]},
            calibration=CALIBRATION,
        ),
        "af_on",
        VerdictConfig(),
    )
    assert large.decision == "FASTER" and large.ci_low_pct > 0
    assert large.spread_source == "calibration" and large.calibration["n_pairs"] == 24
    assert "from the host calibration: 3.00% per run on 24 rounds" in note(large)
    small = speed_of(
        collected(
            compose_cfg,
            tmp_path / "s",
            {"af_off-train-r1": SPREAD, "af_on-train-r1": [t * (1 - 0.0087) for t in SPREAD]},
            calibration=CALIBRATION,
        ),
        "af_on",
        VerdictConfig(),
    )
    assert small.decision == "INCONCLUSIVE" and small.ci_low_pct < 0 < small.ci_high_pct
    assert small.mde_pct > 2 * 0.87  # the design could not have seen a +0.87% gain


def test_one_round_whose_runs_left_their_calibration_is_not_decided_with_it(compose_cfg, tmp_path):
    """experiment.json's calibration keeps what each kind of run took when calibrated; a
    round whose baseline now takes 30% longer (the host changed since) is not decided with it,
    and the words say by how much and what to do, in English and Chinese."""
    median = sorted(SPREAD)[len(SPREAD) // 2 - 1 : len(SPREAD) // 2 + 1]
    step = math.sqrt(median[0] * median[1])  # the window's median step time
    where = {"step_s": step, "n_runs": 24, "spread_pct": 3.0, "df": 23}
    cal = {**CALIBRATION, "baseline_runs": where, "variant_runs": {**where, "step_s": step * 0.6}}
    steps = {"af_off-train-r1": SPREAD, "af_on-train-r1": [t * 0.6 for t in SPREAD]}
    fits = speed_of(
        collected(compose_cfg, tmp_path / "f", steps, calibration=cal), "af_on", VerdictConfig()
    )
    assert fits.decision == "FASTER" and fits.calibration_shift_pct == pytest.approx(0, abs=1e-6)
    assert "the runs fit what their kinds took then (farthest +0.0%)" in note(fits)
    slower = {
        "af_off-train-r1": [t * 1.3 for t in SPREAD],
        "af_on-train-r1": steps["af_on-train-r1"],
    }
    stale = speed_of(
        collected(compose_cfg, tmp_path / "s", slower, calibration=cal), "af_on", VerdictConfig()
    )
    assert stale.decision == "INCONCLUSIVE" and stale.no_interval_reason == "calibration_stale"
    assert stale.calibration_shift_pct == pytest.approx(30.0)
    assert stale.reference_verdict == "AF_ON_FASTER"  # the reference's quick rule stays beside
    en = note(stale)
    assert "a run took +30.0% against what its kind of run took when calibrated" in en
    assert "experiment=calibrate_host" in en and "verdict.rounds=5" in en
    zh = str(verdict_words("zh").speed_note(stale))
    assert "+30.0%" in zh and "重新校准" in zh
    # which calibration refused it (summary.json), when it was made (the report: its kind is
    # the history's key, not something to act on), a calibration without run locations
    # says it was unchecked
    assert stale.calibration["kind"] == CALIBRATION["kind"]
    assert "host calibration updated " in en and CALIBRATION["kind"] not in en
    old = speed_of(
        collected(compose_cfg, tmp_path / "o", slower, calibration=CALIBRATION),
        "af_on",
        VerdictConfig(),
    )
    assert old.decision == "FASTER" and "were not checked against it" in note(old)
    # the report's method sentence does not say there was no calibration: there was one
    from types import SimpleNamespace

    for lang in ("en", "zh"):
        method = str(verdict_words(lang).method_sentence([SimpleNamespace(speed=stale)]))
        assert method and method != labels(lang)["v_method_one_round"]
    assert "host calibration" in str(
        verdict_words("en").method_sentence([SimpleNamespace(speed=stale)])
    )


def test_paired_repeats_faster_and_slower(compose_cfg, tmp_path):
    drift = [1.0, 1.05, 0.97]  # the machine moves between rounds; pairs move together
    fast = speed_of(
        collected(
            compose_cfg,
            tmp_path / "f",
            rounds(3, [0.9, 0.905, 0.895], drift),
            "verdict.rounds=3",
        ),
        "af_on",
        VerdictConfig(),
    )
    assert fast.decision == "FASTER" and fast.design == "fixed" and fast.n_pairs == 3
    assert fast.gain_pct == pytest.approx(10.0, abs=0.6) and 0 < fast.ci_low_pct
    slow = speed_of(
        collected(
            compose_cfg,
            tmp_path / "s",
            rounds(3, [1.1, 1.105, 1.095], drift),
            "verdict.rounds=3",
        ),
        "af_on",
        VerdictConfig(),
    )
    assert slow.decision == "SLOWER" and slow.ci_high_pct < 0


def test_paired_repeats_no_gain_excludes_the_margin_and_noisy_ones_are_inconclusive(
    compose_cfg, tmp_path
):
    flat = [1.0, 1.002, 0.998, 1.001, 0.999, 1.0, 1.001, 0.999]
    drift = [1.0, 1.04, 0.96, 1.02, 0.98, 1.03, 0.97, 1.01]
    none = speed_of(
        collected(compose_cfg, tmp_path / "n", rounds(8, flat, drift), "verdict.rounds=8"),
        "af_on",
        VerdictConfig(),
    )
    assert none.decision == "NO_GAIN" and none.ci_low_pct < 0 < none.ci_high_pct < 2.0
    noisy = [1.0, 1.12, 0.9, 1.1]
    wide = speed_of(
        collected(compose_cfg, tmp_path / "w", rounds(4, noisy, drift), "verdict.rounds=4"),
        "af_on",
        VerdictConfig(),
    )
    assert wide.decision == "INCONCLUSIVE" and wide.ci_high_pct > 2.0 and wide.ci_low_pct < 0
    # the report says what it would take: pairs for an MDE of the 2% margin at this spread
    assert wide.pairs_for_min_gain > 4
    n = wide.pairs_for_min_gain
    assert f"; roughly {n} rounds (verdict.rounds={n}) for an MDE of 2% at this spread" in note(
        wide
    )
    assert "for an MDE" not in note(none)  # decided


def test_auto_recomputes_the_sequential_interval_and_keeps_the_recorded_stop(compose_cfg, tmp_path):
    factors = [1.2, 1.21, 1.19, 1.2]
    steps = rounds(4, factors, [1.0, 1.03, 0.98, 1.01])
    col = collected(
        compose_cfg,
        tmp_path,
        steps,
        "verdict.rounds=auto",
        stops={"af_on": AutoStop(reason="excludes_zero", n_pairs=4)},
        added=1,
    )
    auto = speed_of(col, "af_on", VerdictConfig())
    fixed = speed_of(
        collected(compose_cfg, tmp_path / "x", steps, "verdict.rounds=4"),
        "af_on",
        VerdictConfig(),
    )
    assert auto.design == "sequential" and auto.stop_reason == "excludes_zero"
    assert auto.decision == "SLOWER" and auto.n_pairs == 4
    assert auto.gain_pct == pytest.approx(fixed.gain_pct, abs=0.5)
    # the repeated CI is wider than a single look's interval: it pays for the looks
    assert auto.ci_high_pct - auto.ci_low_pct > fixed.ci_high_pct - fixed.ci_low_pct
    assert "stopped: interval excludes 0" in note(auto)


def test_auto_without_a_recorded_stop_reads_interrupted(compose_cfg, tmp_path):
    steps = rounds(3, [1.0, 1.1, 0.9], [1.0, 1.0, 1.0])
    auto = speed_of(
        collected(compose_cfg, tmp_path, steps, "verdict.rounds=auto"), "af_on", VerdictConfig()
    )
    assert auto.stop_reason == "interrupted" and auto.decision == "INCONCLUSIVE"
    assert math.isfinite(auto.mde_pct)


def test_bursts_are_counted_per_side_and_left_out_of_the_median(compose_cfg, tmp_path):
    burst = list(SPREAD)
    burst[4] = 4.0  # one step four times as long: a load burst
    col = collected(compose_cfg, tmp_path, {"af_off-train-r1": burst, "af_on-train-r1": SPREAD})
    speed = speed_of(col, "af_on", VerdictConfig())
    assert (speed.n_bursts_baseline, speed.n_bursts_variant) == (1, 0)
    assert abs(speed.gain_pct) < 5  # the median resists it; a mean would read +27%
    assert speed.n_leading_baseline == 0  # mid-window: no caveat about the window's start


def test_a_window_opened_by_compilation_is_named_and_does_not_decide(compose_cfg, tmp_path):
    from types import SimpleNamespace

    from afbench.compare.sides import caveats_of
    from afbench.messages import render
    from afbench.store import MemoryChange

    steps = rounds(3, [1.0, 1.0, 1.0], [1.0, 1.03, 0.98])
    for k in (1, 2, 3):  # the variant's first measured step still compiling (5x)
        steps[f"af_on-train-r{k}"][0] *= 5.0
    speed = speed_of(
        collected(compose_cfg, tmp_path, steps, "verdict.rounds=3"), "af_on", VerdictConfig()
    )
    assert (speed.n_leading_variant, speed.n_leading_baseline) == (3, 0)
    side = SimpleNamespace  # caveats_of reads a side's name and recompile only
    msgs = caveats_of(
        side(name="af_off", recompile=None),
        side(name="af_on", recompile=None),
        MemoryChange(),
        speed,
    )
    assert [m.key for m in msgs] == ["caveat_window_early"]
    assert "window started too early: 3 step(s) of af_on and 0 of af_off" in msgs[0].text
    assert "统计窗口开始得太早：af_on 有 3 步" in render(msgs[0], labels("zh"))


def test_stalls_set_aside_are_named_with_their_interval(compose_cfg, tmp_path):
    noise = [1.0, 1.02, 0.99, 1.01, 0.98]
    steps = rounds(5, [1.0, 2.0, 1.0, 1.0, 1.0], noise)  # the variant's 2nd run stalls 2x
    speed = speed_of(
        collected(compose_cfg, tmp_path, steps, "verdict.rounds=5"), "af_on", VerdictConfig()
    )
    assert speed.decision != "NO_GAIN" and speed.screen == "changes_answer"
    assert (speed.n_outliers_baseline, speed.n_outliers_variant) == (0, 1)
    en = note(speed)
    assert "the outlier runs set aside (0 baseline / 1 variant) change the answer" in en
    assert f"[{speed.with_outliers_low_pct:+.2f}%, " in en
    zh = str(verdict_words("zh").speed_note(speed))
    assert "被剔除的离群运行（基线 0 次 / 变体 1 次）会改变结论" in zh


@pytest.mark.parametrize("factor, decision", [(0.99, "INCONCLUSIVE"), (0.7, "FASTER")])
def test_a_calibrated_round_says_how_many_pairs_the_2pct_margin_needs(
    compose_cfg, tmp_path, factor, decision
):
    # undecided, or deciding a large effect (issue 20 item 6): either way the line says what
    # the smaller effect of the 2% margin would take
    speed = speed_of(
        collected(
            compose_cfg,
            tmp_path,
            {"af_off-train-r1": SPREAD, "af_on-train-r1": [t * factor for t in SPREAD]},
            calibration=CALIBRATION,
        ),
        "af_on",
        VerdictConfig(),
    )
    assert speed.decision == decision and speed.mde_pct > 2
    n = speed.pairs_for_min_gain
    assert n > 1 and f"roughly {n} rounds (verdict.rounds={n}) for an MDE of 2%" in note(speed)


@pytest.mark.parametrize("contention, mean", [("set_aside", 1.0), ("keep", 4.0 / 3)])
def test_a_sides_mean_step_time_leaves_out_a_contended_run_as_its_verdict_does(
    compose_cfg, tmp_path, contention, mean
):
    """The speed table's mean step time and tokens/s agree with the verdict: a run measured as
    contended is left out of them unless verdict.contention=keep (an unmeasured run, None,
    stays in)."""
    from afbench.compare.sides import side

    col = collected(compose_cfg, tmp_path, {})
    ids = [r.run_id for r in col.plan.runs if r.variant == "af_on" and r.phase == "train"][:3]
    runs = pd.DataFrame(
        {
            "run_id": ids,
            "status": ["OK"] * 3,
            "log_error": [""] * 3,
            "mean_step_s": [1.0, 2.0, 1.0],
            "tokens_per_s": [100.0, 50.0, 100.0],
            "contended": [False, True, None],
            "first_step_s": [5.0, 5.0, 5.0],
        }
    )
    col = Collected(tmp_path, col.plan, col.experiment, runs, runs.iloc[:0], runs.iloc[:0], {}, {})
    got = side(col, "af_on", "train", "sft", contention == "set_aside")
    assert got.mean_step_s == pytest.approx(mean)
    assert got.tokens_per_s == pytest.approx(100.0 if contention == "set_aside" else 250 / 3)
    assert got.statuses == ["OK"] * 3 and got.ok


def test_the_calibration_advice_names_the_recipe_and_switch_of_the_comparison(
    compose_cfg, tmp_path
):
    """issue 34: the inference recipe pointed to calibrate_host with autofuse=true; the advice
    is derived from the comparison's workload (the calibrate_host* recipe whose scheduler it
    is) and its variant's overrides, for any recipe."""
    cfg = validate_config(compose_cfg("experiment=infer_rmsnorm_compare"))
    empty = pd.DataFrame()
    col = Collected(
        tmp_path,
        make_plan(cfg, tmp_path),
        ExperimentRecord(config=cfg),
        empty,
        empty,
        empty,
        {},
        {"baseline-infer-r1": SPREAD, "add_rmsnorm-infer-r1": SPREAD},
    )
    speed = speed_of(col, "add_rmsnorm", VerdictConfig())
    assert speed.no_interval_reason == "uncalibrated"
    text = note(speed)
    assert "python -m afbench experiment=calibrate_host_infer with the same model" in text
    assert "once with optimization.add_rmsnorm=true" in text and "autofuse" not in text
    cfg = validate_config(compose_cfg("experiment=sft_af_compare"))
    sft = Collected(
        tmp_path,
        make_plan(cfg, tmp_path),
        ExperimentRecord(config=cfg),
        empty,
        empty,
        empty,
        {},
        {"af_off-train-r1": SPREAD, "af_on-train-r1": SPREAD},
    )
    text = note(speed_of(sft, "af_on", VerdictConfig()))
    assert "experiment=calibrate_host with" in text and "optimization.autofuse=true" in text


@pytest.mark.parametrize("repeats, one_round_hint", [(1, True), (5, False)])
def test_only_a_one_round_experiment_is_told_one_round_needs_a_calibration(
    compose_cfg, tmp_path, repeats, one_round_hint
):
    """issue 34: a 5-round job said "one round also needs a host calibration"."""
    col = collected(
        compose_cfg,
        tmp_path,
        rounds(repeats, [0.9] * repeats, [1.0] * repeats),
        f"verdict.rounds={repeats}",
    )
    busy = {
        rid: type(
            "R", (), {"contention": {"scope": "window", "wall_s": 1.0, "run_queue_wait_pct": 50.0}}
        )()
        for rid in col.window_steps
        if rid.startswith("af_off")
    }
    col = Collected(
        tmp_path, col.plan, col.experiment, col.runs, col.runs, col.runs, busy, col.window_steps
    )
    speed = speed_of(col, "af_on", VerdictConfig())
    assert speed.no_interval_reason == "no_pairs_left"
    assert ("one round also needs a host calibration" in note(speed)) is one_round_hint
