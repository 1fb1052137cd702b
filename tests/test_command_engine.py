"""The command engine (engine=command): a user's executable per run, run in-process here
with tiny scripts from tests/fault_workers (never the real model)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from afbench.config.models import RunConfig
from afbench.engines.command import run_command
from afbench.errors import ConfigError, RunFailed
from afbench.runspec import RunSpec

WORKERS = Path(__file__).parent / "fault_workers"
LOSS_PATTERN = (
    r"\bstep:\s*(?P<step>\d+)\s+loss:\s*(?P<loss>\S+)\s+"
    r"elapsed_time_per_step:\s*(?P<value>\S+?)s?(?=\s|$)"
)


def make_spec(
    tmp_path: Path,
    args: list[str],
    *,
    profiler: bool = False,
    executable: str = sys.executable,
    **engine,
) -> RunSpec:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    config = RunConfig.model_validate(
        {
            "model": {"name": "m", "path": "/models/m"},
            "data": {"name": "d", "path": "/data/d.parquet"},
            "parallel": {"world_size": 2, "devices": [4, 7], "tp_size": 1},
            "scheduler": {
                "workload": "sft",
                "steps": 5,
                "seed": 43,
                "seq_len": 128,
                "micro_batch_size": 2,
                "measure": {"first_step": 2, "last_step": 5},
            },
            "optimization": {
                "profiler": profiler,
                "profiler_window": {"first_step": 2, "last_step": 4},
            },
            "engine": {"name": "command", "executable": executable, "args": args, **engine},
        }
    )
    return RunSpec(
        run_id="v-train-r1",
        index=1,
        variant="v",
        phase="train",
        repeat=2,
        config=config,
        config_hash="0" * 64,
        run_dir=str(run_dir),
        timeout_s=60,
        kill_grace_s=2,
    )


def records(run_dir: Path) -> list[dict]:
    return [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_args_placeholders_and_env_are_filled_from_the_run(tmp_path, capsys):
    out = tmp_path / "echo.json"
    spec = make_spec(
        tmp_path,
        [
            str(WORKERS / "echo_run.py"),
            str(out),
            "{steps}",
            "{mode}",
            "{devices}",
            "{seed}/{round}/{variant}/{phase}",
            "{model_path}",
            "{data_path}",
            "{world_size}",
            "{seq_len}",
            "{global_batch_size}",
            "{profile_dir}",
            "{{literal}}",
        ],
        env={"USER_FLAG": "1"},
    )
    result = run_command(spec, Path(spec.run_dir))
    run_dir = Path(spec.run_dir)
    seen = json.loads(out.read_text())
    assert seen["argv"][2:] == [
        "5",
        "train",
        "4,7",
        "43/2/v/train",
        "/models/m",
        "/data/d.parquet",
        "2",
        "128",
        "4",
        str(run_dir / "profile"),
        "{literal}",
    ]
    assert seen["cwd"] == str(run_dir)
    env = seen["env"]
    assert env["AFBENCH_RUN_DIR"] == str(run_dir)
    assert env["AFBENCH_STEPS"] == "5" and env["AFBENCH_SEED"] == "43"
    assert env["AFBENCH_ROUND"] == "2" and "AFBENCH_REPEAT" not in env
    assert env["AFBENCH_MODE"] == "train" and env["AFBENCH_DEVICES"] == "4,7"
    assert env["AFBENCH_PROFILE_DIR"] == str(run_dir / "profile")
    assert env["USER_FLAG"] == "1"
    assert result.engine == "command" and result.workload == "sft"
    assert result.argv[0] == sys.executable and result.argv[3] == "5"
    assert result.first_step_s == pytest.approx(0.02)
    assert result.steps_logged == 5
    # afbench cannot see inside the user's process: memory is "not reported", never a guess
    assert result.memory.source.key == "src_not_reported"
    assert result.memory.source.text == "not reported (engine command)"
    assert result.memory.peak_reserved_gib is None and result.efficiency.mfu_pct is None


def test_output_is_streamed_to_stdout_and_step_lines_become_records(tmp_path, capsys):
    spec = make_spec(tmp_path, [str(WORKERS / "echo_run.py"), str(tmp_path / "e.json"), "3"])
    run_command(spec, Path(spec.run_dir))
    stdout = capsys.readouterr().out
    assert "warning on stderr" in stdout  # stderr goes to the same log
    assert stdout.count("elapsed_time_per_step") == 3
    recs = records(Path(spec.run_dir))
    assert [r["step"] for r in recs] == [1, 2, 3]  # ANSI colours stripped before matching
    assert recs[0] == {"kind": "step", "step": 1, "step_time_s": 0.02, "loss": 0.5}


def test_loss_group_is_recorded_and_non_numeric_groups_are_left_out(tmp_path):
    pattern = LOSS_PATTERN.replace(r"(?P<value>\S+?)s?", r"(?P<value>[\d.]+)(?P<unit>s)")
    spec = make_spec(tmp_path, [str(WORKERS / "good.py"), "{steps}"], step_pattern=pattern)
    run_command(spec, Path(spec.run_dir))
    recs = records(Path(spec.run_dir))
    assert [r["step"] for r in recs] == [1, 2, 3, 4, 5]
    assert recs[1] == {"kind": "step", "step": 2, "step_time_s": 0.03, "loss": 1.0}


def test_profile_mode_creates_profile_dir(tmp_path):
    out = tmp_path / "echo.json"
    spec = make_spec(
        tmp_path, [str(WORKERS / "echo_run.py"), str(out), "1", "{mode}"], profiler=True
    )
    run_command(spec, Path(spec.run_dir))
    assert json.loads(out.read_text())["argv"][-1] == "profile"
    assert (Path(spec.run_dir) / "profile").is_dir()


def test_relative_executable_is_a_config_error_naming_the_key(tmp_path):
    spec = make_spec(tmp_path, [], executable="python3")
    with pytest.raises(ConfigError, match=r"engine\.executable: 'python3' is not an absolute path"):
        run_command(spec, Path(spec.run_dir))


def test_missing_executable_is_a_config_error(tmp_path):
    spec = make_spec(tmp_path, [], executable=str(tmp_path / "nope"))
    with pytest.raises(ConfigError, match=r"engine\.executable: .*nope does not exist"):
        run_command(spec, Path(spec.run_dir))


def test_non_executable_file_is_a_config_error(tmp_path):
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o644)
    spec = make_spec(tmp_path, [], executable=str(script))
    with pytest.raises(ConfigError, match=r"engine\.executable: .* is not executable"):
        run_command(spec, Path(spec.run_dir))


def test_unknown_placeholder_is_a_config_error_naming_engine_args(tmp_path):
    spec = make_spec(tmp_path, [str(WORKERS / "good.py"), "--lr={learning_rate}"])
    unknown = r"engine\.args\[1\]: unknown placeholder \{learning_rate\}"
    with pytest.raises(ConfigError, match=unknown):
        run_command(spec, Path(spec.run_dir))
    assert not (Path(spec.run_dir) / "metrics.jsonl").exists()  # nothing was started


def test_the_old_repeat_placeholder_is_refused_naming_round(tmp_path):
    from afbench.engines.registry import engine_for

    spec = make_spec(tmp_path, [str(WORKERS / "good.py"), "--seed={repeat}"])
    with pytest.raises(ConfigError) as err:
        engine_for(spec.config).check(spec.config)
    assert str(err.value) == (
        "engine.args[1]: {repeat} is now {round}: write {round} in '--seed={repeat}'"
    )


def test_plan_time_check_names_an_unknown_placeholder_before_anything_runs(tmp_path):
    from afbench.engines.command import placeholders, run_values
    from afbench.engines.registry import engine_for

    spec = make_spec(tmp_path, [str(WORKERS / "good.py"), "--v={variantt}"])
    with pytest.raises(ConfigError, match=r"engine\.args\[1\]: unknown placeholder \{variantt\}"):
        engine_for(spec.config).check(spec.config)
    assert list(Path(spec.run_dir).iterdir()) == []  # nothing started, nothing written
    # the names the check accepts are exactly the ones a run fills
    assert tuple(run_values(spec, Path(spec.run_dir))) == placeholders()


def test_step_pattern_without_value_group_is_a_config_error(tmp_path):
    spec = make_spec(tmp_path, [str(WORKERS / "good.py")], step_pattern=r"step: (?P<step>\d+)")
    with pytest.raises(ConfigError, match=r"engine\.step_pattern: .*lacks named group"):
        run_command(spec, Path(spec.run_dir))


def test_nonzero_exit_fails_with_the_status_and_last_output(tmp_path):
    spec = make_spec(tmp_path, [str(WORKERS / "exit3.py")])
    failed = r"^command exited with status 3; last output: fatal: injected exit 3$"
    with pytest.raises(RunFailed, match=failed):
        run_command(spec, Path(spec.run_dir))
    assert len(records(Path(spec.run_dir))) == 1  # records before the failure are kept


def test_crash_fails_with_status_1_naming_the_exception(tmp_path):
    spec = make_spec(tmp_path, [str(WORKERS / "crash.py")])
    with pytest.raises(RunFailed, match=r"status 1; last output: RuntimeError: injected crash"):
        run_command(spec, Path(spec.run_dir))


def test_killed_command_fails_naming_the_signal(tmp_path):
    spec = make_spec(tmp_path, [str(WORKERS / "selfkill.py")])
    with pytest.raises(RunFailed, match=r"^command killed by SIGKILL \(out of memory\?\)$"):
        run_command(spec, Path(spec.run_dir))


def test_nan_loss_fails_naming_the_step_and_stops_the_command(tmp_path):
    spec = make_spec(
        tmp_path, [str(WORKERS / "nan_loss.py"), "{steps}", "3"], step_pattern=LOSS_PATTERN
    )
    t0 = time.monotonic()
    with pytest.raises(RunFailed, match=r"^non-finite loss \(nan\) at step 3$"):
        run_command(spec, Path(spec.run_dir))
    assert time.monotonic() - t0 < 10  # the script sleeps 30 s after the NaN step
    assert [r["step"] for r in records(Path(spec.run_dir))] == [1, 2, 3]


def test_default_pattern_captures_the_loss_of_reference_lines(tmp_path):
    spec = make_spec(tmp_path, [str(WORKERS / "good.py"), "{steps}"])
    run_command(spec, Path(spec.run_dir))
    assert isinstance(records(Path(spec.run_dir))[0]["loss"], float)


def test_no_step_line_fails(tmp_path):
    spec = make_spec(tmp_path, [str(WORKERS / "silent.py")])
    with pytest.raises(
        RunFailed,
        match=r"^no step lines matched engine\.step_pattern "
        r"\(named groups step and value, seconds per step; a torchtitan log: "
        r"engine=torchtitan\)",
    ):
        run_command(spec, Path(spec.run_dir))


def _worker(spec: RunSpec, code: str = "") -> subprocess.Popen:
    runspec = Path(spec.run_dir) / "runspec.json"
    runspec.write_text(spec.model_dump_json())
    script = (
        f"import sys, afbench.worker as w\nrc = w.main([{str(runspec)!r}])\n{code}\nsys.exit(rc)"
    )
    return subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=spec.run_dir,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def test_worker_dispatches_to_the_command_engine_without_torch(tmp_path):
    spec = make_spec(tmp_path, [str(WORKERS / "good.py"), "{steps}"])
    proc = _worker(spec, "assert 'torch' not in sys.modules, 'torch was imported'")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    result = json.loads((Path(spec.run_dir) / "result.json").read_text())
    assert result["engine"] == "command" and result["steps_logged"] == 5
    assert "step:  5" in out


def test_sigterm_to_the_worker_stops_the_command(tmp_path):
    marker = f"afbench-test-{os.getpid()}-{time.monotonic_ns()}"
    spec = make_spec(tmp_path, [str(WORKERS / "hang.py"), "1", marker])
    proc = _worker(spec)
    try:
        assert "step:  1" in _read_until(proc, "step:  1", timeout=30)
        os.kill(proc.pid, signal.SIGTERM)  # the worker alone, not its group
        out, _ = proc.communicate(timeout=20)
        assert proc.returncode == 1
        assert "afbench.worker: error: RunFailed: stopped by SIGTERM" in out
        children = [pid for pid, cmd in _processes(marker) if "--grandchild" not in cmd]
        assert children == []
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the grandchild is the launcher's to reap
        except ProcessLookupError:
            pass
        proc.wait()


def _read_until(proc: subprocess.Popen, text: str, timeout: float) -> str:
    seen, deadline = "", time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen += line
        if text in line:
            break
    return seen


def _processes(marker: str) -> list[tuple[int, str]]:
    """(pid, command line) of live processes whose command line holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = next(
                (
                    ln
                    for ln in (entry / "status").read_text().splitlines()
                    if ln.startswith("State:")
                ),
                "",
            )
        except OSError:
            continue
        if marker in cmd and "zombie" not in state:
            found.append((int(entry.name), cmd))
    return found


