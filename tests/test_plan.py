"""Planning: variant x phase x repeat expansion, override precedence, the skip rules."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from afbench.config import validate_config
from afbench.errors import ConfigError
from afbench.plan import add_round, make_plan, round_order, skip_reason
from afbench.runspec import config_hash


@pytest.fixture
def af_plan(compose_cfg, tmp_path):
    # the reference's protocol: one round (the recipe runs 5 rounds of its train phase)
    return make_plan(
        validate_config(compose_cfg("experiment=sft_af_compare", "verdict.rounds=1")), tmp_path
    )


def test_reference_order_off_on_off_on(af_plan):
    assert [r.run_id for r in af_plan.runs] == [
        "af_off-train-r1",
        "af_on-train-r1",
        "af_off-profile-r1",
        "af_on-profile-r1",
    ]
    assert af_plan.verdict_phase == "train"
    assert af_plan.profile_phase == "profile"


def test_phase_and_variant_overrides_reach_run_configs(af_plan):
    by_id = {r.run_id: r.config for r in af_plan.runs}
    assert by_id["af_off-train-r1"].scheduler.steps == 10
    assert by_id["af_off-train-r1"].scheduler.seed == 42
    assert by_id["af_on-profile-r1"].scheduler.steps == 12
    assert by_id["af_on-profile-r1"].scheduler.seed == 43
    assert by_id["af_on-train-r1"].optimization.autofuse is True
    assert by_id["af_off-train-r1"].optimization.autofuse is False
    assert by_id["af_on-profile-r1"].optimization.profiler is True
    assert by_id["af_on-train-r1"].optimization.profiler is False


def test_every_run_has_distinct_hash_and_own_dir(af_plan, tmp_path):
    hashes = {r.config_hash for r in af_plan.runs}
    assert len(hashes) == 4
    assert {Path(r.run_dir).parent for r in af_plan.runs} == {tmp_path / "runs"}


def test_rounds_are_counterbalanced_by_default(compose_cfg, tmp_path):
    conf = validate_config(compose_cfg("experiment=sft_af_compare", "verdict.rounds=3"))
    plan = make_plan(conf, tmp_path)
    ids = [r.run_id for r in plan.runs]
    assert ids[:6] == [
        "af_off-train-r1",
        "af_on-train-r1",
        "af_on-train-r2",
        "af_off-train-r2",
        "af_off-train-r3",
        "af_on-train-r3",
    ]
    # rounds repeat the verdict phase only: the profile phase (its first run is what the report
    # reads) runs once per variant, after the rounds
    assert ids[6:] == ["af_off-profile-r1", "af_on-profile-r1"]
    assert plan.order == "counterbalanced" and [r.index for r in plan.runs] == list(range(1, 9))


def test_interleaved_order_keeps_the_baseline_first_in_every_round(compose_cfg, tmp_path):
    conf = validate_config(
        compose_cfg("experiment=sft_af_compare", "verdict.rounds=2", "experiment.order=interleaved")
    )
    ids = [r.run_id for r in make_plan(conf, tmp_path).runs]
    assert ids[:4] == ["af_off-train-r1", "af_on-train-r1", "af_off-train-r2", "af_on-train-r2"]


def test_counterbalanced_rounds_of_three_variants_reverse_every_other_round():
    names = ["base", "v1", "v2"]
    assert [round_order(names, r, "counterbalanced", None) for r in (1, 2, 3)] == [
        ["base", "v1", "v2"],
        ["v2", "v1", "base"],
        ["base", "v1", "v2"],
    ]


def test_random_order_is_reproduced_by_its_recorded_seed(compose_cfg, tmp_path):
    conf = validate_config(
        compose_cfg("experiment=sft_af_compare", "verdict.rounds=6", "experiment.order=random")
    )
    first = make_plan(conf, tmp_path)
    assert first.order_seed is not None  # drawn and recorded
    again = validate_config(
        compose_cfg(
            "experiment=sft_af_compare",
            "verdict.rounds=6",
            "experiment.order=random",
            f"experiment.order_seed={first.order_seed}",
        )
    )
    assert [r.run_id for r in make_plan(again, tmp_path).runs] == [r.run_id for r in first.runs]
    rounds = [
        [r.variant for r in first.runs if r.phase == "train" and r.repeat == k] for k in range(1, 7)
    ]
    assert rounds[0] == ["af_off", "af_on"]  # round 1 starts with the baseline
    # 5 later rounds of 2 variants: both orders occur for most seeds; this checks the draws
    # follow the seed, not one fixed pattern
    orders = {
        tuple(r)
        for seed in range(20)
        for r in (round_order(["af_off", "af_on"], k, "random", seed) for k in (2, 3))
    }
    assert orders == {("af_off", "af_on"), ("af_on", "af_off")}


def test_auto_plans_min_rounds_rounds_of_the_verdict_phase_then_the_profile_once(
    compose_cfg, tmp_path
):
    conf = validate_config(
        compose_cfg(
            "experiment=sft_af_compare",
            "verdict.rounds=auto",
            "verdict.max_rounds=5",
            "verdict.min_gain_pct=1.5",
        )
    )
    plan = make_plan(conf, tmp_path)
    assert [r.run_id for r in plan.runs] == [
        "af_off-train-r1",
        "af_on-train-r1",
        "af_on-train-r2",
        "af_off-train-r2",
        "af_off-train-r3",
        "af_on-train-r3",
        "af_off-profile-r1",
        "af_on-profile-r1",
    ]
    assert plan.rounds == "auto" and plan.auto.min_pairs == 3 and plan.auto.max_pairs == 5
    assert plan.auto.level == 0.95 and plan.auto.min_gain_pct == 1.5


def test_an_added_round_goes_before_the_later_phases_and_keeps_run_identity(compose_cfg, tmp_path):
    conf = validate_config(compose_cfg("experiment=sft_af_compare", "verdict.rounds=auto"))
    plan = add_round(make_plan(conf, tmp_path), ["af_on"])
    ids = [r.run_id for r in plan.runs]
    assert ids[6:] == ["af_on-train-r4", "af_off-train-r4", "af_off-profile-r1", "af_on-profile-r1"]
    assert [r.index for r in plan.runs] == list(range(1, 11))
    r4 = plan.runs[6]
    assert r4.repeat == 4 and Path(r4.run_dir) == tmp_path / "runs" / "af_on-train-r4"
    assert r4.config_hash == config_hash(r4.config, "af_on", "train", 4)
    assert len({r.config_hash for r in plan.runs}) == len(plan.runs)


def test_a_variant_that_runs_before_its_rounds_baseline_is_not_skipped_for_it(
    compose_cfg, tmp_path
):
    conf = validate_config(compose_cfg("experiment=sft_af_compare", "verdict.rounds=2"))
    plan = make_plan(conf, tmp_path)
    runs = {r.run_id: r for r in plan.runs}
    # round 2 runs af_on first: its baseline has not run, so only earlier runs count
    st = {"af_off-train-r1": "OK", "af_on-train-r1": "OK"}
    assert skip_reason(plan, runs["af_on-train-r2"], st) is None
    st["af_on-train-r2"] = "OK"
    st["af_off-train-r2"] = "FAILED"
    assert skip_reason(plan, runs["af_on-profile-r1"], st)  # reference: later phases skipped


@pytest.mark.parametrize(
    "override, where, known",
    [
        (
            "+experiment.variants.af_on.optimization.autofuze=true",
            "experiment.variants.af_on in phase train: optimization.autofuze: unknown key",
            "autofuse",
        ),
        # a phase's typo is named in the phase, not under the first variant it reaches
        (
            "+experiment.phases.train.scheduler.measure.last_stp=10",
            "experiment.phases.train: scheduler.measure.last_stp: unknown key",
            "last_step",
        ),
    ],
)
def test_an_unknown_key_is_named_where_it_was_written(
    compose_cfg, tmp_path, override, where, known
):
    conf = validate_config(compose_cfg("experiment=sft_af_compare", override))
    with pytest.raises(ConfigError) as err:
        make_plan(conf, tmp_path)
    msg = str(err.value)
    assert msg.startswith(where) and known in msg
    assert "variants" not in msg or "variants" in override


def test_dotted_override_keys_work_like_nested(compose_cfg, tmp_path):
    data = OmegaConf.to_container(compose_cfg("experiment=sft_af_compare"), resolve=True)
    data["experiment"]["variants"]["long"] = {"scheduler.seq_len": 128}
    plan = make_plan(validate_config(data), tmp_path)
    long = next(r for r in plan.runs if r.variant == "long")
    assert long.config.scheduler.seq_len == 128


def test_reference_skip_rules(af_plan):
    runs = {r.run_id: r for r in af_plan.runs}
    # run 1 fails -> 2, 3, 4 skipped
    st = {"af_off-train-r1": "FAILED"}
    assert skip_reason(af_plan, runs["af_on-train-r1"], st)
    assert skip_reason(af_plan, runs["af_off-profile-r1"], st)
    assert skip_reason(af_plan, runs["af_on-profile-r1"], st)
    # run 2 fails -> 3, 4 skipped
    st = {"af_off-train-r1": "OK", "af_on-train-r1": "FAILED"}
    assert skip_reason(af_plan, runs["af_off-profile-r1"], st)
    assert skip_reason(af_plan, runs["af_on-profile-r1"], st)
    # all fine -> nothing skipped
    st = {"af_off-train-r1": "OK", "af_on-train-r1": "OK"}
    assert skip_reason(af_plan, runs["af_off-profile-r1"], st) is None


def test_reference_policy_skips_later_rounds_after_round_1_failed(compose_cfg, tmp_path):
    """issue 34: skip_policy reference with 5 rounds ran rounds 2-5 after round 1 failed; the
    reference's rule (a failed run skips every run after it) holds across rounds."""
    plan = make_plan(
        validate_config(
            compose_cfg(
                "experiment=sft_af_compare",
                "experiment.skip_policy=reference",
                "verdict.rounds=3",
            )
        ),
        tmp_path,
    )
    runs = {r.run_id: r for r in plan.runs}
    st = {"af_off-train-r1": "OK", "af_on-train-r1": "FAILED"}
    for later in ("af_off-train-r2", "af_on-train-r3", "af_off-profile-r1"):
        assert "did not succeed (skip_policy reference" in skip_reason(plan, runs[later], st).text
    ok = {"af_off-train-r1": "OK", "af_on-train-r1": "OK"}
    assert skip_reason(plan, runs["af_off-train-r2"], ok) is None


