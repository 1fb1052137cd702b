"""Composition and validation of the config: every bad key names itself."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from afbench.config import validate_config
from afbench.config.models import SftScheduler
from afbench.config.verdict import MOVED, VerdictConfig
from afbench.errors import ConfigError


def test_default_config_composes_and_validates(compose_cfg):
    conf = validate_config(compose_cfg())
    assert conf.model.name == "qwen3_tiny"
    assert isinstance(conf.scheduler, SftScheduler)
    assert conf.experiment.variants == {"baseline": {}}
    assert conf.model.path.endswith("qwen3_tiny")


def test_sft_af_compare_recipe_is_selectable_without_plus(compose_cfg):
    conf = validate_config(compose_cfg("experiment=sft_af_compare"))
    exp = conf.experiment
    assert exp.name == "sft_af_compare"
    assert exp.baseline == "af_off"
    assert list(exp.variants) == ["af_off", "af_on"]
    assert list(exp.phases) == ["train", "profile"]
    assert exp.phases["train"]["scheduler"]["steps"] == 10
    assert exp.phases["profile"]["optimization"]["profiler"] is True
    assert exp.skip_policy == "reference"
    assert conf.verdict.rounds == 5  # the recipe's verdict section


def test_the_verdict_defaults_are_the_models(compose_cfg):
    # no second list: the composed verdict section is VerdictConfig's defaults, key for key
    composed = OmegaConf.to_container(compose_cfg().verdict)
    assert composed == VerdictConfig().model_dump(mode="json")
    assert validate_config(compose_cfg("verdict.rounds=auto")).verdict.rounds == "auto"


@pytest.mark.parametrize(
    "old, value, shown",
    [
        ("experiment.repeats", 5, "5"),
        ("experiment.min_repeats", 4, "4"),
        ("experiment.max_repeats", 10, "10"),
        ("experiment.precision_pct", 0.5, "0.5"),
        ("experiment.time_budget_s", None, "null"),
        ("report.confidence", 0.9, "0.9"),
        ("report.min_gain_pct", 1.0, "1.0"),
        ("report.contention", "keep", "keep"),
    ],
)
def test_a_moved_key_is_refused_in_one_line_naming_its_new_home(compose_cfg, old, value, shown):
    data = OmegaConf.to_container(compose_cfg(), resolve=True)
    section, key = old.split(".")
    data[section][key] = value
    with pytest.raises(ConfigError) as err:
        validate_config(data)
    assert str(err.value) == f"{old} moved to {MOVED[old]}: write {MOVED[old]}={shown}"


def test_every_moved_key_is_a_verdict_setting():
    assert sorted(MOVED) == sorted(
        [f"experiment.{k}" for k in ("repeats", "min_repeats", "max_repeats")]
        + [f"experiment.{k}" for k in ("precision_pct", "time_budget_s")]
        + [f"report.{k}" for k in ("confidence", "min_gain_pct", "contention")]
    )
    assert {new.split(".")[1] for new in MOVED.values()} <= set(VerdictConfig.model_fields)


def test_a_recipe_with_an_old_key_is_refused_in_one_line(compose_cfg, tmp_path, monkeypatch):
    (tmp_path / "old_rounds.yaml").write_text(
        "# @package _global_\nexperiment:\n  name: old_rounds\n  repeats: 4\n"
    )
    monkeypatch.setenv("AFBENCH_RECIPE_PATH", str(tmp_path))
    with pytest.raises(ConfigError) as err:
        validate_config(compose_cfg("experiment=old_rounds"))
    assert str(err.value) == "experiment.repeats moved to verdict.rounds: write verdict.rounds=4"


def test_unknown_key_names_dotted_key_and_suggests(compose_cfg):
    with pytest.raises(ConfigError) as err:
        validate_config(compose_cfg("+optimization.autofuze=true"))
    msg = str(err.value)
    assert "optimization.autofuze: unknown key" in msg
    assert "did you mean 'autofuse'" in msg


def test_wrong_type_names_key(compose_cfg):
    with pytest.raises(ConfigError) as err:
        validate_config(compose_cfg("scheduler.steps=ten"))
    assert str(err.value).startswith("scheduler.steps:")


def test_non_positive_steps_rejected(compose_cfg):
    with pytest.raises(ConfigError, match=r"scheduler\.steps"):
        validate_config(compose_cfg("scheduler.steps=0"))


def test_measure_window_after_last_step_rejected(compose_cfg):
    with pytest.raises(ConfigError, match="measure.last_step 10 is after the last step 5"):
        validate_config(compose_cfg("scheduler.steps=5"))


def test_indivisible_batch_rejected(compose_cfg):
    with pytest.raises(ConfigError, match="not a multiple of micro_batch_size 3"):
        validate_config(compose_cfg("scheduler.micro_batch_size=3"))


def test_npugraph_ex_in_sft_is_inference_only_error(compose_cfg, tmp_path):
    from afbench.plan import make_plan

    # a switch's workloads are checked when the runs are planned (afbench.switches.registry)
    with pytest.raises(ConfigError, match="npugraph_ex is inference-only"):
        make_plan(validate_config(compose_cfg("optimization.npugraph_ex=true")), tmp_path)


def test_missing_mandatory_model_path_names_key(compose_cfg):
    with pytest.raises(ConfigError, match=r"model\.path: required but not set"):
        validate_config(compose_cfg("model=qwen3_1_7b"))


def test_duplicate_devices_rejected(compose_cfg):
    with pytest.raises(ConfigError, match="device ids must be distinct"):
        validate_config(compose_cfg("parallel.world_size=2", "parallel.devices=[0,0]"))


def test_env_var_name_validated(compose_cfg):
    with pytest.raises(ConfigError, match="must match"):
        validate_config(compose_cfg("+launcher.env.lower_case=x"))


@pytest.mark.parametrize("name", ["../x", "a/b", "..", ".hidden"])
def test_variant_name_that_could_escape_run_dir_rejected(compose_cfg, name):
    data = OmegaConf.to_container(compose_cfg("experiment=sft_af_compare"), resolve=True)
    data["experiment"]["variants"][name] = {}
    with pytest.raises(ConfigError, match="experiment.variants"):
        validate_config(data)


def test_baseline_must_be_a_variant(compose_cfg):
    with pytest.raises(ConfigError, match="baseline 'nope' is not one of the variants"):
        validate_config(compose_cfg("experiment=sft_af_compare", "experiment.baseline=nope"))


def test_a_margin_of_100_percent_or_more_is_rejected_before_anything_runs(compose_cfg):
    # a gain of 100% is zero time: the MDE hint and the verdict have no meaning beyond it
    with pytest.raises(ConfigError, match=r"verdict\.min_gain_pct"):
        validate_config(compose_cfg("verdict.min_gain_pct=100"))


def test_variant_names_off_and_on_read_as_booleans_get_a_quoting_hint(compose_cfg):
    with pytest.raises(ConfigError) as err:
        validate_config(compose_cfg("experiment.baseline=false"))
    assert str(err.value).startswith("experiment.baseline:")
    assert "quote the name, e.g. 'off'" in str(err.value)
