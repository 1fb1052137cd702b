"""The progress line's ETA learns each kind of run's cost from the runs so far (issue 23)."""

from __future__ import annotations

from pathlib import Path

import pytest

from afbench.config import validate_config
from afbench.experiment import RunTimes
from afbench.plan import make_plan
from afbench.runspec import RunStatus


def finished(run, wall_s: float, step_s: float, status: str = "OK") -> RunStatus:
    """``run`` as if it ran: its step lines (every step ``step_s``) and its status."""
    d = Path(run.run_dir)
    d.mkdir(parents=True)
    lines = [f"step: {k} loss: 1.0 elapsed_time_per_step: {step_s}"
             for k in range(1, run.config.scheduler.steps + 1)]
    (d / "stdout.log").write_text("\n".join(lines) + "\n")
    return RunStatus(run_id=run.run_id, status=status, exit_code=0, wall_s=wall_s,
                     config_hash=run.config_hash)


@pytest.fixture
def plan(compose_cfg, tmp_path):
    # af_off-train, af_on-train, af_off-profile, af_on-profile; 10, 10, 12, 12 steps
    return make_plan(validate_config(compose_cfg("experiment=sft_af_compare",
                                                 "experiment.repeats=1")), tmp_path)


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
