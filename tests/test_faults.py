"""Bad input and faults: whole experiments (`python -m afbench` in a subprocess) whose runs
use the command engine with tiny fault-injecting scripts (tests/fault_workers)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from afbench.runspec import INTERRUPTED_REASON, RunSpec
from afbench.store import read_summary

WORKERS = Path(__file__).parent / "fault_workers"
LOSS_PATTERN = (
    r"\bstep:\s*(?P<step>\d+)\s+loss:\s*(?P<loss>\S+)\s+"
    r"elapsed_time_per_step:\s*(?P<value>\S+?)s?(?=\s|$)"
)
# good.py's step times for steps 3..6 (the measured window below): 0.01, 0.02, 0.03, 0.01
GOOD_MEAN_S = 0.0175
# generous for runs that end by themselves: a loaded 2-core machine must not time them out
LAUNCHER = ["launcher.timeout_s=60", "launcher.kill_grace_s=1"]


def command(script: str, *args: str, **engine) -> dict:
    """A variant's overrides: run ``script`` from fault_workers with the command engine."""
    return {
        "engine": {
            "name": "command",
            "executable": sys.executable,
            "args": [str(WORKERS / script), *args],
            **engine,
        }
    }


def write_recipe(cwd: Path, name: str, variants: dict[str, dict]) -> Path:
    """A recipe ``name`` (first variant = baseline; one train phase, steps 1..6, window 3..6;
    skip policy per_variant, so one faulty variant does not skip the others)."""
    recipes = cwd / "recipes"
    recipes.mkdir(exist_ok=True)
    recipe = {
        "scheduler": {"steps": 6, "measure": {"first_step": 3, "last_step": 6}},
        "experiment": {
            "name": name,
            "baseline": next(iter(variants)),
            "variants": variants,
            "phases": {"train": {}},
            "skip_policy": "per_variant",
        },
    }
    path = recipes / f"{name}.yaml"
    path.write_text("# @package _global_\n" + yaml.safe_dump(recipe, sort_keys=False))
    return recipes


