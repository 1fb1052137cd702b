"""Faults as a tester makes them: a real full file system (a small tmpfs), real signals
(Ctrl-C twice, kill -9 of afbench), two afbench processes on one output directory, a real
socket that never answers for PostgreSQL, a damaged SQLite file, hostile sizes (a log line
over the cap, a gzip bomb), and a machine kept busy by real CPU burners."""

from __future__ import annotations

import fcntl
import gzip
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from afbench.errors import DiskFull
from afbench.runspec import INTERRUPTED_REASON
from test_faults import (
    LAUNCHER,
    assert_no_orphans,
    command,
    live_processes,
    output_dir,
    status,
    write_recipe,
)


def afbench(cwd: Path, *args: str, popen: bool = False, timeout: float = 120, env=None):
    env = {**os.environ, "AFBENCH_RECIPE_PATH": str(cwd / "recipes"), **(env or {})}
    env.pop("HYDRA_FULL_ERROR", None)
    argv = [sys.executable, "-m", "afbench", *args]
    if popen:
        return subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def wait_for_step(cwd: Path, run_id: str, proc: subprocess.Popen) -> Path:
    """The output directory once ``run_id``'s log has its first step line."""
    deadline = time.monotonic() + 90
    while True:
        logs = list(cwd.glob(f"**/runs/{run_id}/stdout.log"))
        if logs and "step:" in logs[0].read_text():
            return logs[0].parents[2]
        assert time.monotonic() < deadline and proc.poll() is None, proc.stdout.read()
        time.sleep(0.1)