def test_per_variant_policy_keeps_other_variants_going(compose_cfg, tmp_path):
    conf = validate_config(
        compose_cfg("experiment=sft_af_compare", "experiment.skip_policy=per_variant")
    )
    plan = make_plan(conf, tmp_path)
    runs = {r.run_id: r for r in plan.runs}
    st = {"af_off-train-r1": "OK", "af_on-train-r1": "FAILED"}
    assert skip_reason(plan, runs["af_off-profile-r1"], st) is None
    assert skip_reason(plan, runs["af_on-profile-r1"], st)


def test_a_skip_reason_names_the_rule_of_its_policy_as_the_readme_does(compose_cfg, tmp_path):
    def reason(policy: str, st: dict[str, str], run_id: str) -> str | None:
        plan = make_plan(
            validate_config(
                compose_cfg("experiment=sft_af_compare", f"experiment.skip_policy={policy}")
            ),
            tmp_path,
        )
        found = skip_reason(plan, next(r for r in plan.runs if r.run_id == run_id), st)
        return None if found is None else found.text  # the message's English sentence

    own = reason(
        "per_variant", {"af_off-train-r1": "OK", "af_on-train-r1": "FAILED"}, "af_on-profile-r1"
    )
    assert own.startswith("earlier run af_on-train-r1 of this variant did not succeed")
    assert "per_variant: a failed variant's later phases are skipped" in own
    base = reason("per_variant", {"af_off-train-r1": "FAILED"}, "af_off-profile-r1")
    assert "after a failed baseline every variant's later phases are skipped" in base
    ref = reason(
        "reference", {"af_off-train-r1": "OK", "af_on-train-r1": "FAILED"}, "af_off-profile-r1"
    )
    assert "skip_policy reference: a failed run skips every later run" in ref
    readme = (Path(__file__).parents[1] / "docs" / "configuration.md").read_text()
    assert (
        "`per_variant` (the default) skips a variant's later phases when that variant "
        "failed, and every variant's later phases when the baseline failed" in readme
    )


