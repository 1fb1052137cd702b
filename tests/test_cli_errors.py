"""Bad input on the command line: exit status, one line naming the key, nothing written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def afbench(cwd, *args):
    return subprocess.run(
        [sys.executable, "-m", "afbench", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    "args, code, message",
    [
        (
            ["optimization.autofuze=true"],
            2,
            "optimization.autofuze: unknown key; did you mean 'optimization.autofuse'?",
        ),
        (["optimisation.autofuse=true"], 2, "did you mean 'optimization'?"),
        (["scheduler.steps=ten"], 2, "scheduler.steps: Input should be a valid integer"),
        (["scheduler.steps=0"], 2, "scheduler.steps: Input should be greater than 0"),
        (["scheduler.steps=5"], 2, "measure.last_step 10 is after the last step 5"),
        (["scheduler.micro_batch_size=3"], 2, "not a multiple of micro_batch_size 3"),
        (["optimization.npugraph_ex=true"], 2, "npugraph_ex is inference-only"),
        (["experiment=nope"], 2, "Could not find 'experiment/nope'; available: "),
        (["model=qwen3_1_7b"], 2, "model.path: required but not set"),
        (["parallel.devices=[0,0]", "parallel.world_size=2"], 2, "device ids must be distinct"),
        (
            ["-m", "optimization.autofuse=false,ture"],
            2,
            "optimization.autofuse: Input should be a valid boolean",
        ),
        (["+launcher.env.lower=1"], 2, "must match [A-Z_][A-Z0-9_]*"),
        # engine.env is the command engine's; the message said "did you mean 'env'?" naming env
        (
            ["engine.env.SLOW=1"],
            2,
            "engine.env: engine=builtin has no key 'env'; another engine has it (engine=command; "
            "for every run's environment, whatever the engine: launcher.env.<NAME>=...)",
        ),
        (
            ["engine=torchtitan", "scheduler=infer"],
            2,
            "scheduler.workload: engine=torchtitan runs SFT only, got 'infer'",
        ),
        (
            ["verdict.rounds=sometimes"],
            2,
            "verdict.rounds: expected a positive integer or 'auto' (got 'sometimes')",
        ),
        (
            ["-m", "verdict.rounds=3,often"],
            2,
            "verdict.rounds: expected a positive integer or 'auto' (got 'often')",
        ),
        (
            ["verdict.rounds=auto", "verdict.max_rounds=2"],
            2,
            "max_rounds 2 is below min_rounds 3: raise verdict.max_rounds",
        ),
        (
            ["verdict.min_rounds=2"],
            2,
            "verdict.min_rounds: Input should be greater than or equal to 3",
        ),
        (["experiment.order=shuffled"], 2, "experiment.order: Input should be 'counterbalanced'"),
        (
            ["verdict.precision_pct=0"],
            2,
            "verdict.precision_pct: Input should be greater than 0",
        ),
        (["verdict.min_gain_pct=-1"], 2, "verdict.min_gain_pct: Input should be greater than 0"),
        # checked before Hydra makes the output directory (it left one holding only .hydra/)
        (["resume=/nope"], 2, "resume: /nope is not a directory; give an earlier afbench output"),
        # a sweep too: it made the sweep folder and reported every job RUN_FAILED (exit 1)
        (
            ["-m", "verdict.rounds=1,2", "resume=/nope"],
            2,
            "resume: /nope is not a directory; give an earlier afbench output",
        ),
    ],
)
def test_config_errors_exit_2_with_one_line_and_write_nothing(tmp_path, args, code, message):
    proc = afbench(tmp_path, *args)
    assert proc.returncode == code, proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "multirun").exists()


@pytest.mark.parametrize("sweep", [False, True], ids=["single", "sweep"])
@pytest.mark.parametrize("held", [["notes.txt", "runs/"], []], ids=["other_files", "empty"])
def test_resume_of_a_folder_holding_no_afbench_experiment_exits_2_and_writes_nothing(
    tmp_path, sweep, held
):
    folder = tmp_path / "not_an_output"
    folder.mkdir()
    for name in held:  # a folder of a user's own files (a runs/ folder of its own too)
        (folder / name.rstrip("/")).mkdir() if name.endswith("/") else (folder / name).write_text(
            "mine\n"
        )
    before = sorted(p.relative_to(folder) for p in folder.rglob("*"))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    cheap = ["engine=command", "engine.executable=/bin/true", "launcher.timeout_s=20"]
    args = ["-m", "verdict.rounds=1,2"] if sweep else []
    proc = afbench(cwd, *args, *cheap, f"resume={folder}")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "resume:" in line]
    assert lines == [
        f"afbench: error: resume: {folder} holds no afbench experiment (none of plan.json, "
        "experiment.json, multirun.yaml, sweep_summary.json in it); point resume= at the "
        "experiment's output directory (the folder of the report.md printed at the end of its "
        "run, e.g. outputs/<date>/<time>-<experiment>-<pid>) or at its sweep folder "
        "(multirun/<date>/<time>-<name>-<pid>), or drop resume= to start a new experiment"
    ]
    assert not (cwd / "outputs").exists() and not (cwd / "multirun").exists()
    assert sorted(p.relative_to(folder) for p in folder.rglob("*")) == before


def test_resume_index_refuses_a_folder_holding_no_afbench_experiment(tmp_path):
    from afbench.errors import ConfigError
    from afbench.store.resume import resume_index

    with pytest.raises(ConfigError, match=f"^resume: {tmp_path} holds no afbench experiment"):
        resume_index(tmp_path)


def test_a_misspelt_key_is_not_told_to_take_a_plus(tmp_path):
    # '+experiment.ordr=random' would fail too (every section's keys are fixed): no such advice
    proc = afbench(tmp_path, "experiment.ordr=random", "task=check")
    assert proc.returncode == 2, proc.stderr
    assert "experiment.ordr: unknown key; did you mean 'experiment.order'?" in proc.stderr
    assert "+experiment.ordr" not in proc.stderr


@pytest.mark.parametrize("plus", ["", "+"])
def test_a_moved_key_on_the_command_line_is_refused_in_one_line(tmp_path, plus):
    # Hydra refuses the absent key (no '+'), validation the added one ('+'): one line either way
    proc = afbench(tmp_path, f"{plus}experiment.repeats=5", "task=check")
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if "experiment.repeats" in ln]
    assert lines == [
        "afbench: error: experiment.repeats moved to verdict.rounds: write verdict.rounds=5"
    ]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "outputs").exists()


def test_missing_model_folder_fails_preflight_with_action(tmp_path):
    proc = afbench(tmp_path, f"model.path={tmp_path / 'no_model'}", "model.manifest=null")
    assert proc.returncode == 3, proc.stderr
    assert "[FAIL] model.path:" in proc.stderr
    assert not list(tmp_path.glob("outputs/*/*/runs"))  # stopped before any run


def test_missing_data_file_fails_preflight(tmp_path):
    proc = afbench(tmp_path, f"data.path={tmp_path / 'none.parquet'}")
    assert proc.returncode == 3 and "[FAIL] data.path:" in proc.stderr


def test_more_devices_than_present_fails_preflight(tmp_path):
    proc = afbench(
        tmp_path,
        "backend=cpu",
        "parallel.world_size=2",
        "parallel.devices=[0,1]",
        "scheduler.micro_batch_size=2",
    )
    assert proc.returncode == 3 and "[FAIL] parallel.devices:" in proc.stderr


def test_verbose_shows_the_traceback(tmp_path):
    proc = afbench(tmp_path, "verbose=true", f"model.path={tmp_path}", "model.manifest=null")
    assert proc.returncode == 3 and "Traceback" in proc.stderr


def test_task_check_prints_every_line_and_passes(tmp_path):
    proc = afbench(tmp_path, "task=check")
    assert proc.returncode == 0, proc.stderr
    assert "[PASS] model.manifest:" in proc.stderr and "[FAIL]" not in proc.stderr


def test_seq_len_above_the_models_max_positions_exits_2_before_running(tmp_path):
    proc = afbench(tmp_path, "scheduler.seq_len=100000")
    assert proc.returncode == 2
    assert (
        "scheduler.seq_len = 100000 exceeds the model's max_position_embeddings 2048" in proc.stderr
    )
    assert not (tmp_path / "outputs").exists()


def test_unknown_key_in_a_recipe_variant_exits_2_and_writes_nothing(tmp_path):
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "typo.yaml").write_text(
        "# @package _global_\nexperiment:\n  name: typo\n  baseline: a\n"
        "  variants:\n    a: {}\n    b: {optimization: {autofuze: true}}\n  phases:\n    run: {}\n"
    )
    import os

    env = {**os.environ, "AFBENCH_RECIPE_PATH": str(tmp_path / "recipes")}
    proc = subprocess.run(
        [sys.executable, "-m", "afbench", "experiment=typo"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "experiment.variants.b" in proc.stderr and "autofuze: unknown key" in proc.stderr
    assert not (tmp_path / "outputs").exists()


def test_broken_recipe_breaks_only_the_command_that_selects_it(tmp_path):
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "broken.yaml").write_text("experiment: [unclosed\n")
    env = {**os.environ, "AFBENCH_RECIPE_PATH": str(tmp_path / "recipes")}

    def run(*args):
        return subprocess.run(
            [sys.executable, "-m", "afbench", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    chosen = run("experiment=broken")
    assert chosen.returncode == 2, chosen.stderr
    assert "broken.yaml: not valid YAML" in chosen.stderr and "Traceback" not in chosen.stderr
    other = run("experiment=nope")  # any other command: one warning, then its own outcome
    assert other.returncode == 2
    assert other.stderr.count("broken.yaml: not valid YAML") == 1
    assert "left out (only experiment=broken needs it)" in other.stderr
    assert "Could not find 'experiment/nope'" in other.stderr
    assert not any(p.name != "recipes" for p in tmp_path.iterdir())


def test_engine_config_error_is_one_line_before_anything_runs(tmp_path):
    proc = afbench(tmp_path, "engine=torchtitan", "scheduler=infer")
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("afbench: error: ")
    assert "scheduler.workload" in lines[0]
    assert list(tmp_path.iterdir()) == []


def test_preflight_fail_lines_reach_the_terminal_and_nothing_is_left_behind(tmp_path):
    proc = afbench(tmp_path, "model.path=/nonexistent/model")
    assert proc.returncode == 3, proc.stderr
    for line in (
        "[FAIL] model.path: current /nonexistent/model/config.json not found",
        "afbench: error: preflight: 1 check(s) failed",
    ):
        assert line in proc.stderr
    assert list(tmp_path.iterdir()) == []  # no output folder holding only .hydra/


def test_task_check_writes_nothing(tmp_path):
    proc = afbench(tmp_path, "task=check")
    assert proc.returncode == 0, proc.stderr
    assert "[PASS] output root" in proc.stderr and "[PASS] data.path" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_unwritable_output_root_fails_preflight_with_exit_3(tmp_path):
    # /sys refuses new folders even for root (EPERM), as a read-only file system does (EROFS)
    proc = afbench(tmp_path, "hydra.run.dir=/sys/afbench-test/out")
    assert proc.returncode == 3, proc.stderr
    assert "[FAIL] output root: current /sys/afbench-test/out cannot be created" in proc.stderr
    assert "Traceback" not in proc.stderr and list(tmp_path.iterdir()) == []
    sweep = afbench(
        tmp_path,
        "-m",
        "hydra.sweep.dir=/sys/afbench-test/sweep",
        "optimization.autofuse=false,true",
    )
    assert sweep.returncode == 3, sweep.stderr
    assert "[FAIL] output root: current /sys/afbench-test/sweep cannot be created" in sweep.stderr


# Overrides as users type them (issue 10, item 9; Hydra issues 1577, 938, 1897, 3018).


@pytest.mark.parametrize(
    "key, value",
    [
        ("model.path", "/ckpt/byol/checkpoints/epoch=3-step=1200.ckpt"),  # PyTorch Lightning name
        ("data.path", "/data/wordle/split=b/train-00000-of-00001.parquet"),  # partition folder
        ("model.path", "/data/模型/qwen3_tiny"),  # issue 34: non-ASCII, Hydra's bare lexer error
    ],
)
def test_value_holding_equals_names_the_key_and_shows_the_quoted_form(tmp_path, key, value):
    proc = afbench(tmp_path, f"{key}={value}")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"afbench: error: {key}: ")
    assert f"'{key}=\"{value}\"'" in lines[0]
    assert "mismatched input" not in proc.stderr
    assert "LexerNoViableAltException" not in proc.stderr
    assert not (tmp_path / "outputs").exists()


def test_quoted_value_holding_equals_gets_past_the_override_grammar(tmp_path):
    value = str(tmp_path / "epoch=3-step=1200.ckpt")
    proc = afbench(tmp_path, f'model.path="{value}"', "model.manifest=null")
    # it reaches preflight, which looks for the (absent) model folder under that exact path
    assert proc.returncode == 3, proc.stderr
    assert f"[FAIL] model.path: current {value}/" in proc.stderr


def test_comma_value_without_multirun_exits_2_and_points_to_m(tmp_path):
    proc = afbench(tmp_path, "optimization.autofuse=false,true")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("afbench: error: optimization.autofuse: ")
    assert "-m" in lines[0] and "Ambiguous value" not in proc.stderr
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "multirun").exists()


def test_sweep_over_list_values_gives_two_jobs_with_integer_lists(tmp_path):
    import yaml

    worker = Path(__file__).parent / "fault_workers" / "good.py"
    (tmp_path / "locks").mkdir()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "afbench",
            "-m",
            "engine=command",
            f"engine.executable={sys.executable}",
            f"engine.args=['{worker}']",
            "backend=cpu",
            "parallel.world_size=2",
            "scheduler.micro_batch_size=2",
            "parallel.devices=[0,1],[2,3]",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=170,
        env={**os.environ, "AFBENCH_LOCK_DIR": str(tmp_path / "locks")},
    )
    # device ids do not apply on cpu: each job stops at its preflight, after Hydra composed it
    assert proc.returncode == 1, proc.stderr
    jobs = sorted(tmp_path.glob("multirun/*/*/[0-9]*/.hydra/config.yaml"))
    assert len(jobs) == 2
    devices = [yaml.safe_load(p.read_text())["parallel"]["devices"] for p in jobs]
    assert devices == [[0, 1], [2, 3]]
    assert all(isinstance(d, int) for pair in devices for d in pair)


# The first hour of a new user (issue 23): every trap one line, the right exit code.


def test_every_error_of_one_command_line_is_reported_at_once(tmp_path):
    proc = afbench(
        tmp_path, "scheduler.stepz=1", "report.langg=zh", "scheduler.steps=ten", "report.lang=fr"
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 4 and all(ln.startswith("afbench: error: ") for ln in lines)
    for key in (
        "scheduler.stepz: unknown key",
        "report.langg: unknown key",
        "scheduler.steps: Input should be a valid integer",
        "report.lang: Input",
    ):
        assert any(key in ln for ln in lines), lines
    assert list(tmp_path.iterdir()) == []


def test_a_grammar_error_and_a_bad_key_are_reported_together(tmp_path):
    proc = afbench(tmp_path, "model.path=/ckpt/epoch=3.ckpt", "scheduler.stepz=1")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("afbench: error: model.path: ") and "scheduler.stepz" in lines[1]


def test_unquoted_placeholder_list_names_the_key_and_the_quoted_form(tmp_path):
    proc = afbench(
        tmp_path, "engine=command", "engine.executable=/bin/true", "engine.args=[{steps},{seed}]"
    )
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("afbench: error: engine.args: ")
    assert "\"engine.args=['{steps}','{seed}']\"" in line and "no viable" not in line


def test_free_form_env_key_needs_no_plus(tmp_path):
    proc = afbench(tmp_path, "task=check", "launcher.env.HF_HOME=/data/hf", "launcher.env.lower=1")
    assert proc.returncode == 2, proc.stderr  # the bad name is still named, without a '+'
    assert "launcher.env" in proc.stderr and "must match [A-Z_][A-Z0-9_]*" in proc.stderr
    assert "unknown key" not in proc.stderr
    ok = afbench(tmp_path, "task=check", "launcher.env.HF_HOME=/data/hf")
    assert ok.returncode == 0, ok.stderr


def test_the_free_form_maps_are_every_dict_field_of_the_schemas():
    import typing

    from pydantic import BaseModel

    from afbench.cli.args import FREE_FORM_MAPS
    from afbench.config.models import AfbenchConfig

    def models(annotation) -> list:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            return [annotation]
        return [m for arg in typing.get_args(annotation) for m in models(arg)]

    def maps(model, prefix: str = "") -> set[str]:
        out = set()
        for name, field in model.model_fields.items():
            if typing.get_origin(field.annotation) is dict:
                out.add(prefix + name)
            for sub in models(field.annotation):  # union members too (engine.env)
                out |= maps(sub, f"{prefix}{name}.")
        return out

    assert set(FREE_FORM_MAPS) == maps(AfbenchConfig)


def test_every_free_form_map_needs_no_plus(tmp_path):
    cmd = ["task=check", "engine=command", "engine.executable=/bin/true"]
    ok = afbench(
        tmp_path,
        *cmd,
        "engine.env.SLOW=1",
        "+engine.env.FAST=1",
        "experiment.variants.slow.engine.env.SLOW=2",
        "experiment.phases.run.scheduler.seq_len=128",
    )
    assert ok.returncode == 0, ok.stderr
    bad = afbench(tmp_path, *cmd, "engine.env.lower=1")
    assert bad.returncode == 2, bad.stderr  # the bad name is named, with no advice to add '+'
    assert "engine.env" in bad.stderr and "must match [A-Z_][A-Z0-9_]*" in bad.stderr
    assert "+engine" not in bad.stderr


@pytest.mark.parametrize(
    "setting, message",
    [
        ("report.sweep_baseline=autofuse", "'autofuse' has no '=value'"),
        (
            'report.sweep_baseline="optimization.autofuse=maybe"',
            "optimization.autofuse=maybe is none of the swept values optimization.autofuse=false,true",
        ),
        (
            'report.sweep_baseline="optimization.rmsnorm=false"',
            "optimization.rmsnorm is not swept on this command line",
        ),
    ],
)
def test_sweep_baseline_is_checked_before_the_first_job(tmp_path, setting, message):
    proc = afbench(tmp_path, "-m", "optimization.autofuse=false,true", setting)
    assert proc.returncode == 2, proc.stderr
    assert "report.sweep_baseline: " in proc.stderr and message in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_quoting_hint_keeps_a_sweep_baseline_one_string(tmp_path):
    proc = afbench(
        tmp_path,
        "-m",
        "optimization.autofuse=false,true",
        "optimization.rmsnorm=false,true",
        "report.sweep_baseline=optimization.autofuse=false,optimization.rmsnorm=false",
    )
    assert proc.returncode == 2, proc.stderr
    assert (
        "'report.sweep_baseline=\"optimization.autofuse=false,optimization.rmsnorm=false\"'"
        in proc.stderr
    )


def test_the_quoting_hint_for_a_swept_path_with_equals_really_sweeps_two_values(tmp_path):
    values = [str(tmp_path / "split=a" / "x.parquet"), str(tmp_path / "split=b" / "x.parquet")]
    proc = afbench(tmp_path, "-m", f"data.path={','.join(values)}")
    assert proc.returncode == 2, proc.stderr
    hint = proc.stderr.strip().rsplit(" '", 1)[1].rstrip("'")  # the override, shell quotes off
    assert hint == f'data.path="{values[0]}","{values[1]}"'
    ran = afbench(tmp_path, "-m", hint, "report.formats=[md]")
    # both jobs stop at their preflight (no such files), each with its own path
    assert ran.returncode == 1, ran.stderr
    import yaml

    jobs = sorted(tmp_path.glob("multirun/*/*/[0-9]*/.hydra/config.yaml"))
    assert [yaml.safe_load(j.read_text())["data"]["path"] for j in jobs] == values


def test_task_check_shows_the_warnings_a_run_would_log(tmp_path):
    # a newcomer checks first: the shadowed key and the misspelt variant were only in a run's log
    proc = afbench(
        tmp_path,
        "experiment=sft_af_compare",
        "scheduler.steps=20",
        "experiment.variants.af_onn.optimization.autofuse=true",
        "task=check",
    )
    assert proc.returncode == 0, proc.stderr
    assert "warning: scheduler.steps is set again by experiment.phases.train" in proc.stderr
    assert "warning: experiment.variants.af_onn adds a new variant beside 'af_on'" in proc.stderr
    assert not (tmp_path / "outputs").exists()
