"""Loss parity and generation parity rules."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from safetensors.numpy import save_file

from afbench.compare import compile_cost, generation_parity, loss_parity
from afbench.report.render import verdict_words
from afbench.store import Parity, Side, Speed


def _steps(losses_a, losses_b):
    rows = [{"run_id": "a", "step": i + 1, "loss": x} for i, x in enumerate(losses_a)]
    rows += [{"run_id": "b", "step": i + 1, "loss": x} for i, x in enumerate(losses_b)]
    return pd.DataFrame(rows)


def test_loss_parity_match_and_divergence():
    ok = loss_parity(_steps([2.0, 1.5, 1.2], [2.0, 1.5000001, 1.2]), ["a"], ["b"], 1e-3)
    assert ok.status == "MATCH" and ok.steps_compared == 3 and len(ok.curve) == 3
    bad = loss_parity(_steps([2.0, 1.5, 1.2], [2.0, 1.5, 1.3]), ["a"], ["b"], 1e-3)
    assert bad.status == "DIVERGED" and bad.first_diverging_step == 3 and bad.diverged_at == 3


def _write_run(root, run_id, rows, logits=None):
    d = root / "runs" / run_id
    d.mkdir(parents=True)
    (d / "generations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if logits is not None:
        save_file({"logits": logits}, str(d / "logits.safetensors"))


def test_generation_parity_identical_tokens_and_bf16_ulp_logits_match(tmp_path):
    rows = [{"prompt_index": 0, "token_ids": [1, 2, 3], "text": "abc"}]
    base = np.full((3, 10), 4.0, dtype=np.float32)
    _write_run(tmp_path, "a", rows, base)
    _write_run(tmp_path, "b", rows, base + 2**-6)  # one bf16 ulp at magnitude 4
    res = generation_parity(tmp_path, ["a"], ["b"], rtol=2e-2)
    assert res.status == "MATCH" and res.logits_match


def test_generation_parity_reports_first_diverging_token_and_texts(tmp_path):
    _write_run(tmp_path, "a", [{"prompt_index": 0, "token_ids": [1, 2, 3], "text": "abc"}])
    _write_run(tmp_path, "b", [{"prompt_index": 0, "token_ids": [1, 2, 9], "text": "abz"}])
    res = generation_parity(tmp_path, ["a"], ["b"], rtol=1e-3)
    assert res.status == "DIVERGED" and res.first_diverging_position == 2
    assert res.first_divergence.baseline_text == "abc"
    assert res.first_divergence.variant_text == "abz"


def test_generation_parity_logits_beyond_tolerance_diverge(tmp_path):
    rows = [{"prompt_index": 0, "token_ids": [1, 2], "text": "ab"}]
    _write_run(tmp_path, "a", rows, np.ones((2, 4), dtype=np.float32))
    _write_run(tmp_path, "b", rows, np.full((2, 4), 1.5, dtype=np.float32))
    assert generation_parity(tmp_path, ["a"], ["b"], rtol=1e-3).status == "DIVERGED"


def test_compile_cost_pays_back_over_the_per_step_saving():
    base = Side(name="off", mean_step_s=1.0, first_step_s=1.5)
    fast = Side(name="on", mean_step_s=0.8, first_step_s=20.8)
    cost = compile_cost(base, fast, Speed(gain_pct=20.0))
    assert cost.overhead_s == pytest.approx(20.0)
    assert cost.break_even_steps == pytest.approx(100.0)  # 20 s / 0.2 s saved per step
    slow = Side(name="on", mean_step_s=1.2, first_step_s=21.2)
    assert compile_cost(base, slow, Speed(gain_pct=-20.0)).break_even_steps is None


def test_break_even_follows_the_verdicts_gain_not_means_moved_by_a_loaded_run():
    # one loaded baseline run makes the means say "variant faster"; the run medians (the
    # verdict's gain) say slower: no break-even, as the verdict implies
    base = Side(name="off", mean_step_s=1.88, first_step_s=0.9)
    on = Side(name="on", mean_step_s=1.32, first_step_s=99.4)
    assert compile_cost(base, on, Speed(gain_pct=-19.16)).break_even_steps is None
    assert compile_cost(base, on, Speed(gain_pct=10.0)).break_even_steps == pytest.approx(
        (99.4 - 1.32) / 0.188
    )


def _line(verdict, speed, parity, workload="sft", lang="en"):
    c = SimpleNamespace(
        verdict=verdict, speed=speed, parity=parity, workload=workload, caveats=[], verdict_line=""
    )
    return str(verdict_words(lang).verdict_line(c))


def test_a_faster_variant_whose_results_diverged_says_so_in_its_verdict_line():
    diverged = Parity(status="DIVERGED", first_diverging_step=7)
    fixed = Speed(design="fixed")
    assert _line("V_FASTER", fixed, diverged) == "V_FASTER (but parity DIVERGED at step 7)"
    assert _line("NO_GAIN", fixed, diverged) == "NO_GAIN"
    token = Parity(status="DIVERGED", first_diverging_position=3)
    assert _line("V_FASTER", fixed, token, "infer").endswith("at token 3)")


@pytest.mark.parametrize(
    "changes, shown",
    [
        ({}, True),
        # decided, but the MDE is above the margin: what a smaller effect would need (issue 20)
        ({"decision": "FASTER", "ci_low_pct": 1.0}, True),
        ({"decision": "NO_GAIN", "ci_low_pct": -1.0, "ci_high_pct": 1.0}, False),  # within margin
        ({"n_pairs": 2}, False),  # a spread on 1 degree of freedom
        ({"design": "sequential"}, False),  # the sequential rule decides when to add pairs
        ({"pairs_for_min_gain": 3}, False),  # no more than were run
        ({"mde_pct": 1.5}, False),  # the MDE is already below the margin
    ],
)
def test_the_pairs_hint_appears_only_for_a_fixed_design_that_needs_more(changes, shown):
    base = dict(
        gain_pct=1.0,
        ci_low_pct=-8.0,
        ci_high_pct=9.0,
        level=0.95,
        design="fixed",
        n_pairs=3,
        mde_pct=12.0,
        min_gain_pct=2.0,
        decision="INCONCLUSIVE",
        pairs_for_min_gain=40,
    )
    note = str(verdict_words("en").speed_note(Speed(**{**base, **changes})))
    assert ("roughly" in note and "verdict.rounds=" in note) == shown


def test_an_uncalibrated_one_round_verdict_says_why_in_english_and_chinese():
    speed = Speed(
        decision="INCONCLUSIVE",
        gain_pct=25.0,
        level=0.95,
        design="one_round",
        n_pairs=1,
        no_interval_reason="uncalibrated",
        reference_verdict="V_FASTER",
        reference_gain_pct=24.0,
    )
    en = _line("INCONCLUSIVE", speed, Parity(status="MATCH"))
    assert "no interval" in en and "experiment=calibrate_host" in en
    assert "reference rule: gain > 0, one round: V_FASTER at +24.00% of the mean step" in en
    zh = _line("INCONCLUSIVE", speed, Parity(status="MATCH"), lang="zh")
    assert "无区间" in zh and "本机校准" in zh and "reference rule" not in zh


def test_a_set_aside_pair_is_named_with_what_was_measured():
    speed = Speed(
        decision="INCONCLUSIVE",
        level=0.95,
        design="one_round",
        n_pairs=0,
        no_interval_reason="no_pairs_left",
        set_aside=[
            {
                "pair": 1,
                "side": "baseline",
                "reason": "contended",
                "detail": "a-train-r1: CPU pressure 61%",
            }
        ],
    )
    line = _line("INCONCLUSIVE", speed, Parity(status="N/A"))
    assert "round 1 set aside: baseline run contended (a-train-r1: CPU pressure 61%)" in line
    assert "every round was set aside" in line


def test_parity_tolerance_is_the_looser_of_the_two_sides_dtypes(compose_cfg, tmp_path):
    # a bfloat16 variant of a float32 baseline: its losses differ at bfloat16's precision, so
    # parity judges it at rtol_bfloat16, not the baseline's float32 tolerance
    from afbench.compare import parity_rtol
    from afbench.config import validate_config
    from afbench.config.models import ReportConfig
    from afbench.plan import make_plan

    report = ReportConfig()
    same = make_plan(validate_config(compose_cfg("experiment=sft_af_compare")), tmp_path / "a")
    assert parity_rtol(same, "af_on", report) == report.parity.rtol_float32
    mixed = make_plan(
        validate_config(
            compose_cfg(
                "experiment=sft_af_compare", "+experiment.variants.af_on.model.dtype=bfloat16"
            )
        ),
        tmp_path / "b",
    )
    assert parity_rtol(mixed, "af_on", report) == report.parity.rtol_bfloat16
