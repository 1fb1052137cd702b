"""afbench's own reading of a finished run's log is bounded (issue 33 item 2): by
``launcher.collect_timeout_s``, and by a second Ctrl-C while afbench stops, which leaves the
logs not read yet unread instead of being ignored. Real signals and a real 200 MiB log written
by the run's process (tests/fault_workers/big_log.py: 1 MiB lines under the line cap, so every
byte is read). Nothing here depends on how fast the machine is: the budget is a millisecond
against a 200 MiB log, and the second Ctrl-C lands while afbench waits ``kill_grace_s`` for a
run that ignores SIGTERM, before any log is read."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from afbench.analysis.errors import LogNotRead
from afbench.analysis.reading import ReadBudget, reads_resumed_after, stop_reading
from afbench.analysis.steplog import read_step_times
from afbench.runspec import INTERRUPTED_REASON
from test_faults import assert_no_orphans, command, output_dir, report_row, status, write_recipe
from test_reliability import afbench, wait_for_step

BIG_MIB = 200


def summary_run(out, run_id: str) -> dict:
    runs = json.loads((out / "summary.json").read_text())["runs"]
    return next(r for r in runs if r["run_id"] == run_id)


def test_a_log_read_past_the_budget_or_after_a_stop_raises_naming_the_file(tmp_path):
    log = tmp_path / "stdout.log"
    log.write_text(
        "".join(f"step: {n}  loss: 1.0  elapsed_time_per_step: 0.01s\n" for n in (1, 2, 3))
    )
    with ReadBudget(0.0), pytest.raises(LogNotRead, match=f"{log}: not read within 0 s"):
        read_step_times(log, 1, 3)
    with reads_resumed_after():
        stop_reading("afbench was stopping and got a second SIGINT")
        with pytest.raises(LogNotRead, match="not read: afbench was stopping .*re-render"):
            read_step_times(log, 1, 3)
    # outside both, the same log reads in full
    assert read_step_times(log, 1, 3) == {1: 0.01, 2: 0.01, 3: 0.01}


def test_a_run_whose_log_outlasts_collect_timeout_s_is_failed_naming_the_log(tmp_path):
    write_recipe(tmp_path, "big", {"big": command("big_log.py", "{steps}", str(BIG_MIB))})
    done = afbench(
        tmp_path,
        "experiment=big",
        "launcher.timeout_s=300",
        "launcher.collect_timeout_s=0.001",
        timeout=600,
    )
    out = output_dir(tmp_path)
    log = out / "runs" / "big-train-r1" / "stdout.log"
    assert log.stat().st_size > BIG_MIB << 20
    st = status(out, "big-train-r1")
    assert st["status"] == "FAILED" and st["exit_code"] == 0, st
    reason = st["reason"]["text"]  # afbench's own words, kept as written (they name a file)
    assert reason.startswith(f"{log}: not read within 0.001 s (launcher.collect_timeout_s")
    assert "raise launcher.collect_timeout_s or make the run print less" in reason
    assert done.returncode == 1, done.stdout + done.stderr
    assert "not read within 0.001 s" in report_row(out, "big-train-r1")


def test_a_second_ctrl_c_leaves_a_large_log_unread_and_the_report_is_written(tmp_path):
    write_recipe(
        tmp_path,
        "bigstop",
        {
            "big": command("big_log.py", "{steps}", str(BIG_MIB)),
            "stubborn": command("stubborn.py", "{steps}", "{run_dir}"),
            "good": command("good.py", "{steps}"),
        },
    )
    proc = afbench(
        tmp_path,
        "experiment=bigstop",
        "launcher.timeout_s=300",
        "launcher.kill_grace_s=20",
        popen=True,
    )
    try:
        out = wait_for_step(tmp_path, "stubborn-train-r1", proc)  # the big run is recorded
        proc.send_signal(signal.SIGINT)
        time.sleep(1.0)  # inside the 20 s the stop waits for the run that ignores SIGTERM
        proc.send_signal(signal.SIGINT)
        text, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, text
    assert "already stopping (SIGINT): logs not read yet are left unread" in text
    assert status(out, "big-train-r1")["status"] == "OK"
    assert status(out, "stubborn-train-r1")["reason"]["key"] == INTERRUPTED_REASON
    assert status(out, "good-train-r1")["status"] == "SKIPPED"
    big = summary_run(out, "big-train-r1")
    log = out / "runs" / "big-train-r1" / "stdout.log"
    assert big["log_error"].startswith(f"{log}: not read: afbench was stopping and got a second")
    assert (out / "report.md").is_file()
    assert_no_orphans(str(tmp_path))
    # nothing was lost: a re-render reads the log in full
    subprocess.run([sys.executable, "-m", "afbench.report", str(out)], check=True, timeout=600)
    big = summary_run(out, "big-train-r1")
    assert big["log_error"] in ("", None) and big["mean_step_s"] == pytest.approx(0.0175)


def test_a_trace_read_after_a_stop_is_left_unread_naming_it(tmp_path):
    from afbench.analysis.op_table import UNREADABLE, load_op_table

    trace = tmp_path / "prof" / "trace_view.json"
    trace.parent.mkdir()
    trace.write_text(
        json.dumps(
            [
                {"ph": "M", "name": "process_name", "pid": 7, "args": {"name": "Ascend Hardware"}},
                {"ph": "X", "name": "MatMul", "pid": 7, "tid": 2, "ts": "110.25", "dur": 5.5},
            ]
        )
    )
    assert load_op_table(trace.parent).table is not None
    with reads_resumed_after():
        stop_reading("afbench was stopping and got a second SIGINT")
        found = load_op_table(trace.parent)
    assert found.table is None and found.problem == UNREADABLE
    assert found.detail.startswith(f"{trace}: not read: afbench was stopping")