def test_a_tqdm_bar_glued_to_each_step_line_gives_each_step_once(tmp_path):
    # the bytes real tqdm wrote to a redirected file (tests/fixtures/logs/make_tqdm_glued.py)
    log = Path(__file__).parent / "fixtures" / "logs" / "tqdm_glued.log"
    spec = make_spec(
        tmp_path, [str(WORKERS / "replay_log.py"), str(log)], step_pattern=LOSS_PATTERN
    )
    result = run_command(spec, Path(spec.run_dir))
    recs = records(Path(spec.run_dir))
    assert [r["step"] for r in recs] == list(range(1, 13)) and result.steps_logged == 12
    assert recs[5] == {"kind": "step", "step": 6, "step_time_s": 0.276, "loss": 2.44}


def test_a_constant_minus_one_loss_is_a_placeholder_with_no_parity(tmp_path):
    import pandas as pd

    from afbench.compare import PLACEHOLDER_LOSS_REASON, loss_parity

    spec = make_spec(tmp_path, [str(WORKERS / "pp_placeholder_loss.py"), "{steps}"])
    run_command(spec, Path(spec.run_dir))  # -1 is not a non-finite loss: the run succeeds
    recs = records(Path(spec.run_dir))
    assert all("loss" not in r and r["loss_placeholder"] is True for r in recs)
    assert [r["step_time_s"] for r in recs][:2] == [0.02, 0.03]  # the timing is kept
    steps = pd.DataFrame([{"run_id": rid, **r} for rid in ("a", "b") for r in recs])
    parity = loss_parity(steps, ["a"], ["b"], 1e-5)
    assert (parity.status, parity.reason, parity.curve) == ("N/A", PLACEHOLDER_LOSS_REASON, None)
    # records written before the engine marked it: a constant -1 as the loss, same answer
    old = pd.DataFrame(
        [{"run_id": rid, "step": s, "loss": -1.0} for rid in ("a", "b") for s in (1, 2, 3)]
    )
    assert loss_parity(old, ["a"], ["b"], 1e-5).reason == PLACEHOLDER_LOSS_REASON


