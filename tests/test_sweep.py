"""Sweeps and statistics, end to end: `python -m afbench -m ...` in a subprocess, every run a
command-engine run of tests/fault_workers/switch_timed.py, whose logged step time is planted
from the run's switches (0.1 s; x0.7 with optimization.autofuse, x1.2 with
optimization.add_rmsnorm; 2 % seeded noise). No model is loaded."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from afbench.runspec import INTERRUPTED_REASON
from afbench.store import SweepRow, load_sweep_summary, read_summary
from support.history import seed_calibration

WORKER = Path(__file__).parent / "fault_workers" / "switch_timed.py"
AF, RMS = "optimization.autofuse", "optimization.add_rmsnorm"
COMMAND = [
    "engine=command",
    f"engine.executable={sys.executable}",
    f"engine.args=['{WORKER}']",
    "scheduler.steps=12",
    "scheduler.measure.first_step=3",
    "scheduler.measure.last_step=12",
    "launcher.timeout_s=60",
    "launcher.kill_grace_s=1",
    # the worker's step times are planted, not wall times: a shared machine must not
    # set its runs aside or rerun them (tests/test_contention_runs.py tests that)
    "verdict.contention=keep",
    "experiment.rerun_contended=0",
]
GRID = [f"{AF}=false,true", f"{RMS}=false,true"]
# one run per combination for the tests of failures, resume and interrupts: the baseline job's
# runs are the only baseline runs (tests/test_sweep_pairing.py tests the default, beside)
SEPARATE = "experiment.sweep_pairing=separate"


def combo(af: bool, rms: bool) -> str:
    """A combination's name in the sweep report (Hydra writes swept booleans back as True/False)."""
    return f"{AF}={af},{RMS}={rms}"