@pytest.fixture
def small_fs(tmp_path):
    """A 48 MiB tmpfs (the experiment's reserve takes 16 MiB of it)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mnt)], capture_output=True
    )
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


# ---------------------------------------------------------------- a full disk


def fill(path: Path) -> None:
    """Append zeros to ``path`` until its disk is full."""
    with open(path, "ab", buffering=0) as fh, pytest.raises(OSError):
        while True:
            fh.write(bytes(1 << 20))


def test_write_on_a_full_disk_names_the_disk_and_leaves_no_temp_file(small_fs):
    from afbench.io import release_reserve, reserve_space, reserve_used, write_json_atomic

    reserve = reserve_space(small_fs)
    fill(small_fs / "fill.bin")
    # the first write that finds no space frees the reserve and is written
    write_json_atomic(small_fs / "status.json", {"status": "OK"})
    assert json.loads((small_fs / "status.json").read_text()) == {"status": "OK"}
    line = reserve_used(reserve)
    assert (
        line.startswith(f"disk full: no space left for {small_fs / 'status.json'} on {small_fs} (")
        and "MiB free of 48.0 MiB" in line
    )
    release_reserve(reserve)
    fill(small_fs / "fill.bin")
    with pytest.raises(DiskFull, match=f"on {small_fs} "):
        write_json_atomic(small_fs / "summary.json", {"big": "x" * (1 << 20)})
    assert sorted(p.name for p in small_fs.iterdir()) == ["fill.bin", "status.json"]


def test_a_disk_that_fills_mid_experiment_keeps_every_finished_run_and_one_error_line(
    tmp_path, small_fs
):
    write_recipe(
        tmp_path,
        "full",
        {
            "good": command("good.py", "{steps}"),
            "fill": command("fill_disk.py", "{steps}", "{run_dir}"),
            "after": command("good.py", "{steps}"),
        },
    )
    out = small_fs / "out"
    proc = afbench(
        tmp_path,
        "experiment=full",
        *LAUNCHER,
        f"hydra.run.dir={out}",
        "preflight.min_free_gib=0",
        "experiment.order=interleaved",
    )
    text = proc.stdout + proc.stderr
    assert proc.returncode == 1, text
    assert "Traceback" not in text
    errors = [line for line in text.splitlines() if "error:" in line]
    assert len(errors) == 1, errors
    assert f"disk full: no space left for {out}" in errors[0]
    assert f"on {small_fs} (" in errors[0] and "MiB free of 48.0 MiB" in errors[0]
    assert "the experiment stopped (1 later run(s) recorded SKIPPED)" in errors[0]
    good = status(out, "good-train-r1")
    assert good["status"] == "OK"
    assert (out / "runs" / "good-train-r1" / "result.json").is_file()
    log = (out / "runs" / "good-train-r1" / "stdout.log").read_text().splitlines()
    assert sum(line.startswith("step:") for line in log) == 6
    assert status(out, "fill-train-r1")["status"] == "FAILED"
    after = status(out, "after-train-r1")
    assert after["status"] == "SKIPPED" and after["reason"]["text"].startswith("disk full: ")
    # the report, written with the space the reserve gave back; no temp file, no reserve
    assert (out / "summary.json").is_file() and (out / "report.md").is_file()
    assert list(small_fs.rglob("*.tmp")) == [] and list(small_fs.rglob(".afbench-reserve")) == []
    # space freed: a re-render rewrites the report, the skipped run's reason in it
    (out / "runs" / "fill-train-r1" / "fill.bin").unlink()
    again = subprocess.run(
        [sys.executable, "-m", "afbench.report", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0, again.stderr
    assert "disk full" in (out / "report.md").read_text()


# ---------------------------------------------------------------- one owner per directory


OWNER = """
import sys, time
from afbench.store.owner import claim
claim(sys.argv[1])
print("owned", flush=True)
time.sleep(120)
"""


def test_a_second_afbench_on_an_owned_directory_exits_2_naming_the_owner(tmp_path):
    write_recipe(tmp_path, "owned", {"good": command("good.py", "{steps}")})
    out = tmp_path / "out"
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(out)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert owner.stdout.readline().strip() == "owned"
        proc = afbench(tmp_path, "experiment=owned", *LAUNCHER, f"hydra.run.dir={out}")
    finally:
        owner.kill()
        owner.wait()
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert (
        f"afbench: error: {out} is in use by pid {owner.pid} on {socket.gethostname()} since "
    ) in proc.stderr
    assert sorted(p.name for p in out.iterdir()) == [".afbench.lock"]  # nothing written


def test_two_afbench_started_at_once_on_one_directory_never_mix_it(tmp_path):
    write_recipe(
        tmp_path,
        "race",
        {"good": command("good.py", "{steps}"), "other": command("good.py", "{steps}")},
    )
    out = tmp_path / "out"
    procs = [
        afbench(
            tmp_path,
            "experiment=race",
            f"launcher.timeout_s={60 + i}",
            "launcher.kill_grace_s=1",
            f"hydra.run.dir={out}",
            popen=True,
        )
        for i in range(2)
    ]
    outputs = [p.communicate(timeout=180)[0] for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 2], outputs
    loser = outputs[[p.returncode for p in procs].index(2)]
    assert "Traceback" not in loser
    assert "is in use by pid" in loser or "already holds an experiment" in loser, loser
    winner = [p.returncode for p in procs].index(0)
    # the files describe the run that ran: its config, its runs
    exp = json.loads((out / "experiment.json").read_text())
    assert exp["config"]["launcher"]["timeout_s"] == 60 + winner
    assert sorted(p.name for p in (out / "runs").iterdir()) == ["good-train-r1", "other-train-r1"]


# ---------------------------------------------------------------- signals


def test_kill_9_of_afbench_stops_its_worker_which_holds_the_device_lock_until_gone(tmp_path):
    # the command ignores SIGTERM: the worker's group ends only with SIGKILL, kill_grace_s
    # (3 s) after it noticed afbench was gone; a lock freed before that would be seen free
    # while the worker still lives
    locks = tmp_path / "locks"
    write_recipe(tmp_path, "orphan", {"stubborn": command("stubborn.py", "{steps}", "{run_dir}")})
    proc = afbench(
        tmp_path,
        "experiment=orphan",
        "launcher.timeout_s=600",
        "launcher.kill_grace_s=3",
        popen=True,
        env={"AFBENCH_LOCK_DIR": str(locks)},
    )
    try:
        wait_for_step(tmp_path, "stubborn-train-r1", proc)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        lock = os.open(locks / "afbench-cpu.lock", os.O_RDWR)
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    assert time.monotonic() < deadline, live_processes(str(tmp_path))
                    time.sleep(0.05)
            freed = time.monotonic()
            fcntl.flock(lock, fcntl.LOCK_UN)
        finally:
            os.close(lock)
        # the lock came free as the worker ended, not seconds before
        while any("afbench.worker" in cmd for cmd in live_processes(str(tmp_path))):
            assert time.monotonic() - freed < 1.0, live_processes(str(tmp_path))
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert_no_orphans(str(tmp_path))


def test_a_second_ctrl_c_during_the_stop_still_writes_the_status_and_the_report(tmp_path):
    write_recipe(
        tmp_path,
        "twice",
        {
            "stubborn": command("stubborn.py", "{steps}", "{run_dir}"),
            "good": command("good.py", "{steps}"),
        },
    )
    proc = afbench(
        tmp_path,
        "experiment=twice",
        "launcher.timeout_s=120",
        "launcher.kill_grace_s=4",
        popen=True,
    )
    try:
        out = wait_for_step(tmp_path, "stubborn-train-r1", proc)
        proc.send_signal(signal.SIGINT)
        time.sleep(1.0)  # the stop waits kill_grace_s for the run that ignores SIGTERM
        proc.send_signal(signal.SIGINT)
        text, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, text
    assert "already stopping (SIGINT): logs not read yet are left unread" in text
    assert status(out, "stubborn-train-r1")["reason"]["key"] == INTERRUPTED_REASON
    assert status(out, "good-train-r1")["status"] == "SKIPPED"
    assert (out / "report.md").is_file() and (out / "summary.json").is_file()
    assert_no_orphans(str(tmp_path))


# ---------------------------------------------------------------- hostile sizes


def test_a_log_line_over_the_cap_is_named_not_loaded(tmp_path):
    from afbench.analysis.steplog import iter_log, read_step_times

    log = tmp_path / "stdout.log"
    with open(log, "wb") as fh:
        fh.write(b"step:  1  loss: 2.0  elapsed_time_per_step: 0.010000s\n")
        fh.write(b"x" * (9 << 20) + b"\n")  # over the 8 MiB cap
        for step in range(2, 7):
            fh.write(f"step: {step:2d}  loss: 1.0  elapsed_time_per_step: 0.020000s\n".encode())
    lines = list(iter_log(log))
    assert lines[1] == (
        f"[afbench: line 2 of {log} holds {(9 << 20) + 1} bytes, over the 8 MiB "
        "line cap: not read]\n"
    )
    assert max(len(line) for line in lines) < 200
    times = read_step_times(log, 3, 6)
    assert times == {3: 0.02, 4: 0.02, 5: 0.02, 6: 0.02}


def test_a_gzip_trace_inflating_over_the_cap_is_refused_naming_it(tmp_path):
    from afbench.analysis.traces import profiler_step_labels, read_trace_events

    bomb = tmp_path / "rank0_trace.json.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as fh:  # 100 MiB in about 100 KB
        fh.write(
            b'{"traceEvents": [{"ph": "X", "name": "ProfilerStep#1", "ts": 1, "dur": 1}, '
            b'{"ph": "X", "name": "'
        )
        for _ in range(100):
            fh.write(b"A" * (1 << 20))
        fh.write(b'", "ts": 1, "dur": 1}]}')
    assert bomb.stat().st_size < 1 << 20
    refused = f"{bomb}: over 64 MiB inflated \\(analysis.traces: at most 100x its size"
    with pytest.raises(ValueError, match=refused):
        read_trace_events(bomb)
    with pytest.raises(ValueError, match=refused):
        profiler_step_labels(bomb)
    with pytest.raises(ValueError, match=f"{bomb}: over 4 MiB inflated"):
        read_trace_events(bomb, cap=4 << 20)


def test_a_trace_is_read_incrementally_with_the_events_the_summary_needs(tmp_path):
    from afbench.analysis.traces import read_trace, read_trace_events

    events = [
        {
            "ph": "M",
            "name": "process_name",
            "pid": 7,
            "args": {"name": "Ascend Hardware", "labels": "x" * 100},
        },
        {
            "ph": "X",
            "name": "ProfilerStep#3",
            "pid": 1,
            "tid": 1,
            "ts": "100.5",
            "dur": 50,
            "args": {"Call stack": "y" * 1000},
        },
        {"ph": "X", "name": "MatMul", "pid": 7, "tid": 2, "ts": "110.25", "dur": 5.5},
        {"ph": "i", "name": "marker", "pid": 1, "ts": 1},
    ]
    path = tmp_path / "trace_view.json"
    path.write_text(json.dumps(events))
    read = read_trace_events(path)
    assert [e["name"] for e in read] == ["process_name", "ProfilerStep#3", "MatMul"]
    assert read[0]["args"] == {"name": "Ascend Hardware"} and "args" not in read[1]
    summary = read_trace(path)
    assert summary.kernels["op_type"].tolist() == ["MatMul"]
    assert summary.steps["kernels"].tolist() == [1]
    (tmp_path / "bad.json").write_text('{"other": 1}')
    with pytest.raises(ValueError, match="expected a JSON array of events"):
        read_trace_events(tmp_path / "bad.json")


# ---------------------------------------------------------------- history databases


@pytest.fixture
def silent_server():
    """A loopback TCP port that accepts connections and never says a word."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    yield f"postgresql+psycopg://afbench@127.0.0.1:{sock.getsockname()[1]}/history"
    sock.close()


