"""Sweeps as Hydra runs them: the pre-check composes with the chosen launcher, the job count
and ETA come from the basic sweeper's job list (a recipe's ``hydra.sweeper.params`` too),
list values sweep, and ``hydra.job.chdir=True`` keeps relative paths meaning the start
directory's files."""

from __future__ import annotations

import importlib.resources
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from afbench.cli import precheck, register
from afbench.cli.sweep_callback import SweepCallback
from afbench.store import basic_sweep

WORKER = Path(__file__).parent / "fault_workers" / "switch_timed.py"
BASIC = {"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"}


def hydra_node(params: dict, task: list[str], sweeper: dict = BASIC):
    return OmegaConf.create({"sweeper": {**sweeper, "params": params}, "overrides": {"task": task}})


def test_the_job_list_joins_the_recipes_params_and_the_command_line():
    swept = basic_sweep(
        hydra_node(
            {"optimization.autofuse": "false,true"}, ["engine.args=[a],[b,c]", "report.lang=zh"]
        )
    )
    assert swept == {
        "optimization.autofuse": ["False", "True"],  # as Hydra writes them
        "engine.args": ["[a]", "[b,c]"],
    }
    # the command line's value of a key the recipe sweeps decides (here: not swept)
    assert (
        basic_sweep(
            hydra_node({"optimization.autofuse": "false,true"}, ["optimization.autofuse=true"])
        )
        == {}
    )
    assert basic_sweep(hydra_node({}, ["x=1"], {"_target_": "optuna.Sweeper"})) is None


def test_the_callback_counts_the_sweepers_jobs_and_never_a_negative_eta(tmp_path, caplog):
    cb = SweepCallback()
    cfg = OmegaConf.create(
        {
            "hydra": {
                **OmegaConf.to_container(
                    hydra_node({"optimization.autofuse": "false,true"}, ["a=1,2,3"])
                ),
                "sweep": {"dir": str(tmp_path)},
            }
        }
    )
    with caplog.at_level("INFO", logger="afbench.sweep"):
        cb.on_multirun_start(cfg)
        assert cb.total == 6 and "sweep of 6 jobs" in caplog.text
        cb.total = 1  # a count that turns out short: no count, no ETA, nothing negative
        cb.on_job_end(cfg, None)
        cb.on_job_end(cfg, None)
    assert "job 2/? done" in caplog.text and "ETA -" not in caplog.text


@pytest.mark.parametrize(
    "launcher",
    [
        [
            "hydra/launcher=submitit_slurm",
            "hydra.launcher.partition=gpu",
            "hydra.launcher.gpus_per_node=1",
            "hydra.launcher.timeout_min=120",
        ],
        ["hydra/launcher=submitit_local", "hydra.launcher.gpus_per_node=4"],
    ],
)
def test_the_precheck_composes_the_launchers_own_keys(launcher, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    register()
    precheck(
        ["-m", *launcher, "optimization.autofuse=false,true"],
        str(importlib.resources.files("afbench.conf")),
    )  # exits on a problem


def test_a_launcher_key_without_its_launcher_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    register()
    with pytest.raises(SystemExit) as exc:
        precheck(
            ["-m", "hydra.launcher.partition=gpu", "optimization.autofuse=false,true"],
            str(importlib.resources.files("afbench.conf")),
        )
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "hydra.launcher.partition=gpu" in err and "Traceback" not in err


def test_a_relative_path_of_the_config_means_the_start_directorys_file(
    compose_cfg, tmp_path, monkeypatch
):
    from afbench.config import validate_config

    monkeypatch.chdir(tmp_path)
    conf = validate_config(
        compose_cfg(
            "data.path=data/wordle/train.parquet", "engine=torchtitan", "model.path=models/qwen"
        )
    )
    assert conf.data.path == str(tmp_path / "data" / "wordle" / "train.parquet")
    # torchtitan's checkpoint.initial_load_path must be absolute: it is
    assert conf.model.path == str(tmp_path / "models" / "qwen")


@pytest.mark.e2e
def test_a_recipe_held_sweep_with_a_list_sweep_under_chdir_runs_every_job(tmp_path):
    """A recipe sweeping optimization.autofuse, the command line sweeping a list value, jobs
    run inside their folders (hydra.job.chdir=True) with a relative data.path: 4 jobs, each
    counted, paired, and each run given the start directory's data file."""
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "swept.yaml").write_text(
        "# @package _global_\nexperiment:\n  name: swept\n  baseline: baseline\n"
        "  variants:\n    baseline: {}\n  phases:\n    run: {}\n"
        "hydra:\n  sweeper:\n    params:\n      optimization.autofuse: false,true\n"
    )
    data = tmp_path / "data" / "wordle" / "train.parquet"
    data.parent.mkdir(parents=True)
    shutil.copy(
        Path(__file__).parents[1]
        / "assets"
        / "wordle_sample"
        / "data"
        / "train-00000-of-00001.parquet",
        data,
    )
    (tmp_path / "locks").mkdir()
    env = {
        **os.environ,
        "AFBENCH_RECIPE_PATH": str(tmp_path / "recipes"),
        "AFBENCH_LOCK_DIR": str(tmp_path / "locks"),
        "AFBENCH_HISTORY_URL": f"sqlite:///{tmp_path / 'h.sqlite'}",
    }
    env.pop("HYDRA_FULL_ERROR", None)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "afbench",
            "-m",
            "experiment=swept",
            "hydra.job.chdir=True",
            "data.path=data/wordle/train.parquet",
            "engine=command",
            f"engine.executable={sys.executable}",
            f"engine.args=['{WORKER}'],['{WORKER}','x']",
            "scheduler.steps=5",
            "scheduler.measure.first_step=2",
            "scheduler.measure.last_step=5",
            "verdict.contention=keep",
            "experiment.rerun_contended=0",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "sweep of 4 jobs" in out and "sweep job 4/4 done" in out and "ETA -" not in out
    assert "no multirun.yaml" not in out and out.count("variant sweep_baseline") == 3
    (sweep,) = [p.parent for p in tmp_path.glob("multirun/*/*/multirun.yaml")]
    specs = list(sweep.glob("*/runs/*/runspec.json"))
    assert len({p.parents[2] for p in specs}) == 4
    for spec in specs:
        assert json.loads(spec.read_text())["config"]["data"]["path"] == str(data)
    assert json.loads((sweep / "sweep_summary.json").read_text())["failed"] == []