def test_torchtitans_pipeline_parallel_log_is_read_with_placeholder_losses(tmp_path):
    import pandas as pd

    from afbench.compare import PLACEHOLDER_LOSS_REASON, loss_parity

    # torchtitan-npu's colored step lines on the first pipeline stage: loss: -1.00000 each step
    log = Path(__file__).parent / "fixtures" / "torchtitan" / "console_npu_pp_rank0_color.log"
    assert "\x1b[32mloss: -1.00000  " in log.read_text()
    spec = make_spec(tmp_path, [str(WORKERS / "replay_log.py"), str(log)])  # default pattern
    result = run_command(spec, Path(spec.run_dir))
    recs = records(Path(spec.run_dir))
    assert [r["step"] for r in recs] == list(range(1, 13)) and result.steps_logged == 12
    assert all("loss" not in r and r["loss_placeholder"] is True for r in recs)
    assert [r["step_time_s"] for r in recs][5:10] == [0.587, 0.592, 0.590, 0.595, 0.589]
    steps = pd.DataFrame([{"run_id": rid, **r} for rid in ("a", "b") for r in recs])
    parity = loss_parity(steps, ["a"], ["b"], 1e-5)
    assert (parity.status, parity.reason, parity.curve) == ("N/A", PLACEHOLDER_LOSS_REASON, None)


