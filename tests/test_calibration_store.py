"""The host calibration's keys (afbench.history.calibration): a switch's runs are a kind of
their own, a comparison of two kinds keeps what its rounds learn under its own key, and one
round decides with a calibration that covers both sides, or not at all."""

from __future__ import annotations

import logging
from types import SimpleNamespace as NS

import pytest

from afbench.config import validate_config
from afbench.history import calibration as cal
from afbench.plan import make_plan
from afbench.verdict.calibration import RunSpread

EAGER = "cpu|builtin|sft|qwen3_tiny|seq256|gbs4|window5"
COMPILED = EAGER + "|sw:autofuse"


@pytest.fixture
def url(tmp_path):
    return f"sqlite:///{tmp_path / 'h.sqlite'}"


def one_round_plan(compose_cfg, tmp_path, *overrides):
    return make_plan(
        validate_config(
            compose_cfg("experiment=sft_af_compare", "backend=cpu", "verdict.rounds=1", *overrides)
        ),
        tmp_path / "out",
    )


def test_a_switch_that_is_on_is_part_of_the_kind(compose_cfg, tmp_path):
    kinds = cal.verdict_kinds(one_round_plan(compose_cfg, tmp_path))
    assert kinds == {"af_off": EAGER, "af_on": COMPILED}
    assert cal.pair_key(EAGER, COMPILED) == EAGER + "|vs:autofuse"
    assert cal.pair_key(EAGER, EAGER.replace("seq256", "seq512")).startswith(EAGER + "|vs:h")
    long = cal.pair_key(COMPILED + "+add_rmsnorm+npugraph_ex", EAGER * 2)
    assert len(long) <= cal.KEY_CHARS  # the run_kind column's width (PostgreSQL enforces it)


def seed(url, kind, spread, n_pairs=24):
    """One estimate of ``kind`` (each from an output directory of its own)."""
    assert cal.record(
        kind,
        RunSpread(spread_pct=spread, df=n_pairs - 1, n_pairs=n_pairs),
        f"/out/{kind}/{spread}/{n_pairs}",
        cal.AA,
        url,
    )


def test_one_round_of_two_kinds_needs_both_calibrated(url):
    seed(url, EAGER, 2.5)
    assert cal.for_comparison(EAGER, COMPILED, url) is None  # the eager A/A says nothing of ON
    seed(url, COMPILED, 6.0)
    got = cal.for_comparison(EAGER, COMPILED, url)
    assert got["kind"] == f"{EAGER} + {COMPILED}"
    assert got["spread_pct"] == pytest.approx(((2.5**2 + 6.0**2) / 2) ** 0.5)
    assert cal.for_comparison(EAGER, EAGER, url)["spread_pct"] == pytest.approx(2.5)


def test_a_comparison_fit_for_one_round_is_preferred_to_its_kinds_combined(url):
    seed(url, EAGER, 2.5)
    seed(url, COMPILED, 6.0)
    seed(url, cal.pair_key(EAGER, COMPILED), 4.0, n_pairs=5)  # too few pairs yet
    assert " + " in cal.for_comparison(EAGER, COMPILED, url)["kind"]
    seed(url, cal.pair_key(EAGER, COMPILED), 4.2, n_pairs=10)  # 15 pairs now
    got = cal.for_comparison(EAGER, COMPILED, url)
    assert got["kind"] == cal.pair_key(EAGER, COMPILED) and got["n_pairs"] == 15


def comparison(variant, spread_pct, n_pairs=5, aa=False, steps_s=(0.30, 0.25)):
    speed = NS(
        spread_source="pairs",
        n_pairs=n_pairs,
        spread_pct=spread_pct,
        set_aside=(),
        baseline_location_s=steps_s[0],
        variant_location_s=steps_s[1],
    )
    return NS(
        baseline=NS(name="af_off", runs_used=[f"af_off-train-r{k}" for k in range(1, 6)]),
        variant=NS(name=variant, runs_used=[f"{variant}-train-r{k}" for k in range(1, 6)]),
        aa=aa,
        speed=speed,
    )


def summary_of(comparisons, contended=()):
    """A summary as learn reads it: its comparisons, runs (``contended``: run ids measured
    as contended) and experiment name."""
    return NS(
        comparisons=comparisons,
        experiment="sft_af_compare",
        runs=[NS(run_id=r, contended=True) for r in contended],
    )


