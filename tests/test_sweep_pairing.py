"""Sweeps paired in time (experiment.sweep_pairing, afbench.pairing): every job that is not the
baseline combination runs the baseline combination beside its own, and the sweep report judges
it against those runs. End to end with tests/fault_workers/switch_timed.py on a machine that
drifts: each run is 5% slower than the one before, whatever its switches (a load that grows over
the sweep), and the swept switch (optimization.rmsnorm) changes nothing the worker logs: an
A/A whose truth is "no effect"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from afbench.pairing import COMBINATION, SWEEP_BASELINE, baseline_setting, beside_baseline
from test_sweep import COMMAND, afbench, by_name, counted, sweep_dir

NORM = "optimization.rmsnorm"


def sweep_folder(tmp_path: Path, task: list[str]) -> Path:
    """A sweep folder as Hydra's basic sweeper leaves it before the first job: multirun.yaml."""
    (tmp_path / "multirun.yaml").write_text(
        yaml.safe_dump({"hydra": {"overrides": {"task": task}}}), encoding="utf-8"
    )
    return tmp_path


def job_cfg(**experiment) -> OmegaConf:
    return OmegaConf.create(
        {
            "optimization": {"autofuse": True, "rmsnorm": False},
            "engine": {"args": ["crash.py", "{steps}"]},
            "report": {"sweep_baseline": None},
            "experiment": {
                "name": "single",
                "baseline": "baseline",
                "variants": {"baseline": {}},
                "sweep_pairing": "beside",
                **experiment,
            },
        }
    )


# ------------------------------------------------------------------ the baseline combination


def test_baseline_setting_takes_each_keys_off_value_else_its_first():
    swept = {"optimization.autofuse": ["True", "False"], "scheduler.seq_len": ["512", "1024"]}
    assert baseline_setting(swept, None) == {
        "optimization.autofuse": "False",
        "scheduler.seq_len": "512",
    }


def test_baseline_setting_follows_report_sweep_baseline_in_hydras_spelling():
    swept = {"optimization.autofuse": ["False", "True"], "scheduler.seq_len": ["512", "1024"]}
    got = baseline_setting(swept, "optimization.autofuse=true,scheduler.seq_len=1024")
    assert got == {"optimization.autofuse": "True", "scheduler.seq_len": "1024"}


# ------------------------------------------------------------------ the job's config


def test_every_job_of_a_sweep_decides_at_the_sweeps_per_comparison_level(tmp_path):
    sweep = sweep_folder(
        tmp_path, ["optimization.autofuse=false,true", "optimization.rmsnorm=false,true"]
    )
    cfg = job_cfg()
    cfg.verdict = {"confidence": 0.9}
    paired, _ = beside_baseline(
        cfg, sweep, ["optimization.autofuse=True", "optimization.rmsnorm=False"], set()
    )
    # 4 combinations, 3 comparisons with the baseline one: Bonferroni 1 - 0.1 / 3
    assert paired.verdict.confidence == pytest.approx(1 - 0.1 / 3)
    # the baseline combination's own job too (its recipe's variants are compared in it)
    own, why = beside_baseline(
        cfg, sweep, ["optimization.autofuse=False", "optimization.rmsnorm=False"], set()
    )
    assert why is None and own.verdict.confidence == pytest.approx(1 - 0.1 / 3)
    assert cfg.verdict.confidence == 0.9  # the composed config is not changed


def test_a_job_that_is_not_the_baseline_runs_the_baseline_combination_beside_its_own(tmp_path):
    sweep = sweep_folder(tmp_path, ["optimization.autofuse=false,true", "engine=command"])
    cfg, why = beside_baseline(
        job_cfg(), sweep, ["optimization.autofuse=True", "engine=command"], {"engine", "model"}
    )
    assert why is None
    exp = cfg.experiment
    assert exp.baseline == SWEEP_BASELINE
    # typed as Hydra types it: the boolean False, not the string "False"
    assert OmegaConf.to_container(exp.variants) == {
        SWEEP_BASELINE: {"optimization.autofuse": False},
        COMBINATION: {"optimization.autofuse": True},
    }


def test_the_baseline_job_and_a_separate_sweep_run_as_they_are(tmp_path):
    sweep = sweep_folder(tmp_path, ["optimization.autofuse=false,true"])
    cfg = job_cfg()
    assert beside_baseline(cfg, sweep, ["optimization.autofuse=False"], set()) == (cfg, None)
    separate = job_cfg(sweep_pairing="separate")
    assert beside_baseline(separate, sweep, ["optimization.autofuse=True"], set()) == (
        separate,
        None,
    )


def test_a_single_variant_recipe_keeps_its_name_and_its_overrides_on_both_sides(tmp_path):
    sweep = sweep_folder(tmp_path, ["optimization.autofuse=false,true"])
    cfg = job_cfg(baseline="eager", variants={"eager": {"scheduler.steps": 8}})
    cfg, why = beside_baseline(cfg, sweep, ["optimization.autofuse=True"], set())
    assert why is None and OmegaConf.to_container(cfg.experiment.variants) == {
        SWEEP_BASELINE: {"scheduler.steps": 8, "optimization.autofuse": False},
        "eager": {"scheduler.steps": 8, "optimization.autofuse": True},
    }