def test_the_workers_error_line_behind_a_progress_bar_is_still_found(tmp_path):
    from afbench.launch.local import _last_line, _tail
    from afbench.runspec import ERROR_PREFIX

    log = tmp_path / "stdout.log"
    log.write_bytes(
        (
            "\rTraining:  50%|█████     | 5/10 [00:02<00:02, 2.1it/s, loss=2.4, step=5]"
            f"{ERROR_PREFIX}RuntimeError: CUDA out of memory\n"
        ).encode()
    )
    assert _last_line(log, ERROR_PREFIX) == "RuntimeError: CUDA out of memory"
    assert _tail(log).startswith(ERROR_PREFIX)


def test_a_placeholder_on_some_steps_leaves_the_other_steps_compared():
    import pandas as pd

    from afbench.compare import loss_parity

    rows = [
        {"run_id": rid, "step": s, "loss": None if s == 1 else 2.0 / s, "loss_placeholder": s == 1}
        for rid in ("a", "b")
        for s in (1, 2, 3, 4)
    ]
    parity = loss_parity(pd.DataFrame(rows), ["a"], ["b"], 1e-5)
    assert parity.status == "MATCH" and parity.steps_compared == 3


@pytest.mark.parametrize("name", ["epoch_counter_steps.log", "absl_glog_steps.log"])
def test_epoch_counter_and_absl_header_step_lines_become_records(tmp_path, name):
    # Megatron/PyTorch-script "Epoch [1/3] step: N" and absl "I1203 ... train.py:88] step: N"
    # lines, with dynamo recompile warnings quoting a step between them (left out)
    log = Path(__file__).parent / "fixtures" / "logs" / name
    spec = make_spec(tmp_path, [str(WORKERS / "replay_log.py"), str(log)])
    result = run_command(spec, Path(spec.run_dir))
    recs = records(Path(spec.run_dir))
    assert [r["step"] for r in recs] == list(range(1, 13)) and result.steps_logged == 12
    assert recs[6] == {"kind": "step", "step": 7, "step_time_s": 0.277, "loss": 2.43}