def test_a_comparison_that_decided_with_a_contended_run_teaches_the_calibration_nothing(
    url, tmp_path, caplog
):
    """issue 34: verdict.contention=keep lets a pair contended on both sides decide; its runs
    never enter a calibration, whose one-round verdicts later rest on it."""
    kinds = {"af_off": EAGER, "af_off_again": EAGER}
    with caplog.at_level(logging.INFO):
        cal.learn(
            summary_of(
                [comparison("af_off_again", 3.0, aa=True)],
                contended=["af_off-train-r2", "af_off_again-train-r2"],
            ),
            kinds,
            tmp_path / "out",
            url,
        )
    assert cal.lookup(EAGER, url) is None
    assert (
        "not learned from af_off_again vs af_off: af_off-train-r2, af_off_again-train-r2 "
        "measured as contended" in caplog.text
    )
    cal.learn(
        summary_of([comparison("af_off_again", 3.0, aa=True)]), kinds, tmp_path / "clean", url
    )
    assert cal.lookup(EAGER, url)["n_pairs"] == 5


def test_a_calibration_can_be_listed_shown_and_forgotten(url, tmp_path, capsys):
    from afbench.history.__main__ import main

    kinds = {"af_off": EAGER, "af_on": COMPILED}
    cal.learn(summary_of([comparison("af_on", 8.0)]), kinds, tmp_path / "out", url)
    key = cal.pair_key(EAGER, COMPILED)
    assert main(["--url", url, "calibration", "list"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith(key) and "on 5 rounds from 1 experiment(s), updated " in line
    assert "cannot decide one round" in line
    assert main(["--url", url, "calibration", "show", key]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert len(shown) == 2 and "residuals" in shown[1] and "on 5 rounds" in shown[1]
    assert shown[1].endswith(f"sft_af_compare  {tmp_path / 'out'}")
    assert main(["--url", url, "calibration", "show", key[:-2]]) == 2
    assert f"did you mean {key!r}" in capsys.readouterr().err
    assert main(["--url", url, "calibration", "forget"]) == 2
    assert "name the KIND" in capsys.readouterr().err
    assert main(["--url", url, "calibration", "forget", key]) == 0
    assert f"forgot {key}" in capsys.readouterr().out and cal.lookup(key, url) is None
    assert main(["--url", url, "calibration", "list"]) == 0
    assert "none on this host" in capsys.readouterr().out


def test_rounds_of_two_kinds_teach_their_comparison_not_the_baselines_kind(url, tmp_path):
    kinds = {"af_off": EAGER, "af_on": COMPILED, "af_off_again": EAGER}
    summary = summary_of(
        comparisons=[comparison("af_on", 8.0), comparison("af_off_again", 3.0, aa=True)]
    )
    cal.learn(summary, kinds, tmp_path / "out", url)
    pair = cal.lookup(cal.pair_key(EAGER, COMPILED), url)
    assert pair["spread_pct"] == pytest.approx(8.0 / 2**0.5) and pair["n_pairs"] == 5
    assert cal.lookup(EAGER, url)["spread_pct"] == pytest.approx(3.0 / 2**0.5)
    assert cal.lookup(COMPILED, url) is None


def test_a_plan_without_its_variants_kind_calibrated_says_which_kind_is_missing(
    compose_cfg, tmp_path, url, caplog
):
    seed(url, EAGER, 2.5)
    plan = one_round_plan(compose_cfg, tmp_path)
    with caplog.at_level(logging.INFO):
        kinds, found = cal.for_plan(plan, url)
    assert found is None and kinds["af_on"] == COMPILED
    assert f"no host calibration for {COMPILED}" in caplog.text
    assert "optimization.autofuse=true" in caplog.text
    seed(url, COMPILED, 6.0)
    assert cal.for_plan(plan, url)[1]["kind"] == f"{EAGER} + {COMPILED}"


def test_the_gate_does_not_judge_one_variant_with_a_comparisons_calibration():
    # one run against one: only a calibration of the variant's own kind of run may decide
    from afbench.history.check import compare_history

    cal_of = {"host_id": "h", "spread_pct": 1.0, "df": 23, "n_pairs": 24}
    history, newest = [[1.0] * 5], [[1.3] * 5]
    own = compare_history(history, newest, calibration={**cal_of, "kind": COMPILED})
    assert own.spread_source == "calibration" and own.decision == "SLOWER"
    for kind in (f"{EAGER} + {COMPILED}", cal.pair_key(EAGER, COMPILED)):
        other = compare_history(history, newest, calibration={**cal_of, "kind": kind})
        assert other.spread_source != "calibration" and other.decision != "SLOWER"


def test_a_plan_reads_its_calibrations_through_one_connection(compose_cfg, tmp_path, caplog):
    # an unreachable database: one warning for the experiment, not one per kind and comparison
    plan = one_round_plan(compose_cfg, tmp_path)
    with caplog.at_level(logging.WARNING):
        kinds, found = cal.for_plan(plan, "postgresql+psycopg://nobody@127.0.0.1:9/none")
    assert found is None and len(kinds) == 2
    assert caplog.text.count("host calibration unavailable") == 1


def test_each_estimate_keeps_what_its_runs_took_by_kind(url, tmp_path):
    """The run locations a one-round verdict is checked against (RunSpread.fit_of): a
    comparison of two kinds keeps both sides'; one kind (an A/A, or variants that differ in
    nothing the kind names) one location from both sides' runs."""
    kinds = {"af_off": EAGER, "af_on": COMPILED, "af_off_again": EAGER, "other": EAGER}
    summary = summary_of(
        comparisons=[
            comparison("af_on", 8.0, steps_s=(0.30, 0.25)),
            comparison("af_off_again", 3.0, aa=True, steps_s=(0.30, 0.27)),
        ]
    )
    cal.learn(summary, kinds, tmp_path / "out", url)
    pair = cal.lookup(cal.pair_key(EAGER, COMPILED), url)
    assert pair["baseline_runs"]["step_s"] == pytest.approx(0.30)
    assert pair["variant_runs"]["step_s"] == pytest.approx(0.25)
    assert pair["variant_runs"]["n_runs"] == 5
    aa = cal.lookup(EAGER, url)
    assert aa["baseline_runs"]["step_s"] == pytest.approx((0.30 * 0.27) ** 0.5)
    assert aa["baseline_runs"]["n_runs"] == 10
    # the spread the location is checked with is the pooled one of the kind
    assert aa["baseline_runs"]["spread_pct"] == pytest.approx(aa["spread_pct"])
    # one kind is one program: its location checks both sides
    assert cal.for_comparison(EAGER, EAGER, url)["variant_runs"] == aa["baseline_runs"]
    cal.learn(
        summary_of(comparisons=[comparison("other", 3.0, steps_s=(0.31, 0.20))]),
        kinds,
        tmp_path / "out2",
        url,
    )
    newest = cal.lookup(EAGER, url)  # the newest estimate's, from both of its sides
    assert newest["baseline_runs"]["step_s"] == pytest.approx((0.31 * 0.20) ** 0.5)
    assert newest["variant_runs"] == newest["baseline_runs"]


def test_a_hand_edited_calibration_row_is_a_warning_and_no_calibration(url, caplog):
    from afbench.history.db import open_db, read_calibration, record_calibration

    seed(url, EAGER, 2.5)
    engine = open_db(url)
    host = cal._host()
    data = read_calibration(engine, host, EAGER)["data"]
    data["estimates"][-1]["baseline_runs"] = {
        "step_s": 0.0,
        "n_runs": 12,
        "spread_pct": 2.5,
        "df": 11,
    }
    record_calibration(engine, host, EAGER, 2.5, 24, data)
    engine.dispose()
    with caplog.at_level(logging.WARNING):
        assert cal.lookup(EAGER, url) is None
    assert f"host calibration for {EAGER} unreadable" in caplog.text
    assert "step_s must be finite and > 0" in caplog.text


def test_two_commands_are_two_kinds_and_an_environment_is_part_of_the_kind(compose_cfg, tmp_path):
    """Two user commands are two programs (their spreads need not agree), so a calibration of
    one never stands in for the other; the builtin loop without launcher.env keeps its key."""

    def kinds(*overrides):
        return cal.verdict_kinds(one_round_plan(compose_cfg, tmp_path, *overrides))

    assert "|p:" not in kinds()["af_off"]
    one = kinds("engine=command", "engine.executable=/usr/bin/python3", "engine.args=[a.py]")
    other = kinds("engine=command", "engine.executable=/usr/bin/python3", "engine.args=[b.py]")
    assert one["af_off"].split("|p:")[1] == one["af_on"].split("|p:")[1]  # the same command
    assert one["af_off"] != other["af_off"]
    assert (
        "|p:" in one["af_off"] and one["af_off"].split("|p:")[0] == other["af_off"].split("|p:")[0]
    )
    with_env = kinds("+launcher.env.OMP_NUM_THREADS=1")["af_off"]
    assert with_env.startswith(EAGER + "|p:")


def test_a_group_of_processes_is_a_kind_of_its_own(compose_cfg, tmp_path):
    two = cal.verdict_kinds(
        one_round_plan(
            compose_cfg, tmp_path, "parallel.world_size=2", "scheduler.global_batch_size=8"
        )
    )
    assert two["af_off"] == EAGER.replace("gbs4", "gbs8") + "|ws2|tp1"
    one_thread = cal.verdict_kinds(one_round_plan(compose_cfg, tmp_path, "backend.num_threads=1"))
    assert one_thread["af_off"] == EAGER + "|thr1"  # a thread count set is a kind of its own


def test_a_one_kind_plan_checks_both_sides_runs_and_a_dtype_is_a_kind_of_its_own(
    compose_cfg, tmp_path, url
):
    """Two variants of one kind are one program (the kind names every setting that changes
    what a step computes; a learning rate does not): both sides' runs are checked against the
    kind's location (RunSpread.fit_of). A dtype is part of the kind."""
    where = {"step_s": 0.3, "n_runs": 24, "spread_pct": 2.5, "df": 23}
    assert cal.record(
        EAGER,
        RunSpread.of(
            {
                "spread_pct": 2.5,
                "df": 23,
                "n_pairs": 24,
                "baseline_runs": where,
                "variant_runs": where,
            }
        ),
        "/out/aa",
        cal.AA,
        url,
    )

    def plan(*overrides):
        cfg = compose_cfg(
            "experiment=calibrate_host",
            "backend=cpu",
            "verdict.rounds=1",
            "experiment.steps=10",
            *overrides,
        )
        return make_plan(validate_config(cfg), tmp_path / "out")

    for one_kind in (plan(), plan("+experiment.variants.a_again.scheduler.lr=0.001")):
        kinds, found = cal.for_plan(one_kind, url)
        assert kinds["a"] == kinds["a_again"] == EAGER
        assert found["baseline_runs"] == found["variant_runs"] == where
    bf16 = cal.verdict_kinds(plan("+experiment.variants.a_again.model.dtype=bfloat16"))
    assert bf16["a"] == EAGER and bf16["a_again"].startswith(EAGER + "|p:")
    assert cal.for_plan(plan("+experiment.variants.a_again.model.dtype=bfloat16"), url)[1] is None


def test_a_one_round_plan_names_the_kind_whose_calibration_is_short(
    compose_cfg, tmp_path, url, caplog
):
    """A calibration that cannot decide one round (11 pairs of the compiled kind, after a
    contended pair was set aside) is named with what it lacks, and what to run."""
    seed(url, EAGER, 2.5)
    seed(url, COMPILED, 6.0, n_pairs=11)
    seed(url, cal.pair_key(EAGER, COMPILED), 4.0, n_pairs=4)
    plan = one_round_plan(compose_cfg, tmp_path)
    with caplog.at_level(logging.INFO):
        kinds, found = cal.for_plan(plan, url)
    assert found is not None and not RunSpread.of(found).usable_for_one_round
    assert f"{COMPILED}: 11 rounds, 1 more needed" in caplog.text
    assert f"{EAGER}: " not in caplog.text.split("cannot decide one round")[1]
    assert "optimization.autofuse=true" in caplog.text
    seed(url, COMPILED, 6.0, n_pairs=3)  # 14 pairs now: nothing is short
    assert (
        cal.shortfall(EAGER, COMPILED, cal.lookup_many(cal.comparison_keys(EAGER, COMPILED), url))
        == []
    )


def test_a_calibration_short_of_pairs_says_its_pairs_add_up(url, tmp_path, caplog):
    kinds = {"af_off": EAGER, "af_off_again": EAGER}
    with caplog.at_level(logging.INFO):
        cal.learn(
            summary_of(comparisons=[comparison("af_off_again", 3.0, n_pairs=11, aa=True)]),
            kinds,
            tmp_path / "out",
            url,
        )
    assert (
        "rests on 11 rounds (one round needs 12 rounds and no outlier run: run the same "
        "experiment again, its rounds add to these)" in caplog.text
    )


def test_a_missing_kind_with_a_digest_is_named_with_the_settings_it_stands_for(
    compose_cfg, tmp_path, url, caplog
):
    seed(url, EAGER, 2.5)
    cfg = compose_cfg(
        "experiment=calibrate_host",
        "backend=cpu",
        "verdict.rounds=1",
        "experiment.steps=10",
        "+experiment.variants.a_again.model.dtype=bfloat16",
    )
    plan = make_plan(validate_config(cfg), tmp_path / "out")
    with caplog.at_level(logging.INFO):
        kinds, found = cal.for_plan(plan, url)
    assert found is None
    assert f"no host calibration for {kinds['a_again']} (model.dtype=bfloat16)" in caplog.text
    assert "the settings named in brackets" in caplog.text


def test_the_console_advice_names_the_calibration_recipe_and_switch_of_the_plan(
    compose_cfg, tmp_path, url, caplog
):
    """issue 34: the inference recipe was told to run calibrate_host with autofuse=true; the
    recipe follows the plan's workload and the switch its variant's kind."""
    plan = make_plan(
        validate_config(compose_cfg("experiment=infer_rmsnorm_compare", "backend=cpu")),
        tmp_path / "out",
    )
    with caplog.at_level(logging.INFO):
        assert cal.for_plan(plan, url)[1] is None
    assert "experiment=calibrate_host_infer with the same model" in caplog.text
    assert "once with optimization.add_rmsnorm=true" in caplog.text
    assert "autofuse" not in caplog.text