@pytest.mark.parametrize(
    "task, own, cfg_kw, reason",
    [
        (["model=qwen3_tiny,qwen3_0_6b"], ["model=qwen3_0_6b"], {}, "model selects a config group"),
        (
            ["optimization.autofuse=false,true"],
            ["optimization.autofuse=True"],
            {"variants": {"a": {}, "b": {}}},
            "the recipe has 2 variants",
        ),
        (
            ["engine.args.0=good.py,crash.py"],
            ["engine.args.0=crash.py"],
            {},
            "engine.args.0 is an element of a list",
        ),
    ],
)
def test_a_job_that_cannot_pair_says_why_and_runs_as_it_is(tmp_path, task, own, cfg_kw, reason):
    cfg = job_cfg(**cfg_kw)
    out, why = beside_baseline(cfg, sweep_folder(tmp_path, task), own, {"model", "engine"})
    assert out is cfg and why.startswith(reason)


def test_a_sweeper_that_left_no_multirun_yaml_runs_the_job_as_it_is(tmp_path):
    cfg = job_cfg()
    out, why = beside_baseline(cfg, tmp_path, ["optimization.autofuse=True"], set())
    assert out is cfg and "no multirun.yaml" in why


# ------------------------------------------------------------------ end to end, a drifting machine


@pytest.fixture(scope="module")
def drifting(tmp_path_factory):
    """The same A/A sweep (rmsnorm=false,true, 3 rounds, every run 5% slower than the one
    before) twice: paired beside (the default) and separate."""
    out = {}
    for pairing in ("beside", "separate"):
        cwd = tmp_path_factory.mktemp(pairing)
        proc = afbench(
            cwd,
            "-m",
            *COMMAND,
            f"{NORM}=false,true",
            "verdict.rounds=3",
            f"experiment.sweep_pairing={pairing}",
            env={
                "SWITCH_TIMED_DRIFT": f"{cwd / 'drift.txt'}:5",
                "SWITCH_TIMED_COUNTER": str(cwd / "count.txt"),
            },
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        out[pairing] = (sweep_dir(cwd), counted(cwd / "count.txt"))
    return out


def test_paired_jobs_run_the_baseline_combination_beside_their_own(drifting):
    sweep, runs = drifting["beside"]
    # job 0 is the baseline combination (3 runs); job 1 adds 3 baseline runs beside its 3
    assert runs == sorted(
        [
            f"{v}-r{k} autofuse=false,add_rmsnorm=false"
            for v in ("baseline", SWEEP_BASELINE, COMBINATION)
            for k in (1, 2, 3)
        ]
    )
    row = by_name(sweep)[f"{NORM}=True"]
    assert row.beside_baseline is True and row.n_pairs == 3
    summary = json.loads((sweep / "sweep_summary.json").read_text())
    assert summary["beside"] == 1 and summary["comparisons"] == 1
    # what the pairing cost: 3 runs of job 0, 3 + 3 of job 1
    assert (summary["runs"], summary["beside_runs"]) == (9, 3)
    report = (sweep / "sweep_report.md").read_text()
    assert "beside its own, in its own job" in report
    assert "The sweep launched 9 runs, 3 of them runs of the baseline combination" in report


def test_drift_between_jobs_reads_as_a_slowdown_only_when_jobs_are_compared_apart(drifting):
    # separate: the job ran after the baseline job, 3 runs later: about 14% "slower" with a
    # tight interval although the switch does nothing (the hazard beside pairing removes)
    separate = by_name(drifting["separate"][0])[f"{NORM}=True"]
    assert separate.beside_baseline is False and not separate.from_job
    assert separate.verdict == "SLOWER" and separate.gain_pct < -10
    assert (
        "(experiment.sweep_pairing=separate, or jobs"
        in (drifting["separate"][0] / "sweep_report.md").read_text()
    )
    # beside: each pair is adjacent and counterbalanced; no winner and no loser
    beside = by_name(drifting["beside"][0])[f"{NORM}=True"]
    assert beside.verdict not in ("FASTER", "SLOWER"), beside
    assert beside.ci_low < 0 < beside.ci_high and beside.from_job


def test_a_paired_jobs_report_and_history_name_each_variants_own_combination(drifting):
    from afbench.history.records import extract
    from afbench.store import OutDir

    sweep, _ = drifting["beside"]
    job = sweep / by_name(sweep)[f"{NORM}=True"].job
    plan = json.loads((job / "plan.json").read_text())
    assert plan["baseline"] == SWEEP_BASELINE
    # the history keeps one series per combination: the baseline runs beside the job are the
    # baseline combination's, not the job's (a newcomer saw them labelled rmsnorm=true)
    names = sorted(v.record["variant"] for v in extract(OutDir(job)).variants)
    assert names == [f"{COMBINATION} [{NORM}=True]", f"{SWEEP_BASELINE} [{NORM}=False]"]
    # the job's own report names both sides' settings in its variants table
    report = (job / "report.md").read_text()
    assert f"{NORM}=True" in report and f"{NORM}=False" in report
    assert "one job of a sweep (experiment.sweep_pairing=beside)" in report
