"""The headline a person reads first (issue 32): variant, decision, gain with its interval,
rounds and one flag per problem in at most about 120 characters, in English and Chinese;
everything else in the "Why" under it (the report, and the console with --verbose)."""

from __future__ import annotations

import pytest

from afbench.compare.glance import flags
from afbench.messages import say
from afbench.report.render import console_lines, verdict_words
from afbench.store import Comparison, MemoryChange, Parity, SetAsidePair, Side, Speed, Summary

CONTENDED = [
    say(
        "run_reason",
        run="af_on-train-r2-rerun1",
        reason=[say("cont_reason_wait", wait=30.0, limit=10.0)],
    )
]


def busy_host() -> Comparison:
    """The issue's 900-character case: one round's worth of pairs set aside as contended,
    a memory rise, the reference's verdict, a pairs hint."""
    speed = Speed(
        decision="INCONCLUSIVE",
        gain_pct=5.85,
        ci_low_pct=-43.47,
        ci_high_pct=55.16,
        level=0.95,
        mde_pct=74.55,
        min_gain_pct=2.0,
        n_pairs=2,
        n_pairs_run=4,
        design="fixed",
        pairs_for_gain=4,
        pairs_for_min_gain=40,
        reference_verdict="AF_ON_FASTER",
        reference_gain_pct=6.1,
        set_aside=[
            SetAsidePair(pair=2, side="variant", reason="contended", detail=CONTENDED),
            SetAsidePair(pair=4, side="baseline", reason="contended", detail=CONTENDED),
        ],
    )
    return Comparison(
        baseline=Side(name="af_off"),
        variant=Side(name="af_on"),
        phase="train",
        workload="sft",
        verdict="INCONCLUSIVE",
        verdict_line="",
        speed=speed,
        parity=Parity(status="MATCH"),
        memory=MemoryChange(delta_pct=14.3, warn=True),
        caveats=[
            "peak memory (rss) +14.3% (+0.126 GiB) over af_off, above report.memory_warn_pct 10%"
        ],
    )


def headline(c: Comparison, lang: str = "en") -> str:
    return str(verdict_words(lang).headline(c, flags(c)))


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_busy_host_verdict_reads_in_one_short_line(lang):
    c = busy_host()
    line = headline(c, lang)
    assert len(line) <= 120, line
    assert line.startswith("af_on vs af_off  INCONCLUSIVE  +5.8% [-43.5%, +55.2%]")
    assert "⚠" in line and "+14%" in line and " 2" in line  # memory flag, two set aside
    why = str(verdict_words(lang).why(c))
    assert len(why) > 200  # the detail went to the Why, not away
    assert "74.55%" in why and "af_on-train-r2-rerun1" in why and "AF_ON_FASTER" in why


def test_flags_name_each_problem_once_in_order():
    c = busy_host()
    assert [m.key for m in flags(c)] == ["h_loss_match", "h_set_aside", "h_memory"]
    c.parity = Parity(status="DIVERGED", first_diverging_step=7)
    c.variant.recompile = "recompiled after step 6"
    assert [m.key for m in flags(c)] == [
        "h_loss_diverged",
        "h_set_aside",
        "h_memory",
        "h_recompile",
    ]
    assert "loss DIVERGED at step 7 ⚠" in headline(c)
    c.workload, c.parity = "infer", Parity(status="MATCH")
    assert "tokens MATCH" in headline(c)


def test_a_clean_faster_verdict_and_a_failed_run():
    fast = Comparison(
        baseline=Side(name="af_off"),
        variant=Side(name="af_on"),
        phase="train",
        workload="sft",
        verdict="AF_ON_FASTER",
        verdict_line="",
        speed=Speed(
            decision="FASTER",
            gain_pct=13.21,
            ci_low_pct=7.25,
            ci_high_pct=25.3,
            level=0.95,
            n_pairs=5,
            design="fixed",
        ),
        parity=Parity(status="MATCH"),
    )
    assert (
        headline(fast) == "af_on vs af_off  FASTER  +13.2% [+7.2%, +25.3%]  5 rounds · loss MATCH"
    )
    fast.speed.level = 0.9  # a level other than the usual 95% is named
    assert "+13.2% 90% [+7.2%, +25.3%]" in headline(fast)
    failed = Comparison(
        baseline=Side(name="af_off"),
        variant=Side(name="af_on"),
        phase="train",
        workload="sft",
        verdict="RUN_FAILED",
        verdict_line="",
        reasons=["af_on-train-r1: RunFailed: exit 1", "af_on-train-r2: x"],
    )
    assert headline(failed) == "af_on vs af_off  RUN_FAILED  af_on-train-r1 failed (+1 more)"