def afbench(cwd: Path, *args: str, env: dict[str, str] | None = None, popen: bool = False):
    # Own device-lock folder: the planted step times need no exclusive machine, and runs of
    # other afbench processes on this machine must not hold these up.
    (cwd / "locks").mkdir(exist_ok=True)
    full_env = {
        **os.environ,
        "AFBENCH_RECIPE_PATH": str(cwd / "recipes"),
        "AFBENCH_LOCK_DIR": str(cwd / "locks"),
        **(env or {}),
    }
    full_env.pop("HYDRA_FULL_ERROR", None)
    argv = [sys.executable, "-m", "afbench", *args]
    if popen:
        return subprocess.Popen(
            argv, cwd=cwd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    return subprocess.run(argv, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=180)


def only(paths: list[Path]) -> Path:
    assert len(paths) == 1, paths
    return paths[0]


def sweep_dir(cwd: Path) -> Path:
    return only([p.parent for p in cwd.glob("multirun/*/*/multirun.yaml")])


def summary(sweep: Path) -> dict:
    return json.loads((sweep / "sweep_summary.json").read_text())


def by_name(sweep: Path) -> dict[str, SweepRow]:
    """The sweep's rows by name, read through the store (its verdict is the row's ``speed``)."""
    rows = load_sweep_summary(summary(sweep)).combinations
    return {c.name: c for c in rows}


def job_of(sweep: Path, name: str) -> Path:
    return sweep / by_name(sweep)[name].job


def run_status(job: Path, run_id: str = "baseline-run-r1") -> dict:
    return json.loads((job / "runs" / run_id / "status.json").read_text())


def counted(path: Path) -> list[str]:
    """The worker's invocations, one "<variant>-r<repeat> <switches>" line each."""
    return sorted(path.read_text().splitlines()) if path.exists() else []


def file_stamps(root: Path) -> dict[Path, tuple[int, int]]:
    return {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in root.rglob("*") if p.is_file()}


def live_under(marker: Path) -> list[str]:
    """Live processes whose command line or working directory lies under ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or entry.name == str(os.getpid()):
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(entry / "cwd")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z" and (str(marker) in cmd or cwd.startswith(str(marker))):
            found.append(f"{entry.name}: {cmd}")
    return found


def wait_for_step(log_glob: str, cwd: Path, proc: subprocess.Popen, timeout: float = 60) -> None:
    """Block until a run log matching ``log_glob`` under ``cwd`` holds a step line."""
    deadline = time.monotonic() + timeout
    while True:
        logs = list(cwd.glob(log_glob))
        if logs and "step:" in logs[0].read_text():
            return
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline, f"no step line in {log_glob}"
        time.sleep(0.05)


# ---------------------------------------------------------------- 2x2 sweep, 3 repeats


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("grid")
    proc = afbench(cwd, "-m", *COMMAND, *GRID, "verdict.rounds=3")
    return proc, sweep_dir(cwd)


def test_sweep_exits_0_and_writes_the_sweep_report(grid):
    proc, sweep = grid
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert {"sweep_report.md", "sweep_report.html", "sweep_summary.json"} <= {
        p.name for p in sweep.iterdir()
    }
    s = summary(sweep)
    assert s["jobs"] == 4 and s["swept_keys"] == [AF, RMS] and s["failed"] == []
    assert all(len(c.side.repeats_s) == 3 and c.ok for c in by_name(sweep).values())


def test_combinations_are_ranked_by_their_gain_largest_first(grid):
    _, sweep = grid
    ranked = list(by_name(sweep).values())
    assert [c.name for c in ranked] == [
        combo(True, False),
        combo(True, True),
        combo(False, False),
        combo(False, True),
    ]
    gains = [c.gain_pct for c in ranked]
    assert gains == sorted(gains, reverse=True) and gains[2] == 0.0  # the baseline: 0
    # planted effects far above the noise: the step times fall in the same order
    means = [c.mean_step_s for c in ranked]
    assert means == sorted(means)
    assert means[2] == pytest.approx(0.1, rel=0.05)
    # the same order, with the same rank numbers, in both rendered reports
    md = (sweep / "sweep_report.md").read_text()
    html = (sweep / "sweep_report.html").read_text()
    for rank, c in enumerate(ranked, 1):
        assert f"| {rank} | `{c.name}` |" in md
        assert re.search(
            rf'<tr class="[^"]*" id="job-{c.job}"><td>{rank}</td>'
            rf'<td class="text"><code>{re.escape(c.name)}</code></td>',
            html,
        )


def test_baseline_is_the_all_off_combination(grid):
    _, sweep = grid
    assert summary(sweep)["baseline"] == combo(False, False)
    base = by_name(sweep)[combo(False, False)]
    assert base.verdict == "BASELINE" and base.gain_pct == 0.0 and base.speed is None


def test_planted_slowdown_is_slower_with_an_interval_below_zero(grid):
    _, sweep = grid
    slow = by_name(sweep)[combo(False, True)]
    assert slow.verdict == "SLOWER"
    assert slow.ci_low < slow.gain_pct < slow.ci_high < 0
    assert slow.gain_pct == pytest.approx(-20, abs=3)
    assert slow.n_pairs == 3 and slow.speed.design == "fixed"


def test_planted_speedup_is_faster_with_an_interval_above_zero(grid):
    _, sweep = grid
    c = by_name(sweep)
    fast, both = c[combo(True, False)], c[combo(True, True)]
    assert fast.verdict == "FASTER" and 0 < fast.ci_low < fast.gain_pct < fast.ci_high
    assert fast.gain_pct == pytest.approx(30, abs=3)
    assert both.verdict == "FASTER" and both.ci_low > 0  # 0.7 x 1.2 = 0.84
    assert both.gain_pct == pytest.approx(16, abs=3)


def test_main_effects_name_both_keys_with_the_planted_sizes(grid):
    _, sweep = grid
    s = load_sweep_summary(summary(sweep))
    effects = {(e.key, e.reference, e.value): e for e in s.main_effects}
    assert set(effects) == {(AF, "False", "True"), (RMS, "False", "True")}
    af, rms = effects[(AF, "False", "True")], effects[(RMS, "False", "True")]
    assert af.effect_pct == pytest.approx(30, abs=3) and af.cells == 2  # x0.7
    assert rms.effect_pct == pytest.approx(-20, abs=3) and rms.cells == 2  # x1.2
    # paired contrasts, Holm over the two: both called, each at the level Holm tested it at
    assert (af.decision, rms.decision) == ("FASTER", "SLOWER") and af.family == 2
    assert 0 < af.ci_low < af.effect_pct < af.ci_high and rms.ci_high < 0
    assert sorted([af.level, rms.level]) == pytest.approx([0.95, 0.975])
    assert af.p_holm <= 0.05 and rms.p_holm <= 0.05
    # each rests on the three combinations' pairs beside their own baseline runs
    rows = by_name(sweep)
    assert {p.combination for p in af.pairs} == {
        combo(True, False),
        combo(True, True),
        combo(False, True),
    }
    assert all(p.beside and p.n_pairs == 3 and p.job == rows[p.combination].job for p in af.pairs)
    md = (sweep / "sweep_report.md").read_text()
    assert f"| `{AF}` | False | True | {af.effect_pct:+.2f}% | [{af.ci_low:+.2f}%, " in md
    assert "9 rounds in jobs" in md


def test_each_row_is_its_jobs_own_comparison_as_its_report_made_it(grid):
    """A row stores its job's summary.json comparison as it is: the verdict, gain, interval
    and level (the job decided at the sweep's per-comparison level) and the side's numbers,
    memory included; the job's report prints the same interval."""
    _, sweep = grid
    s = load_sweep_summary(summary(sweep))
    assert s.level == pytest.approx(1 - 0.05 / 3)
    for row in s.combinations:
        job = read_summary(sweep / row.job / "summary.json")
        if row.verdict == "BASELINE":
            assert not job.comparisons and row.speed is None
            continue
        comp = only(job.comparisons)
        assert row.from_job and row.beside_baseline
        assert row.speed == comp.speed and row.side == comp.variant
        assert comp.verdict.endswith(row.verdict) and comp.speed.level == pytest.approx(s.level)
        assert row.memory == comp.variant.memory and row.mean_step_s == comp.variant.mean_step_s
        report = (sweep / row.job / "report.md").read_text()
        assert f"[{row.ci_low:+.2f}%, {row.ci_high:+.2f}%]" in report


def test_sweep_summary_is_strict_json(grid):
    _, sweep = grid

    def no_constants(name):
        raise AssertionError(f"{name} in sweep_summary.json")

    json.loads((sweep / "sweep_summary.json").read_text(), parse_constant=no_constants)


def test_offline_rerender_of_a_sweep_reproduces_its_summary(grid, tmp_path):
    _, original = grid
    sweep = shutil.copytree(original, tmp_path / "sweep")
    before = summary(sweep)
    (sweep / "sweep_summary.json").unlink()
    (sweep / "sweep_report.md").unlink()
    proc = subprocess.run(
        [sys.executable, "-m", "afbench.report", str(sweep)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    after = summary(sweep)
    assert after.pop("sweep_dir") == str(sweep) and before.pop("sweep_dir") == str(original)
    after.pop("generated_at"), before.pop("generated_at")
    assert after == before

    def without_time(text: str) -> list[str]:
        return [line for line in text.splitlines() if not line.startswith("Generated")]

    assert without_time((sweep / "sweep_report.md").read_text()) == without_time(
        (original / "sweep_report.md").read_text().replace(str(original), str(sweep))
    )


# ---------------------------------------------------------------- a failing job, then resume


@pytest.fixture(scope="module")
def failed_then_resumed(tmp_path_factory):
    """Sweep 1: the worker fails for autofuse=false, add_rmsnorm=true (job 1 of 4). Sweep 2:
    the same sweep with resume=<sweep 1> and another baseline (lowercase, as a user types it)."""
    first_cwd, second_cwd = tmp_path_factory.mktemp("failing"), tmp_path_factory.mktemp("resumed")
    counter1, counter2 = first_cwd / "invocations", second_cwd / "invocations"
    # one round per combination: a calibrated host decides them (2% planted noise)
    history = {"AFBENCH_HISTORY_URL": f"sqlite:///{first_cwd / 'history.sqlite'}"}
    for af, rms in ((False, False), (False, True), (True, False), (True, True)):
        # every kind of run calibrated: a switch's runs are a kind of their own
        seed_calibration(
            history["AFBENCH_HISTORY_URL"],
            *COMMAND,
            f"{AF}={str(af).lower()}",
            f"{RMS}={str(rms).lower()}",
            tmp=first_cwd,
        )
    first = afbench(
        first_cwd,
        "-m",
        *COMMAND,
        *GRID,
        SEPARATE,
        env={
            "SWITCH_TIMED_FAIL": "autofuse=false,add_rmsnorm=true",
            "SWITCH_TIMED_COUNTER": str(counter1),
            **history,
        },
    )
    old = sweep_dir(first_cwd)
    stamps = file_stamps(old)
    second = afbench(
        second_cwd,
        "-m",
        *COMMAND,
        *GRID,
        SEPARATE,
        f"resume={old}",
        f"report.sweep_baseline='{AF}=true,{RMS}=false'",
        env={"SWITCH_TIMED_COUNTER": str(counter2), **history},
    )
    return {
        "first": first,
        "old": old,
        "counter1": counter1,
        "stamps": stamps,
        "second": second,
        "new": sweep_dir(second_cwd),
        "counter2": counter2,
    }


def test_a_failing_job_does_not_end_the_sweep(failed_then_resumed):
    r = failed_then_resumed
    assert r["first"].returncode == 1, r["first"].stdout + r["first"].stderr
    assert "1 sweep job(s) had failures" in r["first"].stderr
    # every combination ran, the ones after the failing job included
    assert counted(r["counter1"]) == [
        "baseline-r1 autofuse=false,add_rmsnorm=false",
        "baseline-r1 autofuse=false,add_rmsnorm=true",
        "baseline-r1 autofuse=true,add_rmsnorm=false",
        "baseline-r1 autofuse=true,add_rmsnorm=true",
    ]
    assert [run_status(r["old"] / j)["status"] for j in "0123"] == ["OK", "FAILED", "OK", "OK"]


def test_the_sweep_report_marks_the_failed_combination_run_failed(failed_then_resumed):
    old = failed_then_resumed["old"]
    s = summary(old)
    assert s["failed"] == [combo(False, True)]
    bad = by_name(old)[combo(False, True)]
    assert bad.verdict == "RUN_FAILED" and bad.gain_pct is None
    assert any("command exited with status 4" in r for r in bad.reasons), bad.reasons
    assert s["combinations"][-1]["name"] == combo(False, True)  # no result: ranked last
    assert {n: c.verdict for n, c in by_name(old).items()} == {
        combo(False, False): "BASELINE",
        combo(True, False): "FASTER",
        combo(True, True): "FASTER",
        combo(False, True): "RUN_FAILED",
    }
    md = (old / "sweep_report.md").read_text()
    row = only([ln for ln in md.splitlines() if f"`{combo(False, True)}`" in ln])
    assert "RUN_FAILED" in row and "command exited with status 4" in row


def test_resume_copies_finished_runs_and_runs_only_the_failed_one(failed_then_resumed):
    r = failed_then_resumed
    assert r["second"].returncode == 0, r["second"].stdout + r["second"].stderr
    assert counted(r["counter2"]) == ["baseline-r1 autofuse=false,add_rmsnorm=true"]
    for af, rms in ((False, False), (True, False), (True, True)):
        old_job, new_job = job_of(r["old"], combo(af, rms)), job_of(r["new"], combo(af, rms))
        st = run_status(new_job)
        assert st["status"] == "OK"
        assert st["reason"]["key"] == "run_resumed"
        assert st["reason"]["text"] == f"resumed from {old_job / 'runs' / 'baseline-run-r1'}"
        assert (new_job / "runs/baseline-run-r1/stdout.log").read_text() == (
            old_job / "runs/baseline-run-r1/stdout.log"
        ).read_text()
    rerun = run_status(job_of(r["new"], combo(False, True)))
    assert rerun["status"] == "OK" and rerun["reason"] is None


def test_resume_leaves_the_old_directory_unchanged(failed_then_resumed):
    r = failed_then_resumed
    assert file_stamps(r["old"]) == r["stamps"]


def test_resumed_sweep_report_is_complete(failed_then_resumed):
    new = failed_then_resumed["new"]
    s = summary(new)
    assert s["failed"] == [] and len(s["combinations"]) == 4
    assert all(c.ok and c.mean_step_s for c in by_name(new).values())
    for job in "0123":
        job_summary = json.loads((new / job / "summary.json").read_text())
        assert [run["status"] for run in job_summary["runs"]] == ["OK"]


def test_sweep_baseline_picks_another_baseline(failed_then_resumed):
    new = failed_then_resumed["new"]
    s = summary(new)
    assert s["baseline"] == combo(True, False)
    verdicts = {n: c.verdict for n, c in by_name(new).items()}
    assert verdicts == {
        combo(True, False): "BASELINE",
        combo(True, True): "SLOWER",
        combo(False, False): "SLOWER",
        combo(False, True): "SLOWER",
    }
    # one round each, decided with the host calibration: all slower than the fastest
    assert all(
        c.gain_pct < -10 and c.speed.spread_source == "calibration"
        for c in by_name(new).values()
        if c.verdict == "SLOWER"
    )


def test_offline_rerender_keeps_the_sweeps_own_baseline(failed_then_resumed, tmp_path):
    new = failed_then_resumed["new"]
    sweep = shutil.copytree(new, tmp_path / "sweep")
    (sweep / "sweep_summary.json").unlink()
    from afbench.report.__main__ import main as report_main

    assert report_main([str(sweep)]) == 0
    after, before = summary(sweep), summary(new)
    for key in ("sweep_dir", "generated_at"):
        after.pop(key), before.pop(key)
    assert after == before and after["baseline"] == combo(True, False)


def test_resume_index_leaves_out_a_run_whose_log_is_invalid(failed_then_resumed, tmp_path):
    from afbench.store.resume import resume_index

    old = shutil.copytree(failed_then_resumed["old"], tmp_path / "old")
    ok_hashes = {run_status(old / j)["config_hash"] for j in "023"}
    assert set(resume_index(old)) == ok_hashes  # the FAILED run is not resumable
    log = old / "0" / "runs" / "baseline-run-r1" / "stdout.log"
    log.write_text("\n".join(ln for ln in log.read_text().splitlines() if "step:  4" not in ln))
    assert set(resume_index(old)) == ok_hashes - {run_status(old / "0")["config_hash"]}


def test_resume_from_a_missing_directory_is_a_config_error(tmp_path):
    from afbench.errors import ConfigError
    from afbench.store.resume import resume_index

    with pytest.raises(ConfigError, match="^resume: "):
        resume_index(tmp_path / "nowhere")


# ---------------------------------------------------------------- interrupt, then resume


@pytest.fixture(scope="module")
def interrupted_then_resumed(tmp_path_factory):
    """A 2-job sweep with slow steps, SIGINT while job 1's run is logging; then resume."""
    first_cwd, second_cwd = tmp_path_factory.mktemp("interrupted"), tmp_path_factory.mktemp("re")
    counter1, counter2 = first_cwd / "invocations", second_cwd / "invocations"
    args = ["-m", *COMMAND, f"{AF}=false,true", SEPARATE]
    # one round per combination: a calibrated host decides them (2% planted noise)
    history = {"AFBENCH_HISTORY_URL": f"sqlite:///{first_cwd / 'history.sqlite'}"}
    for af in ("false", "true"):
        seed_calibration(history["AFBENCH_HISTORY_URL"], *COMMAND, f"{AF}={af}", tmp=first_cwd)
    proc = afbench(
        first_cwd,
        *args,
        popen=True,
        env={"SWITCH_TIMED_SLEEP_S": "0.15", "SWITCH_TIMED_COUNTER": str(counter1), **history},
    )
    try:
        wait_for_step("multirun/*/*/1/runs/baseline-run-r1/stdout.log", first_cwd, proc)
        proc.send_signal(signal.SIGINT)
        t0 = time.monotonic()
        output, _ = proc.communicate(timeout=60)
        exit_s = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    orphans = live_under(first_cwd)
    old = sweep_dir(first_cwd)
    stamps = file_stamps(old)
    second = afbench(
        second_cwd, *args, f"resume={old}", env={"SWITCH_TIMED_COUNTER": str(counter2), **history}
    )
    return {
        "first": proc,
        "output": output,
        "exit_s": exit_s,
        "orphans": orphans,
        "old": old,
        "counter1": counter1,
        "stamps": stamps,
        "second": second,
        "new": sweep_dir(second_cwd),
        "counter2": counter2,
    }


def test_interrupted_sweep_stops_promptly_and_keeps_finished_runs(interrupted_then_resumed):
    r = interrupted_then_resumed
    assert r["first"].returncode != 0, r["output"]
    assert r["exit_s"] < 20, r["output"]
    assert r["orphans"] == []
    assert run_status(r["old"] / "0")["status"] == "OK"
    st = run_status(r["old"] / "1")
    assert (
        st["status"] == "SKIPPED" and st["reason"]["key"] == INTERRUPTED_REASON
    )  # stopped, not failed
    # the partial sweep report covers what ran: job 0 OK, job 1 interrupted
    verdicts = sorted(c.verdict for c in by_name(r["old"]).values())
    assert verdicts == ["BASELINE", "SKIPPED"]  # interrupted: stopped, not RUN_FAILED


def test_interrupted_sweep_exits_130_without_a_traceback(interrupted_then_resumed):
    r = interrupted_then_resumed
    assert r["first"].returncode == 130
    assert "Traceback" not in r["output"] and "interrupted" in r["output"]


def test_resume_after_an_interrupt_runs_only_what_did_not_finish(interrupted_then_resumed):
    r = interrupted_then_resumed
    assert counted(r["counter1"]) == [
        "baseline-r1 autofuse=false,add_rmsnorm=false",
        "baseline-r1 autofuse=true,add_rmsnorm=false",
    ]
    assert r["second"].returncode == 0, r["second"].stdout + r["second"].stderr
    assert counted(r["counter2"]) == ["baseline-r1 autofuse=true,add_rmsnorm=false"]
    assert run_status(r["new"] / "0")["reason"]["text"].startswith(f"resumed from {r['old'] / '0'}")
    assert file_stamps(r["old"]) == r["stamps"]
    s = summary(r["new"])
    assert s["failed"] == [] and s["baseline"] == f"{AF}=False"
    assert by_name(r["new"])[f"{AF}=True"].verdict == "FASTER"


def test_sigterm_to_the_orchestrator_stops_the_worker_and_records_the_run(tmp_path):
    # 6 steps of 0.6 s: the worker outlives the 1.5 s wait below by far
    proc = afbench(tmp_path, *COMMAND, popen=True, env={"SWITCH_TIMED_SLEEP_S": "0.6"})
    try:
        wait_for_step("outputs/*/*/runs/baseline-run-r1/stdout.log", tmp_path, proc)
        proc.terminate()
        proc.communicate(timeout=30)
        deadline = time.monotonic() + 1.5
        while live_under(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.1)
        orphans = live_under(tmp_path)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for line in live_under(tmp_path):  # this test's own worker processes
            try:
                os.kill(int(line.split(":")[0]), signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert orphans == []
    st = json.loads(
        only(list(tmp_path.glob("outputs/*/*/runs/baseline-run-r1/status.json"))).read_text()
    )
    assert st["status"] == "SKIPPED" and st["reason"]["key"] == INTERRUPTED_REASON


# ---------------------------------------------------------------- A/A, and a job that never starts


@pytest.fixture(scope="module")
def aa_sweep(tmp_path_factory):
    """A 2-job sweep of an A/A recipe (variants `a` and `a_again`, identical; 3 repeats): job 0
    runs it; job 1 asks its preflight for a million GiB free, so it stops before planning."""
    cwd = tmp_path_factory.mktemp("aa")
    (cwd / "recipes").mkdir()
    recipe = {
        "experiment": {
            "name": "aa",
            "baseline": "a",
            "variants": {"a": {}, "a_again": {}},
            "phases": {"train": {}},
        },
        "verdict": {"rounds": 3},
    }
    (cwd / "recipes" / "aa.yaml").write_text("# @package _global_\n" + yaml.safe_dump(recipe))
    proc = afbench(cwd, "-m", "experiment=aa", *COMMAND, "preflight.min_free_gib=0,1000000")
    return proc, sweep_dir(cwd)


def test_aa_identical_variants_give_no_gain_with_an_interval_around_zero(aa_sweep):
    _, sweep = aa_sweep
    comp = only(read_summary(sweep / "0" / "summary.json").comparisons)
    # a job's own comparison uses the paired statistics (afbench.compare.speed_of)
    assert comp.aa is True and comp.speed.design == "fixed" and comp.speed.n_pairs == 3
    assert len(comp.baseline.repeats_s) == len(comp.variant.repeats_s) == 3
    assert comp.baseline.repeats_s != comp.variant.repeats_s  # two samples, not one twice
    assert comp.verdict in ("NO_GAIN", "INCONCLUSIVE")
    assert comp.speed.ci_low < 0 < comp.speed.ci_high
    assert "**A/A**" in (sweep / "0" / "report.md").read_text()
    # the sweep report compares the same two variants the same way
    again = by_name(sweep)["preflight.min_free_gib=0 [a_again]"]
    # 3 pairs at the Bonferroni level: the interval holds 0 (too wide for NO_GAIN at 2%)
    assert again.verdict in ("NO_GAIN", "INCONCLUSIVE") and again.ci_low < 0 < again.ci_high
    assert summary(sweep)["baseline"] == "preflight.min_free_gib=0 [a]"


def test_a_job_stopped_by_its_preflight_is_run_failed_in_the_sweep_report(aa_sweep):
    proc, sweep = aa_sweep
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert (sweep / "1" / ".hydra").is_dir() and not (sweep / "1" / "plan.json").exists()
    s = summary(sweep)
    assert s["jobs"] == 2 and s["failed"] == ["preflight.min_free_gib=1000000"]
    bad = by_name(sweep)["preflight.min_free_gib=1000000"]
    assert bad.verdict == "RUN_FAILED" and "no plan.json" in bad.reasons[0]
    assert "[FAIL] free disk" in bad.reasons[0]  # the preflight's own line, from the job log
    assert s["combinations"][-1]["name"] == bad.name


def test_sft_aa_noise_recipe_plans_two_identical_builtin_variants(compose_cfg, tmp_path):
    from afbench.config import validate_config
    from afbench.plan import make_plan

    plan = make_plan(validate_config(compose_cfg("experiment=sft_aa_noise")), tmp_path)
    assert plan.variants == ["a", "a_again"] and plan.rounds == 3 and len(plan.runs) == 6
    assert [r.run_id for r in plan.runs[:2]] == ["a-train-r1", "a_again-train-r1"]
    a, a_again = plan.runs[0].config, plan.runs[1].config
    assert a == a_again and a.engine.name == "builtin"
    assert (a.scheduler.steps, a.scheduler.measure.first_step, a.scheduler.measure.last_step) == (
        6,
        4,
        6,
    )


def test_a_resumed_sweep_job_reuses_runs_of_its_own_job_only(tmp_path):
    # a sweep paired beside the baseline: every job's sweep_baseline runs share one config
    # hash, so job 2 must not reuse job 1's baseline run (it ran minutes away from job 2's)
    from afbench.store.resume import resume_root

    old = tmp_path / "multirun" / "sweep"
    (old / "1").mkdir(parents=True)
    (old / "multirun.yaml").write_text("hydra: {}\n")
    assert resume_root(old, 1) == old / "1"
    assert resume_root(old, 2) is None  # job 2 never started: nothing to reuse
    assert resume_root(old, None) == old  # a single experiment resuming a sweep: any run
    single = tmp_path / "outputs" / "one"
    single.mkdir(parents=True)
    assert resume_root(single, 3) == single  # not a sweep: as it was
