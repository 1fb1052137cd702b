"""Sweeps through Hydra's submitit launcher (``pip install -e ".[cluster]"``):
``hydra/launcher=submitit_local`` runs each job in its own process, concurrently, from a
pickled task function, the way ``submitit_slurm`` runs them on cluster nodes. The runs use the
command engine with tiny workers, so the whole sweep takes seconds of CPU."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from afbench.store import load_sweep_summary

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is None,
    reason="hydra-submitit-launcher is not installed (pip install -e '.[cluster]')",
)

WORKERS = Path(__file__).parent / "fault_workers"
# A tiny train command that notes when it ran (wall clock), to see whether runs overlapped.
INTERVAL_WORKER = """
import json, sys, time
run_dir, steps = sys.argv[1], int(sys.argv[2])
start = time.time()
for step in range(1, steps + 1):
    time.sleep(0.1)
    print(f"step: {step}  loss: {2.0 / step:.5f}  elapsed_time_per_step: 0.1s", flush=True)
with open(run_dir + "/interval.json", "w") as fh:
    json.dump({"start": start, "end": time.time()}, fh)
"""
SWEEP = [
    "-m",
    "hydra/launcher=submitit_local",
    "backend=cpu",
    "engine=command",
    f"engine.executable={sys.executable}",
    "scheduler.steps=6",
    "scheduler.measure.first_step=3",
    "scheduler.measure.last_step=6",
    "launcher.timeout_s=120",
    "launcher.kill_grace_s=1",
    "experiment.rerun_contended=0",
]


def afbench(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "AFBENCH_LOCK_DIR": str(cwd / "locks")}
    env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.run(
        [sys.executable, "-m", "afbench", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def sweep_dir(cwd: Path) -> Path:
    dirs = list((cwd / "multirun").glob("*/*"))
    assert len(dirs) == 1, dirs
    return dirs[0]


@pytest.fixture(scope="module")
def autofuse_sweep(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("submitit")
    worker = cwd / "interval_worker.py"
    worker.write_text(INTERVAL_WORKER)
    proc = afbench(
        cwd,
        *SWEEP,
        f"engine.args=[{worker},'{{run_dir}}','{{steps}}']",
        "optimization.autofuse=false,true",
    )
    return proc, sweep_dir(cwd)


def test_submitit_sweep_runs_every_job_in_its_own_folder(autofuse_sweep):
    proc, sweep = autofuse_sweep
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # job 1 runs the baseline combination beside its own (experiment.sweep_pairing=beside)
    for job, run in (
        ("0", "baseline-run-r1"),
        ("1", "sweep_baseline-run-r1"),
        ("1", "combination-run-r1"),
    ):
        status = json.loads((sweep / job / "runs" / run / "status.json").read_text())
        assert status["status"] == "OK", status
        assert (sweep / job / "report.md").is_file() and (sweep / job / "summary.json").is_file()
    # the jobs ran in submitit's processes, not in the launcher's
    assert len(list((sweep / ".submitit").glob("*/*_result.pkl"))) == 2


def test_submitit_sweep_report_is_complete(autofuse_sweep):
    _, sweep = autofuse_sweep
    summary = json.loads((sweep / "sweep_summary.json").read_text())
    assert summary["jobs"] == 2 and summary["swept_keys"] == ["optimization.autofuse"]
    assert summary["baseline"] == "optimization.autofuse=False" and summary["failed"] == []
    rows = load_sweep_summary(summary).combinations
    verdicts = {c.name: c.verdict for c in rows}
    assert verdicts["optimization.autofuse=False"] == "BASELINE"
    # equal planted times, one round each: the step-level interval holds 0
    assert verdicts["optimization.autofuse=True"] in ("NO_GAIN", "INCONCLUSIVE")
    assert all(c.mean_step_s == pytest.approx(0.1) for c in rows)
    report = (sweep / "sweep_report.md").read_text()
    for name in verdicts:
        assert f"`{name}`" in report
    assert (sweep / "sweep_report.html").is_file()


def test_concurrent_submitit_jobs_never_time_runs_on_the_cpu_at_once(autofuse_sweep):
    _, sweep = autofuse_sweep
    runs = sorted(
        (json.loads(p.read_text()) for p in sweep.glob("*/runs/*/interval.json")),
        key=lambda iv: iv["start"],
    )
    assert len(runs) == 3  # job 0's run; job 1's baseline run beside its own
    for a, b in zip(runs, runs[1:]):
        assert a["end"] <= b["start"], "two runs were timed on the cpu at the same time"


@pytest.fixture(scope="module")
def failing_sweep(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("submitit_fail")
    proc = afbench(
        cwd,
        *SWEEP,
        f"engine.args=[{WORKERS / 'good.py'},'{{steps}}']",
        f"engine.args.0={WORKERS / 'good.py'},{WORKERS / 'crash.py'}",
    )
    return proc, sweep_dir(cwd)


def test_a_failed_submitit_job_is_reported_and_the_others_kept(failing_sweep):
    _, sweep = failing_sweep
    summary = json.loads((sweep / "sweep_summary.json").read_text())
    verdicts = {
        c.name.rsplit("/", 1)[-1]: c.verdict for c in load_sweep_summary(summary).combinations
    }
    assert verdicts == {"good.py": "BASELINE", "crash.py": "RUN_FAILED"}
    assert len(summary["failed"]) == 1


def test_a_failed_submitit_job_makes_the_sweep_exit_1(failing_sweep):
    # the job failed in submitit's process; the launcher process learns it from the sweep
    # report (sweep_summary.json), as every launcher does
    proc, _ = failing_sweep
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "sweep job(s) had failures" in proc.stderr and "crash.py" in proc.stderr
