"""Planning: variant x phase x repeat expansion, override precedence, the skip rules."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from afbench.config import validate_config
from afbench.errors import ConfigError
from afbench.plan import make_plan, skip_reason


@pytest.fixture
def af_plan(compose_cfg, tmp_path):
    return make_plan(validate_config(compose_cfg("experiment=sft_af_compare")), tmp_path)


def test_reference_order_off_on_off_on(af_plan):
    assert [r.run_id for r in af_plan.runs] == [
        "af_off-train-r1", "af_on-train-r1", "af_off-profile-r1", "af_on-profile-r1"]
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


def test_repeats_are_interleaved(compose_cfg, tmp_path):
    conf = validate_config(compose_cfg("experiment=sft_af_compare", "experiment.repeats=2"))
    ids = [r.run_id for r in make_plan(conf, tmp_path).runs]
    assert ids[:4] == ["af_off-train-r1", "af_on-train-r1", "af_off-train-r2", "af_on-train-r2"]


def test_unknown_key_in_variant_names_variant_and_key(compose_cfg, tmp_path):
    conf = validate_config(compose_cfg(
        "experiment=sft_af_compare", "+experiment.variants.af_on.optimization.autofuze=true"))
    with pytest.raises(ConfigError) as err:
        make_plan(conf, tmp_path)
    msg = str(err.value)
    assert "experiment.variants.af_on" in msg
    assert "optimization.autofuze: unknown key" in msg and "autofuse" in msg


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


def test_per_variant_policy_keeps_other_variants_going(compose_cfg, tmp_path):
    conf = validate_config(compose_cfg("experiment=sft_af_compare",
                                       "experiment.skip_policy=per_variant"))
    plan = make_plan(conf, tmp_path)
    runs = {r.run_id: r for r in plan.runs}
    st = {"af_off-train-r1": "OK", "af_on-train-r1": "FAILED"}
    assert skip_reason(plan, runs["af_off-profile-r1"], st) is None
    assert skip_reason(plan, runs["af_on-profile-r1"], st)


def test_command_line_override_shadowed_by_a_phase_is_named(compose_cfg):
    from afbench.plan import shadowed_overrides

    conf = validate_config(compose_cfg("experiment=sft_af_compare", "scheduler.steps=20"))
    lines = shadowed_overrides(["scheduler.steps=20", "scheduler.seq_len=128"], conf)
    assert len(lines) == 2  # both phases set scheduler.steps; nothing sets seq_len
    assert "experiment.phases.train.scheduler.steps=..." in lines[0]