def test_a_silent_postgresql_server_costs_one_connect_timeout_and_one_line(tmp_path, silent_server):
    pytest.importorskip("psycopg")
    write_recipe(
        tmp_path,
        "silent",
        {"good": command("good.py", "{steps}"), "other": command("good.py", "{steps}")},
    )
    proc = afbench(tmp_path, "experiment=silent", *LAUNCHER, f"history.url={silent_server}")
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text
    said = [line for line in text.splitlines() if "does not answer" in line]
    assert len(said) == 1, said
    assert "connect timeout 10 s" in said[0] and "127.0.0.1" in said[0]
    assert (output_dir(tmp_path) / "report.md").is_file()


def test_a_damaged_sqlite_history_is_one_line_and_exit_2(tmp_path):
    import sqlite3

    from afbench.history.db import open_db

    path = tmp_path / "history.sqlite"
    open_db(f"sqlite:///{path}").dispose()
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA journal_mode=DELETE")
        page = conn.execute("PRAGMA page_size").fetchone()[0]
        roots = [
            r
            for (r,) in conn.execute(
                "SELECT rootpage FROM sqlite_master WHERE name LIKE '%alembic_version%'"
            )
        ]
    conn.close()
    data = bytearray(path.read_bytes())
    kept = max(roots) * page  # the schema and alembic_version stay; every later page is noise
    data[kept:] = b"\xde\xad" * ((len(data) - kept) // 2)
    path.write_bytes(bytes(data))
    for cmd in (["list"], ["check", "--experiment", "x", "--variant", "y"]):
        done = subprocess.run(
            [sys.executable, "-m", "afbench.history", "--url", f"sqlite:///{path}", *cmd],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and str(path) in lines[0], done.stderr


# ---------------------------------------------------------------- a busy machine


@pytest.fixture
def burners():
    """CPU burners, two per CPU this process may use: other users' jobs."""
    n = 2 * len(os.sched_getaffinity(0))
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    time.sleep(0.5)
    yield procs
    for p in procs:
        p.kill()
        p.wait()


def test_a_busy_machine_is_seen_waited_for_within_the_bound_and_said_plainly(burners, caplog):
    from afbench.launch.quiet import probe, wait_for_quiet

    reasons = probe()
    assert reasons and "waited for a CPU" in reasons[0]
    caplog.set_level(logging.INFO)
    found = wait_for_quiet(2.0, "base-train-r1", poll_s=1.0)
    assert not found.quiet and found.reasons and 1.0 <= found.waited_s
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("afbench: the machine is busy (a probe waited for a CPU")
    assert lines[-1].startswith("afbench: the machine was never quiet enough in ")
    assert "running base-train-r1 anyway" in lines[-1]


def test_a_run_starts_once_the_load_has_passed(caplog):
    from afbench.launch.quiet import wait_for_quiet

    answers = [["waited for a CPU 80% of the window > 10%"], [], []]
    caplog.set_level(logging.INFO)
    found = wait_for_quiet(30.0, "base-train-r1", probe=lambda: answers.pop(0), poll_s=0.01)
    assert found.quiet and answers == [[]]
    assert caplog.records[-1].getMessage().startswith("afbench: quiet after ")
    assert wait_for_quiet(0, "x", probe=lambda: 1 / 0).quiet  # 0: never probes


def test_a_measured_run_and_the_rerun_of_a_contended_one_both_wait_for_quiet(tmp_path, monkeypatch):
    from afbench import experiment
    from test_contention_runs import fake_launcher, make_plan

    launch, _ = fake_launcher({"a-train-r1"})
    waits: dict[str, float] = {}

    def recording(spec, quiet_s=0.0):
        waits[spec.run_id] = quiet_s
        return launch(spec)

    monkeypatch.setattr(experiment, "launch_run", recording)
    plan = make_plan(tmp_path, rerun_contended=1).model_copy(update={"wait_for_quiet_s": 30.0})
    experiment.execute_plan(plan)
    assert waits == {"a-train-r1": 30.0, "a-train-r1-rerun1": 30.0, "b-train-r1": 30.0}
    other = plan.runs[0].model_copy(update={"phase": "profile"})
    assert plan.quiet_s(other) == 0.0  # a run outside the verdict phase does not wait


def test_a_ctrl_c_while_afbench_reads_a_finished_runs_log_still_records_the_run(
    tmp_path, monkeypatch
):
    from afbench.launch import local
    from test_contention_runs import spec_for

    def interrupted(spec, run_dir):  # the strict parse of a huge log, stopped by Ctrl-C
        raise KeyboardInterrupt

    monkeypatch.setattr(local, "window_problem", interrupted)
    spec = spec_for(tmp_path, "a-train-r1", "a")
    with pytest.raises(KeyboardInterrupt):
        local.launch_run(spec)
    st = json.loads((tmp_path / "runs" / "a-train-r1" / "status.json").read_text())
    assert (
        st["status"] == "SKIPPED"
        and st["reason"]["key"] == INTERRUPTED_REASON
        and st["exit_code"] == 0
    )