def afbench(cwd: Path, *args: str, popen: bool = False, timeout: float = 60):
    env = {**os.environ, "AFBENCH_RECIPE_PATH": str(cwd / "recipes")}
    env.pop("HYDRA_FULL_ERROR", None)
    argv = [sys.executable, "-m", "afbench", *args]
    if popen:
        return subprocess.Popen(
            argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def output_dir(cwd: Path) -> Path:
    dirs = [p.parent for p in (cwd / "outputs").glob("*/*/plan.json")]
    assert len(dirs) == 1, dirs
    return dirs[0]


def status(out: Path, run_id: str) -> dict:
    return json.loads((out / "runs" / run_id / "status.json").read_text())


def report_row(out: Path, run_id: str) -> str:
    """The line of report.md's runs table for ``run_id``."""
    rows = [ln for ln in (out / "report.md").read_text().splitlines() if f"| `{run_id}` |" in ln]
    assert len(rows) == 1, rows
    return rows[0]


def live_processes(marker: str) -> list[str]:
    """Command lines of live (non-zombie) processes that contain ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or entry.name == str(os.getpid()):
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker in cmd and state != "Z":
            found.append(cmd)
    return found


def assert_no_orphans(marker: str) -> None:
    deadline = time.monotonic() + 3
    while live_processes(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert live_processes(marker) == []


# ---------------------------------------------------------------- exit, crash, signal, NaN


FAULTS = {  # variant -> (overrides, the reason its status.json must give)
    "crash": (
        command("crash.py"),
        "RunFailed: command exited with status 1; last output: RuntimeError: injected crash",
    ),
    "exit3": (command("exit3.py"), "RunFailed: command exited with status 3"),
    "selfkill": (command("selfkill.py"), "RunFailed: command killed by SIGKILL (out of memory?)"),
    "nan_loss": (
        command("nan_loss.py", "{steps}", "3", step_pattern=LOSS_PATTERN),
        "RunFailed: non-finite loss (nan) at step 3",
    ),
    "silent": (command("silent.py"), "RunFailed: no step lines matched engine.step_pattern"),
}


@pytest.fixture(scope="module")
def faults_run(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("faults")
    variants = {
        "good": command("good.py", "{steps}"),
        **{name: over for name, (over, _) in FAULTS.items()},
    }
    write_recipe(cwd, "faults", variants)
    proc = afbench(cwd, "experiment=faults", *LAUNCHER)
    return proc, output_dir(cwd)


def test_failed_runs_make_the_orchestrator_exit_1_and_still_report(faults_run):
    proc, out = faults_run
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert (out / "summary.json").is_file() and (out / "report.md").is_file()


def test_terminal_and_cli_log_get_preflight_run_status_eta_and_headline(faults_run):
    proc, out = faults_run
    cli_log = (out / "cli.log").read_text()
    n = len(FAULTS) + 1
    expected = [
        "checks passed",
        f"[1/{n}] good-train-r1",
        "ETA ",
        f"[2/{n}] crash-train-r1",
        "FAILED",
        "afbench: report ",
    ]
    headline = json.loads((out / "summary.json").read_text())["headline"]
    assert headline
    for text in expected + headline:
        assert text in proc.stderr and text in cli_log, text


@pytest.mark.parametrize("variant", list(FAULTS))
def test_faulty_run_is_failed_with_its_reason_in_status_and_report(faults_run, variant):
    _, out = faults_run
    reason = FAULTS[variant][1]
    st = status(out, f"{variant}-train-r1")
    assert st["status"] == "FAILED" and st["exit_code"] == 1
    assert st["reason"]["key"] == "as_written"  # the worker's error, kept as written
    assert st["reason"]["text"].startswith(reason), st["reason"]
    assert not (out / "runs" / f"{variant}-train-r1" / "result.json").exists()
    row = report_row(out, f"{variant}-train-r1")
    assert "| FAILED |" in row and reason in row
    comp = next(
        c for c in read_summary(out / "summary.json").comparisons if c.variant.name == variant
    )
    assert comp.verdict == "RUN_FAILED" and reason in " ".join(comp.reasons)


def test_the_good_run_is_ok_with_its_metrics_and_result_intact(faults_run):
    _, out = faults_run
    assert status(out, "good-train-r1")["status"] == "OK"
    result = json.loads((out / "runs" / "good-train-r1" / "result.json").read_text())
    assert result["engine"] == "command" and result["steps_logged"] == 6
    metrics = (out / "runs" / "good-train-r1" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(ln)["step"] for ln in metrics] == [1, 2, 3, 4, 5, 6]
    summary = read_summary(out / "summary.json")
    run = next(r for r in summary.runs if r.run_id == "good-train-r1")
    assert run.mean_step_s == pytest.approx(GOOD_MEAN_S) and not run.log_error
    assert all(c.baseline.mean_step_s == pytest.approx(GOOD_MEAN_S) for c in summary.comparisons)
    assert "| OK |" in report_row(out, "good-train-r1")


def test_failed_runs_keep_the_step_records_logged_before_the_fault(faults_run):
    _, out = faults_run
    metrics = out / "runs" / "nan_loss-train-r1" / "metrics.jsonl"
    recs = [json.loads(ln) for ln in metrics.read_text().splitlines()]
    assert [r["step"] for r in recs] == [1, 2, 3]


def test_parity_of_a_failed_run_is_not_a_match(faults_run):
    _, out = faults_run
    comp = next(
        c for c in read_summary(out / "summary.json").comparisons if c.variant.name == "exit3"
    )
    assert comp.parity.status == "N/A"


def _files(out: Path, hydra_record: bool) -> dict[Path, int]:
    return {
        p: p.stat().st_mtime_ns
        for p in out.rglob("*")
        if p.is_file() and (hydra_record or (".hydra" not in p.parts and p.name != "cli.log"))
    }


def test_output_directory_is_never_reused(faults_run):
    _, out = faults_run
    before = _files(out, hydra_record=False)
    proc = afbench(out.parents[2], "experiment=faults", *LAUNCHER, f"hydra.run.dir={out}")
    assert proc.returncode == 2
    assert "already holds an experiment; an output directory is never reused" in proc.stderr
    assert _files(out, hydra_record=False) == before


def test_refused_output_directory_keeps_its_hydra_record(faults_run):
    # refused after composing, before Hydra's run_job rewrites .hydra/ and appends to cli.log
    _, out = faults_run
    before = _files(out, hydra_record=True)
    proc = afbench(out.parents[2], "experiment=faults", *LAUNCHER, f"hydra.run.dir={out}")
    assert proc.returncode == 2
    assert _files(out, hydra_record=True) == before


def test_run_directory_is_never_reused(faults_run):
    from afbench.launch.local import launch_run

    _, out = faults_run
    plan = json.loads((out / "plan.json").read_text())
    spec = RunSpec.model_validate(plan["runs"][0])
    before = (Path(spec.run_dir) / "status.json").read_text()
    with pytest.raises(FileExistsError):
        launch_run(spec)
    assert (Path(spec.run_dir) / "status.json").read_text() == before


# ---------------------------------------------------------------- hang: timeout


def test_hanging_run_times_out_and_leaves_no_orphans(tmp_path):
    # Only the hang: with launcher.timeout_s=5 a good run on a loaded machine could time out
    # too. The run dir (so tmp_path) is on the command lines of worker, command, grandchild.
    write_recipe(tmp_path, "hang", {"hang": command("hang.py", "{steps}", "{run_dir}")})
    t0 = time.monotonic()
    proc = afbench(tmp_path, "experiment=hang", "launcher.timeout_s=5", "launcher.kill_grace_s=1")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert time.monotonic() - t0 < 40
    out = output_dir(tmp_path)
    st = status(out, "hang-train-r1")
    assert st["status"] == "FAILED"
    assert st["reason"]["key"] == "run_timed_out" and st["reason"]["args"] == {"seconds": 5}
    assert st["reason"]["text"] == "timed out after 5 s (launcher.timeout_s); process group killed"
    assert 5 <= st["wall_s"] < 15
    assert "timed out after 5 s" in report_row(out, "hang-train-r1")
    assert (out / "summary.json").is_file()
    assert_no_orphans(str(tmp_path))


# ---------------------------------------------------------------- Ctrl-C


def test_ctrl_c_exits_130_kills_the_run_and_reports_the_rest_skipped(tmp_path):
    write_recipe(
        tmp_path,
        "interrupt",
        {"hang": command("hang.py", "{steps}", "{run_dir}"), "good": command("good.py", "{steps}")},
    )
    proc = afbench(
        tmp_path,
        "experiment=interrupt",
        "launcher.timeout_s=120",
        "launcher.kill_grace_s=1",
        popen=True,
    )
    try:
        deadline = time.monotonic() + 60
        logs = list(tmp_path.glob("outputs/*/*/runs/hang-train-r1/stdout.log"))
        while not (logs and "step:" in logs[0].read_text()):
            assert time.monotonic() < deadline and proc.poll() is None, proc.stdout.read()
            time.sleep(0.1)
            logs = list(tmp_path.glob("outputs/*/*/runs/hang-train-r1/stdout.log"))
        proc.send_signal(signal.SIGINT)
        stdout, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stdout
    out = output_dir(tmp_path)
    hang = status(out, "hang-train-r1")
    # stopped, not failed: SKIPPED with the reason, never RUN_FAILED's "FAILED"
    assert hang["status"] == "SKIPPED" and hang["reason"]["key"] == INTERRUPTED_REASON
    rest = status(out, "good-train-r1")
    assert rest["status"] == "SKIPPED" and rest["exit_code"] == 125
    assert rest["reason"]["text"].startswith("interrupted")
    assert (out / "runs" / "good-train-r1" / "stdout.log").read_text() == ""
    assert "| SKIPPED |" in report_row(out, "good-train-r1")
    assert "interrupted" in report_row(out, "hang-train-r1")
    # the comparison of an interrupted baseline is stopped too, not RUN_FAILED
    comp = read_summary(out / "summary.json").comparisons[0]
    assert comp.verdict == "SKIPPED" and comp.speed.stop_reason == "interrupted"
    # and the verdict line says why it stopped
    report = (out / "report.md").read_text()
    assert "**good vs hang  SKIPPED  stopped: interrupted**" in report
    assert "- Why: SKIPPED (stopped: interrupted)" in report
    assert_no_orphans(str(tmp_path))


def test_ctrl_c_through_a_pipe_to_tee_still_closes_with_130_and_the_closing_line(tmp_path):
    # Ctrl-C in a terminal reaches the whole pipeline: tee dies first, afbench's terminal
    # output then goes to a closed pipe. The run must still end as interrupted, 130, with its
    # report and closing line in cli.log.
    write_recipe(tmp_path, "interrupt", {"hang": command("hang.py", "{steps}", "{run_dir}")})
    argv = " ".join(
        [
            sys.executable,
            "-m",
            "afbench",
            "experiment=interrupt",
            "launcher.timeout_s=120",
            "launcher.kill_grace_s=1",
        ]
    )
    script = f"({argv}; echo $? > rc.txt) 2>&1 | tee terminal.txt"
    env = {**os.environ, "AFBENCH_RECIPE_PATH": str(tmp_path / "recipes")}
    proc = subprocess.Popen(
        ["bash", "-c", script],
        cwd=tmp_path,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not any(
            "step:" in p.read_text()
            for p in tmp_path.glob("outputs/*/*/runs/hang-train-r1/stdout.log")
        ):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGINT)  # what the terminal's Ctrl-C does
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert (tmp_path / "rc.txt").read_text().strip() == "130"
    out = output_dir(tmp_path)
    assert "afbench: interrupted; partial results are in" in (out / "cli.log").read_text()
    assert (out / "report.md").is_file()
    assert status(out, "hang-train-r1")["reason"]["key"] == INTERRUPTED_REASON
    assert_no_orphans(str(tmp_path))


# ---------------------------------------------------------------- the verdict window


def test_verdict_uses_the_engines_step_pattern(tmp_path):
    pattern = r"^iter (?P<step>\d+) \| time=(?P<value>[\d.]+)"
    write_recipe(
        tmp_path, "custom", {"base": command("custom_format.py", "{steps}", step_pattern=pattern)}
    )
    proc = afbench(tmp_path, "experiment=custom", *LAUNCHER)
    out = output_dir(tmp_path)
    run = json.loads((out / "summary.json").read_text())["runs"][0]
    assert run["status"] == "OK" and run["log_error"] == ""
    assert run["mean_step_s"] == pytest.approx(GOOD_MEAN_S)
    assert proc.returncode == 0


def test_a_run_whose_log_breaks_the_strict_rules_is_failed_with_the_reason(tmp_path):
    recipes = write_recipe(
        tmp_path, "twice", {"good": command("good.py", "6"), "twice": command("twice.py")}
    )
    proc = afbench(tmp_path, "experiment=twice", *LAUNCHER)
    assert proc.returncode == 1, proc.stderr[-2000:]
    out = output_dir(tmp_path)
    st = status(out, "twice-train-r1")
    # the worker exited 0, but the measured window has no number: FAILED, with why
    assert st["status"] == "FAILED" and st["exit_code"] == 0
    assert st["reason"]["text"].startswith("invalid step log:")
    assert "several ranks" in st["reason"]["text"]
    assert "twice-train-r1" in proc.stderr and "FAILED" in proc.stderr
    assert "invalid step log" in proc.stderr
    assert status(out, "good-train-r1")["status"] == "OK"
    assert read_summary(out / "summary.json").comparisons[0].verdict == "RUN_FAILED"
    assert recipes.is_dir()