def test_command_line_override_shadowed_by_a_phase_is_named(compose_cfg):
    from afbench.plan import shadowed_overrides

    conf = validate_config(compose_cfg("experiment=sft_af_compare", "scheduler.steps=20"))
    lines = shadowed_overrides(["scheduler.steps=20", "scheduler.seq_len=128"], conf)
    assert len(lines) == 2  # both phases set scheduler.steps; nothing sets seq_len
    assert "experiment.phases.train.scheduler.steps=..." in lines[0]


@pytest.mark.parametrize("slow", ["{engine.env.SLOW: '1'}", "{engine: {env: {SLOW: '1'}}}"])
def test_variant_setting_only_the_engine_env_does_not_shadow_the_engine_choice(compose_cfg, slow):
    from afbench.plan import shadowed_overrides

    overrides = [
        "engine=command",
        "engine.executable=/bin/true",
        f"+experiment.variants.slow={slow}",
    ]
    conf = validate_config(compose_cfg(*overrides))
    assert conf.experiment.variants["slow"]  # the variant really sets engine.env
    assert shadowed_overrides(overrides, conf) == []


def test_variant_reselecting_the_engine_shadows_the_engine_choice(compose_cfg):
    from afbench.plan import shadowed_overrides

    overrides = [
        "engine=command",
        "engine.executable=/bin/true",
        "+engine.env.SLOW=0",
        "+experiment.variants.titan={engine.name: torchtitan}",
        "+experiment.variants.slow={engine.env.SLOW: '1'}",
    ]
    conf = validate_config(compose_cfg(*overrides))
    lines = shadowed_overrides(overrides, conf)
    assert len(lines) == 2, lines
    assert lines[0].startswith("engine is set again by experiment.variants.titan")
    assert "experiment.variants.titan.engine.name=..." in lines[0]
    assert lines[1].startswith("engine.env.SLOW is set again by experiment.variants.slow")


