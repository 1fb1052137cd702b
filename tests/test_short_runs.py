"""``experiment.steps=N``: one knob for a short run of any recipe (issue 23, item 1)."""

from __future__ import annotations

import pytest

from afbench.config import validate_config
from afbench.config.short import short_run, short_window
from afbench.errors import ConfigError
from afbench.plan import make_plan


@pytest.mark.parametrize("n, window", [(5, (2, 5)), (6, (3, 6)), (10, (6, 10)), (20, (11, 20))])
def test_the_window_is_the_last_half_and_at_least_four_steps(n, window):
    assert short_window(n) == window


def test_every_phase_of_sft_af_compare_runs_short_with_windows_moved(compose_cfg, tmp_path):
    plan = make_plan(
        validate_config(compose_cfg("experiment=sft_af_compare", "experiment.steps=6")), tmp_path
    )
    by_id = {r.run_id: r.config for r in plan.runs}
    for variant in ("af_off", "af_on"):
        train, profile = by_id[f"{variant}-train-r1"], by_id[f"{variant}-profile-r1"]
        assert train.scheduler.steps == 6
        assert (train.scheduler.measure.first_step, train.scheduler.measure.last_step) == (3, 6)
        assert profile.scheduler.steps == 8  # the profile phase keeps its 2 steps after the window
        assert profile.scheduler.measure.steps == [3, 4, 5, 6]
        assert profile.optimization.profiler_window.steps == [3, 4, 5, 6]
        assert profile.scheduler.seed == 43  # everything else of the phase stays


def test_ten_steps_is_the_recipe_as_written(compose_cfg, tmp_path):
    as_written = make_plan(validate_config(compose_cfg("experiment=sft_af_compare")), tmp_path)
    ten = make_plan(
        validate_config(compose_cfg("experiment=sft_af_compare", "experiment.steps=10")), tmp_path
    )
    assert [r.config for r in ten.runs] == [r.config for r in as_written.runs]


def test_inference_steps_are_warmup_and_measured_runs(compose_cfg, tmp_path):
    plan = make_plan(
        validate_config(compose_cfg("experiment=infer_rmsnorm_compare", "experiment.steps=5")),
        tmp_path,
    )
    for run in plan.runs:
        s = run.config.scheduler
        assert (s.warmup_runs, s.measured_runs) == (1, 4)
    profile = next(r.config for r in plan.runs if r.phase == "profile")
    assert profile.optimization.profiler_window.steps == [2, 3, 4, 5]
    assert profile.scheduler.max_new_tokens == 16


def test_short_run_leaves_its_input_alone():
    run = {
        "scheduler": {
            "workload": "sft",
            "steps": 12,
            "measure": {"first_step": 6, "last_step": 10},
        },
        "optimization": {
            "profiler": True,
            "profiler_window": {"first_step": 6, "last_step": 10, "warmup_steps": 1},
        },
    }
    out = short_run(run, 5)
    assert out["scheduler"]["steps"] == 7 and run["scheduler"]["steps"] == 12


def test_a_phase_that_does_not_profile_runs_exactly_the_steps_asked(compose_cfg, tmp_path):
    """issue 34: experiment.steps=6 with a train phase's steps: 20 (window 6-10) silently ran
    16 steps; only a profiling phase keeps steps after its window."""
    plan = make_plan(
        validate_config(
            compose_cfg(
                "experiment=sft_af_compare",
                "experiment.steps=6",
                "experiment.phases.train.scheduler.steps=20",
            )
        ),
        tmp_path,
    )
    by_id = {r.run_id: r.config for r in plan.runs}
    assert by_id["af_off-train-r1"].scheduler.steps == 6
    assert by_id["af_off-profile-r1"].scheduler.steps == 8


def test_fewer_than_five_steps_is_refused_with_the_reason(compose_cfg):
    with pytest.raises(ConfigError, match=r"experiment.steps: a run needs at least 5 steps"):
        validate_config(compose_cfg("experiment=sft_af_compare", "experiment.steps=4"))


def test_steps_on_the_command_line_shadowed_by_phases_points_to_experiment_steps(compose_cfg):
    with pytest.raises(ConfigError) as err:
        validate_config(compose_cfg("experiment=sft_af_compare", "scheduler.steps=4"))
    msg = str(err.value)
    assert "the recipe's phases set their own steps (experiment.phases.train, " in msg
    assert "experiment.steps=N" in msg and "raise steps" not in msg


def test_steps_of_a_plain_run_suggest_experiment_steps_or_the_window(compose_cfg):
    with pytest.raises(ConfigError) as err:
        validate_config(compose_cfg("scheduler.steps=4"))
    assert "experiment.steps=N" in str(err.value)
    assert "scheduler.measure.first_step/last_step inside scheduler.steps" in str(err.value)


def test_steps_set_in_a_phase_name_that_phase(compose_cfg, tmp_path):
    conf = validate_config(
        compose_cfg("experiment=sft_af_compare", "experiment.phases.train.scheduler.steps=4")
    )
    with pytest.raises(ConfigError) as err:
        make_plan(conf, tmp_path)
    assert "set experiment.phases.train.scheduler.measure" in str(err.value)
    assert "experiment.steps=N" in str(err.value)
