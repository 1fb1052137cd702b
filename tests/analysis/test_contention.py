"""afbench.analysis.contention: the measures read from /proc (fake procfs trees holding real
file contents copied from a Linux 2-CPU VM), the record of a window, the contended decision
on synthetic records, and the op diff's uniform-slowdown note."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from afbench.analysis import contention as C
from afbench.messages import say

# copied from this machine: cat /proc/pressure/cpu; head -1 /proc/stat
PSI = (
    "some avg10=2.66 avg60=20.59 avg300=9.11 total=36094685\n"
    "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
)
STAT = (
    "cpu  18509 1348 5254 48517 327 0 112 1495 0 0\n"
    "cpu0 9254 674 2627 24258 163 0 56 747 0 0\n"
    "intr 1 2 3\nctxt 123\nprocs_running 6\nprocs_blocked 0\n"
)


def fake_proc(root: Path, psi: str | None = PSI, stat: str | None = STAT) -> Path:
    if psi is not None:
        (root / "pressure").mkdir(parents=True, exist_ok=True)
        (root / "pressure" / "cpu").write_text(psi)
    if stat is not None:
        root.mkdir(parents=True, exist_ok=True)
        (root / "stat").write_text(stat)
    return root


def test_psi_some_total_is_read_in_microseconds():
    assert C.parse_psi_some_total(PSI) == 36094685
    assert C.parse_psi_some_total("full avg10=0.00 avg60=0.00 avg300=0.00 total=0") is None
    assert C.parse_psi_some_total(None) is None


def test_proc_stat_gives_the_sum_of_eight_cpu_values_steal_and_runnable_tasks():
    cpu, steal, running = C.parse_proc_stat(STAT)
    assert cpu == 18509 + 1348 + 5254 + 48517 + 327 + 0 + 112 + 1495  # guest fields left out
    assert (steal, running) == (1495, 6)
    assert C.parse_proc_stat("cpu  1 2 3 4\n") == (10, None, None)  # an old kernel: no steal


def test_sample_reads_a_fake_proc_and_missing_files_give_none(tmp_path):
    s = C.sample(proc=fake_proc(tmp_path / "full"))
    assert (s.psi_some_us, s.steal_ticks, s.procs_running) == (36094685, 1495, 6)
    assert s.cpu_s is not None and s.cpu_s > 0  # os.times() of this process
    bare = C.sample(proc=tmp_path / "no-proc")  # no PSI (old kernel), no procfs (macOS)
    assert (
        bare.psi_some_us,
        bare.cpu_ticks,
        bare.steal_ticks,
        bare.procs_running,
        bare.thread_wait_ns,
    ) == (None,) * 5
    later = dataclasses.replace(bare, t_s=bare.t_s + 1.0)
    record = C.window_record(bare, later, threads=None, scope="window", source="x")
    assert record["cpu_pressure_pct"] is None and record["steal_pct"] is None
    assert C.judge(record) == (False, [])


def _task(
    root: Path,
    pid: int,
    utime: int,
    stime: int,
    *,
    run_ns: int,
    wait_ns: int,
    nivcsw: int,
    children: str = "",
) -> None:
    d = root / str(pid)
    (d / "task" / str(pid)).mkdir(parents=True)
    # field 2 with a space and a parenthesis: the parse splits after the last ')'
    (d / "stat").write_text(
        f"{pid} (py (x) y) R 1 {pid} {pid} 0 -1 4194304 100 0 0 0 "
        f"{utime} {stime} 0 0 20 0 1 0 100 1000 200\n"
    )
    (d / "task" / str(pid) / "schedstat").write_text(f"{run_ns} {wait_ns} 42\n")
    (d / "task" / str(pid) / "status").write_text(
        f"Name:\tpython\nvoluntary_ctxt_switches:\t5\nnonvoluntary_ctxt_switches:\t{nivcsw}\n"
    )
    (d / "task" / str(pid) / "children").write_text(children)


def test_a_process_tree_sums_cpu_ticks_and_switches_and_keeps_each_threads_wait(tmp_path):
    _task(tmp_path, 100, 30, 10, run_ns=400_000_000, wait_ns=100_000_000, nivcsw=7, children="101 ")
    _task(tmp_path, 101, 50, 10, run_ns=600_000_000, wait_ns=300_000_000, nivcsw=3)
    got = C.tree_counters(100, tmp_path)
    tick = __import__("os").sysconf("SC_CLK_TCK")
    assert got == {
        "cpu_s": pytest.approx(100 / tick),
        "nivcsw": 10,
        "thread_wait_ns": {100: 100_000_000, 101: 300_000_000},
    }
    assert C.tree_counters(999, tmp_path)["cpu_s"] is None  # the process has ended


def test_window_record_turns_two_samples_into_shares_of_the_window():
    start = C.Sample(
        t_s=10.0,
        psi_some_us=1_000_000,
        cpu_ticks=1000,
        steal_ticks=10,
        procs_running=3,
        cpu_s=5.0,
        nivcsw=100,
        load_1m=1.0,
        thread_wait_ns={1: 5_000_000_000, 2: 0},
    )
    # thread 1 waited 0.96 s more, thread 2 0.2 s, thread 3 (born in the window) 0.5 s
    end = C.Sample(
        t_s=12.0,
        psi_some_us=1_680_000,
        cpu_ticks=1400,
        steal_ticks=18,
        procs_running=4,
        cpu_s=6.04,
        nivcsw=300,
        load_1m=2.5,
        thread_wait_ns={1: 5_960_000_000, 2: 200_000_000, 3: 500_000_000},
    )
    r = C.window_record(start, end, threads=2, scope="window", source="steps 3-10")
    assert r["wall_s"] == 2.0
    assert r["cpu_pressure_pct"] == 34.0  # 0.68 s of 2 s
    assert r["steal_pct"] == 2.0  # 8 of 400 ticks
    assert r["run_queue_wait_pct"] == 48.0  # the most-delayed thread: 0.96 s of 2 s
    assert (r["cpu_per_wall"], r["cpu_of_threads_pct"]) == (0.52, 26.0)
    assert (r["involuntary_switches"], r["involuntary_switches_per_s"]) == (200, 100.0)
    assert (r["load_avg_1m"], r["procs_running"], r["threads"]) == (2.5, 4, 2)


def test_a_quiet_record_is_not_contended_and_a_missing_one_is_unknown():
    quiet = {
        "run_queue_wait_pct": 3.0,
        "cpu_pressure_pct": 95.0,
        "steal_pct": 0.0,
        "cpu_per_wall": 0.99,
        "threads": 1,
        "cpu_of_threads_pct": 99.0,
    }
    # host-wide pressure (other users' niced work) does not make the run contended when the
    # process itself hardly waited
    assert C.judge(quiet) == (False, [])
    assert C.judge(None) == (None, [])


def test_a_run_that_waited_for_the_cpu_is_contended_and_says_which_threshold():
    contended, reasons = C.judge({"run_queue_wait_pct": 34.0, "steal_pct": 0.0})
    assert contended
    assert reasons == [("cont_reason_wait", {"wait": 34.0, "limit": C.RUN_QUEUE_WAIT_PCT})]


def test_a_window_too_short_to_measure_is_not_judged():
    contended, reasons = C.judge({"wall_s": 0.004, "run_queue_wait_pct": 80.0})
    assert contended is None and reasons == [
        ("cont_reason_short", {"wall": 0.004, "limit": C.MIN_WINDOW_S})
    ]


def test_steal_above_its_threshold_is_contended_on_its_own():
    contended, reasons = C.judge({"run_queue_wait_pct": 1.0, "steal_pct": C.STEAL_PCT + 3})
    assert contended and reasons[0] == (
        "cont_reason_steal",
        {"steal": C.STEAL_PCT + 3, "limit": C.STEAL_PCT},
    )


def test_without_schedstat_pressure_and_cpu_share_decide():
    rec = {
        "run_queue_wait_pct": None,
        "cpu_pressure_pct": C.CPU_PRESSURE_PCT + 10,
        "cpu_per_wall": 0.52,
        "threads": 2,
        "cpu_of_threads_pct": 26.0,
    }
    contended, reasons = C.judge(rec)
    assert contended and len(reasons) == 2
    assert reasons[1] == (
        "cont_reason_cpu_share",
        {"cpu_per_wall": 0.52, "threads": 2, "share": 26.0, "limit": C.CPU_OF_THREADS_PCT},
    )
    calm = {**rec, "cpu_pressure_pct": 1.0, "cpu_of_threads_pct": 97.0}
    assert C.judge(calm) == (False, [])


def test_judge_reads_a_typed_record_too():
    from afbench.store import Contention

    assert C.judge(Contention(run_queue_wait_pct=50.0))[0] is True


def test_window_sampler_needs_both_edges(tmp_path):
    w = C.WindowSampler(threads=1, scope="window", source="x", proc=fake_proc(tmp_path))
    assert w.record() is None
    w.end()  # before start: ignored
    assert w.record() is None
    w.start()
    w.end()
    rec = w.record()
    assert rec is not None and rec["scope"] == "window" and rec["steal_pct"] == 0.0


def diff_row(op: str, cb: int, cv: int, tb: float, tv: float) -> dict:
    return {
        "op_type": op,
        "count_baseline": cb,
        "count_variant": cv,
        "total_us_baseline": tb,
        "total_us_variant": tv,
    }


def test_a_slowdown_in_every_unswitched_op_is_named_as_contention():
    rows = [
        diff_row("aten::mm", 40, 40, 1000, 2000),
        diff_row("aten::add", 20, 20, 100, 190),
        diff_row("aten::mul", 20, 20, 80, 150),
        diff_row("aten::silu", 10, 10, 50, 95),
        # the switched ops: their counts changed
        diff_row("aten::rsqrt", 10, 0, 30, 0),
        diff_row("npu_add_rms_norm", 0, 10, 0, 25),
    ]
    found = C.uniform_slowdown(rows, baseline="eager", variant="fused")
    assert found == {"ratio": pytest.approx(1.9, abs=0.01), "similar": 4, "ops": 4, "side": "fused"}
    note = say("uniform_slowdown_note", **found).text  # the catalog words the values
    assert note.startswith("uniform slowdown of x1.90 across 4 of 4 ops")
    assert "the fused run was likely contended" in note


def test_a_faster_baseline_side_names_the_baseline_and_a_real_change_gives_no_note():
    faster = [diff_row(op, 5, 5, 200, 100) for op in ("a", "b", "c")]
    assert C.uniform_slowdown(faster, baseline="eager", variant="fused")["side"] == "eager"
    # the switch changed one op's time; the others did not move
    mixed = [
        diff_row("aten::mm", 40, 40, 1000, 2900),
        diff_row("a", 5, 5, 100, 101),
        diff_row("b", 5, 5, 100, 99),
        diff_row("c", 5, 5, 100, 100),
    ]
    assert C.uniform_slowdown(mixed, baseline="eager", variant="fused") is None
    assert C.uniform_slowdown(faster[:2], baseline="eager", variant="fused") is None