def test_a_misspelt_variant_set_without_plus_is_named_but_a_real_one_is_not(compose_cfg):
    from afbench.cli.args import free_form_argv
    from afbench.plan import misspelt_entries

    typo = ["experiment=sft_af_compare", "experiment.variants.af_onn.optimization.autofuse=false"]
    conf = validate_config(compose_cfg(*free_form_argv(typo)))
    assert set(conf.experiment.variants) == {"af_off", "af_on", "af_onn"}  # no '+' needed
    (line,) = misspelt_entries(typo, conf)
    assert line.startswith("experiment.variants.af_onn adds a new variant beside 'af_on'")
    # a key added to an existing variant, a new variant with its own name: no warning
    fine = [
        "experiment=sft_af_compare",
        "experiment.variants.af_on.scheduler.seq_len=128",
        "experiment.variants.rmsnorm.optimization.rmsnorm=true",
    ]
    conf = validate_config(compose_cfg(*free_form_argv(fine)))
    assert conf.experiment.variants["af_on"] and misspelt_entries(fine, conf) == []


def test_adaptive_bounds_are_checked_only_under_rounds_auto(compose_cfg):
    from afbench.config import validate_config
    from afbench.errors import ConfigError

    fixed = validate_config(compose_cfg("verdict.rounds=3", "verdict.max_rounds=2"))
    assert fixed.verdict.rounds == 3
    with pytest.raises(ConfigError, match="max_rounds 2 is below min_rounds 3"):
        validate_config(compose_cfg("verdict.rounds=auto", "verdict.max_rounds=2"))