def test_console_prints_the_why_only_when_verbose():
    c = busy_host()
    summary = Summary.model_construct(
        headline=[headline(c), "profiling af_on: COMPARABLE"], comparisons=[c]
    )
    assert console_lines(summary) == summary.headline
    lines = console_lines(summary, verbose=True)
    assert lines[0] == summary.headline[0] and lines[1].startswith("  Why: INCONCLUSIVE (")
    assert lines[2] == "profiling af_on: COMPARABLE"


def test_the_sweep_log_line_has_the_headline_shape_in_the_report_language(tmp_path):
    """The sweep's console lines come from the same template as the headline (not an English
    f-string), in the language asked for, on a stored sweep re-rendered offline."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    sweep = tmp_path / "sweep"
    shutil.copytree(Path(__file__).parent / "fixtures" / "sweeps" / "v3", sweep)
    out = {}
    for lang in ("en", "zh"):
        proc = subprocess.run(
            [sys.executable, "-m", "afbench.report", str(sweep), "--lang", lang],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        out[lang] = proc.stdout.splitlines()
    on = "optimization.autofuse=True vs optimization.autofuse=False  FASTER  +"
    line = next(ln for ln in out["en"] if ln.startswith(on))
    assert len(line) <= 120 and "] " in line and line.endswith("2 rounds"), line
    assert "optimization.autofuse=False  BASELINE" in out["en"]
    zh = next(ln for ln in out["zh"] if ln.startswith(on))
    assert zh.endswith("2 轮"), zh


def test_verbose_on_the_report_cli_and_the_main_cli(tmp_path):
    """The two documented forms: ``python -m afbench.report DIR --verbose`` prints the Why under
    each headline of a stored directory; ``python -m afbench ... --verbose`` is verbose=true."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    out = tmp_path / "v2"
    shutil.copytree(Path(__file__).parent / "fixtures" / "results" / "v2", out)
    for flag in ([], ["--verbose"]):
        proc = subprocess.run(
            [sys.executable, "-m", "afbench.report", str(out), *flag],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        lines = proc.stdout.splitlines()
        head = lines.index(next(ln for ln in lines if ln.startswith("fused vs plain  FASTER")))
        assert lines[head + 1].startswith("  Why: FUSED_FASTER (") == bool(flag), lines
    code = (
        "import sys\nsys.argv = ['afbench', '--verbose', 'scheduler.stepz=3']\n"
        "from afbench.cli import main\ntry:\n    main()\nexcept SystemExit:\n    pass\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert "--verbose" not in proc.stderr  # taken as verbose=true, not a Hydra override
    assert "scheduler.stepz: unknown key" in proc.stderr


@pytest.mark.parametrize(
    "reason",
    [
        "uncalibrated",
        "calibration_unfit",
        "calibration_stale",
        "no_pairs_left",
        "one_pair_left",
        "no_runs_left",
        "one_sided_contention",
    ],
)
def test_a_missing_interval_is_said_in_words_not_the_verdicts_code(reason):
    # the newcomer trial read "no interval (no_pairs_left)": the code is for JSON readers
    c = busy_host()
    c.speed = c.speed.model_copy(
        update={"gain_pct": None, "ci_low_pct": None, "ci_high_pct": None, "n_pairs": 0}
    )
    c.speed.no_interval_reason = reason
    for lang in ("en", "zh"):
        line = headline(c, lang)
        assert reason not in line and len(line) <= 120, line
    assert "no interval (" in headline(c, "en")
