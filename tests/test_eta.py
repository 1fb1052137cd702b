"""The progress line's ETA learns each kind of run's cost from the runs so far (issue 23)."""

from __future__ import annotations

from pathlib import Path

import pytest

from afbench.config import validate_config
from afbench.launch.eta import RunTimes
from afbench.plan import make_plan
from afbench.runspec import RunStatus


def finished(
    run, wall_s: float, step_s: float, status: str = "OK", kernel_cache: str | None = None
) -> RunStatus:
    """``run`` as if it ran: its step lines (every step ``step_s``) and its status."""
    d = Path(run.run_dir)
    d.mkdir(parents=True)
    lines = [
        f"step: {k} loss: 1.0 elapsed_time_per_step: {step_s}"
        for k in range(1, run.config.scheduler.steps + 1)
    ]
    (d / "stdout.log").write_text("\n".join(lines) + "\n")
    return RunStatus(
        run_id=run.run_id,
        status=status,
        exit_code=0,
        wall_s=wall_s,
        config_hash=run.config_hash,
        kernel_cache=kernel_cache,
    )


@pytest.fixture
def plan(compose_cfg, tmp_path):
    # af_off-train, af_on-train, af_off-profile, af_on-profile; 10, 10, 12, 12 steps
    return make_plan(
        validate_config(compose_cfg("experiment=sft_af_compare", "verdict.rounds=1")), tmp_path
    )


def test_before_any_compiled_run_the_eta_is_a_lower_bound_that_says_so(plan):
    times = RunTimes()
    times.add(plan.runs[0], finished(plan.runs[0], wall_s=14.0, step_s=0.5))  # eager: 9.5 s fixed
    line = times.eta_line(plan.runs[1:])
    assert line.startswith("ETA >= ") and "compile time not known yet" in line
    assert line.startswith(f"ETA >= {(9.5 + 4.5 + 9.5 + 5.5 + 9.5 + 5.5) / 60:.1f} min for 3 ")


def test_after_a_compiled_run_its_first_step_cost_is_counted_for_the_compiled_rest(plan):
    times = RunTimes()
    times.add(plan.runs[0], finished(plan.runs[0], wall_s=14.0, step_s=0.5))
    times.add(plan.runs[1], finished(plan.runs[1], wall_s=124.0, step_s=0.4))  # 120.4 s fixed
    line = times.eta_line(plan.runs[2:])
    # eager profile: 9.5 + 11 * 0.5; compiled profile: 120.4 + 11 * 0.4
    assert line == f"ETA {(9.5 + 5.5 + 120.4 + 4.4) / 60:.1f} min for 2 more run(s)"


def test_failed_runs_teach_nothing_and_no_knowledge_gives_no_eta(plan):
    times = RunTimes()
    times.add(plan.runs[0], finished(plan.runs[0], wall_s=3.0, step_s=0.5, status="FAILED"))
    assert times.eta_line(plan.runs[1:]) is None


def test_compiled_runs_after_the_first_are_predicted_from_the_warm_ones(compose_cfg, tmp_path):
    # the recipe's 5 rounds: af_off, af_on (cold), af_on (warm), af_off, af_off, af_on, ...
    runs = make_plan(validate_config(compose_cfg("experiment=sft_af_compare")), tmp_path).runs
    times = RunTimes()
    times.add(runs[0], finished(runs[0], wall_s=14.0, step_s=0.5))  # eager: 9.5 s fixed
    times.add(runs[1], finished(runs[1], wall_s=124.0, step_s=0.4, kernel_cache="cold"))
    rest = [r for r in runs[2:] if r.phase == "train"]  # 4 compiled, 4 eager train runs
    compiled = sum(1 for r in rest if r.config.optimization.autofuse)
    # no warm run seen yet: the cold one's cost stands in, and the line says it is an upper bound
    line = times.eta_line(rest)
    assert line.startswith(
        f"ETA <= {(compiled * (120.4 + 3.6) + (len(rest) - compiled) * 14.0) / 60:.1f} min "
        f"for {len(rest)} more run(s) (the first compile counted for every compiled run"
    )
    times.add(runs[2], finished(runs[2], wall_s=44.0, step_s=0.4, kernel_cache="warm"))
    rest = rest[1:]
    compiled = sum(1 for r in rest if r.config.optimization.autofuse)
    assert times.eta_line(rest) == (
        f"ETA {(compiled * 44.0 + (len(rest) - compiled) * 14.0) / 60:.1f} min "
        f"for {len(rest)} more run(s)"
    )


def test_a_command_variant_with_a_switch_is_not_counted_as_compiled(compose_cfg, tmp_path):
    """engine=command passes the switches to the user's program; no compile note, no bound."""
    runs = make_plan(
        validate_config(
            compose_cfg(
                "experiment=sft_af_compare",
                "verdict.rounds=1",
                "engine=command",
                "engine.executable=/bin/true",
            )
        ),
        tmp_path,
    ).runs
    times = RunTimes()
    times.add(runs[0], finished(runs[0], wall_s=14.0, step_s=0.5, kernel_cache="warm"))
    line = times.eta_line(runs[1:])
    assert line == f"ETA {(9.5 + 4.5 + 9.5 + 5.5 + 9.5 + 5.5) / 60:.1f} min for 3 more run(s)"
