"""Contention of a run: what shows that the machine was shared during its measured window,
and the decision "this run was contended" (a pure function of that record).

A :class:`Sample` is taken at the window's start and end (:func:`sample`); :func:`window_record`
turns two samples into the record kept as ``result.json``'s ``contention``
(:class:`afbench.store.Contention`, the same field names); :func:`judge` decides from it.

Sources (Linux; a file that is missing or unreadable, e.g. a kernel without PSI or macOS,
gives ``None`` for its measure, never an error):

* CPU pressure: ``/proc/pressure/cpu``, the ``some`` line's ``total=`` (microseconds, cumulative):
  time in which at least one runnable task waited for a CPU (kernel
  Documentation/accounting/psi.rst). Its delta over the window / the window's wall time is
  the share of the window in which something waited for a CPU. System-wide: afbench's own
  threads count too when they outnumber the CPUs.
* steal: ``/proc/stat``'s first ``cpu`` line, 8th value (USER_HZ ticks a hypervisor ran
  something else while this guest wanted a CPU; Documentation/filesystems/proc.rst, "1.8
  Miscellaneous kernel statistics in /proc/stat"); its delta as a share of the delta of the
  first 8 values (user .. steal; guest and guest_nice are already inside user and nice).
* runnable tasks: ``/proc/stat``'s ``procs_running`` (running or runnable now, the sampler
  included), read at the window's end.
* CPU time of the measured process: this process (all threads, plus the children it has
  waited for) from ``os.times()`` (POSIX times(2)); or a child's process tree from
  ``/proc/<pid>/stat`` fields 14-15 (utime, stime, clock ticks of ``SC_CLK_TCK``; proc(5)),
  the tree walked through ``/proc/<pid>/task/<tid>/children`` (Linux 3.5+).
* run-queue wait of the measured process: ``/proc/<pid>/task/<tid>/schedstat`` per thread,
  "time spent on the cpu" and "time spent waiting on a runqueue" (ns; kernel
  Documentation/scheduler/sched-stats.rst, "/proc/<pid>/schedstat"). The largest wait one
  thread added over the window, as a share of the window, is how much of the window the
  process's most-delayed thread (the step's critical path, for a single-threaded step) was
  ready to run but had no CPU: the process's own view of contention, which the system-wide
  PSI is not (PSI counts any task waiting, niced background work included). A thread that
  sleeps or waits for a device adds no run-queue wait.
* involuntary context switches: ``resource.getrusage(RUSAGE_SELF).ru_nivcsw`` (getrusage(2));
  for a child tree the ``nonvoluntary_ctxt_switches`` of each ``/proc/<pid>/task/<tid>/status``.
* load average: ``os.getloadavg()``'s 1-minute value at the window's end.

On CUDA/NPU these are the host side of the run (the process that feeds the device); a second
process on the same accelerator is not seen here (afbench's device locks keep afbench's own
runs apart: ``afbench.launch.devices``). Standard library only: the worker imports it.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROC = Path("/proc")

#: Thresholds of :func:`judge`, from bench/contention.py (bench/README.md §7): its matmul
#: worker (1 BLAS thread, 2 CPUs) quiet, beside busy loops and with loops of its own.
#: A thread of the process waited for a CPU more than this share of the window. A CPU-bound
#: step that waits a share w of its wall time takes 1/(1 - w) of its CPU time (measured:
#: 51% -> 1.90-1.96, 84% -> 5.64-5.78), so 10% allows steps ~11% longer than their CPU time.
#: Loaded runs (load 6-12) waited 51-91%; idle-host runs 0.0-1.7% (2026-12-03, 20 runs).
RUN_QUEUE_WAIT_PCT = 10.0
#: Without schedstat: the host had a task waiting for a CPU more than this share of the
#: window (PSI some). System-wide: 96-100% in all 40 bench runs, waits of 51% and 91% alike,
#: so it decides only where the process's own wait is unknown.
CPU_PRESSURE_PCT = 50.0
#: Steal above this share of the CPU time: a hypervisor gave the CPUs to another guest. It
#: adds to a step as it is (not in the run-queue wait): 5% steal, a step ~5% slower. Quiet
#: runs here saw 0-3.4% (idle host) and at most 3.1% (loaded); one newcomer run 7% (rerun).
STEAL_PCT = 5.0
#: A window shorter than this (seconds) is not judged: its shares rest on a few scheduler
#: slices (CFS hands out 3-24 ms) and utime/stime ticks (10 ms), e.g. a test worker that
#: prints its planted step lines at once.
MIN_WINDOW_S = 0.1
#: Without schedstat: the process used less than this share of the threads it asked for
#: (CPU seconds per wall second / threads, %); applied only where the threads are known.
CPU_OF_THREADS_PCT = 75.0


@dataclass(frozen=True)
class Sample:
    """One reading of the host and the measured process. ``t_s``: ``time.monotonic()``;
    ``psi_some_us``: PSI ``some`` total (µs); ``cpu_ticks`` / ``steal_ticks``: /proc/stat
    sums (USER_HZ ticks); ``procs_running``: runnable tasks now; ``cpu_s``: CPU seconds of
    the measured process (tree); ``nivcsw``: its involuntary context switches so far;
    ``load_1m``: the 1-minute load average; ``thread_wait_ns``: each thread's run-queue wait
    so far (ns, by tid). ``None`` where the source is missing."""

    t_s: float
    psi_some_us: int | None = None
    cpu_ticks: int | None = None
    steal_ticks: int | None = None
    procs_running: int | None = None
    cpu_s: float | None = None
    nivcsw: int | None = None
    load_1m: float | None = None
    # tid -> cumulative run-queue wait (ns) of each thread of the measured process (tree)
    thread_wait_ns: dict[int, int] | None = None


def _read(path: Path) -> str | None:
    try:
        return Path(path).read_text(encoding="ascii", errors="replace")
    except OSError:
        return None


def parse_psi_some_total(text: str | None) -> int | None:
    """The ``total=`` (µs) of the ``some`` line of a PSI file (``/proc/pressure/cpu``), None
    when absent. Format: ``some avg10=0.00 avg60=0.00 avg300=0.00 total=12345`` (psi.rst)."""
    for line in (text or "").splitlines():
        parts = line.split()
        if parts and parts[0] == "some":
            for part in parts[1:]:
                key, _, value = part.partition("=")
                if key == "total" and value.isdigit():
                    return int(value)
    return None


def parse_proc_stat(text: str | None) -> tuple[int | None, int | None, int | None]:
    """``(cpu_ticks, steal_ticks, procs_running)`` from ``/proc/stat``: the sum of the first 8
    values of the ``cpu`` line (user nice system idle iowait irq softirq steal), its 8th
    (steal; None on kernels that list fewer), and ``procs_running``."""
    cpu = steal = running = None
    for line in (text or "").splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "cpu":
            values = [int(v) for v in parts[1:9] if v.isdigit()]
            cpu = sum(values) if values else None
            steal = values[7] if len(values) >= 8 else None
        elif parts[0] == "procs_running" and len(parts) > 1 and parts[1].isdigit():
            running = int(parts[1])
    return cpu, steal, running


def _tree(pid: int, proc: Path) -> list[int]:
    """``pid`` and its descendants, from ``/proc/<pid>/task/<tid>/children``."""
    seen, todo = [], [pid]
    while todo:
        p = todo.pop()
        seen.append(p)
        try:
            tasks = list((proc / str(p) / "task").iterdir())
        except OSError:
            continue
        for task in tasks:
            todo += [int(c) for c in (_read(task / "children") or "").split() if c.isdigit()]
    return seen


def parse_schedstat(text: str | None) -> tuple[int, int] | None:
    """``(on_cpu_ns, run_queue_wait_ns)`` of a ``/proc/<pid>/task/<tid>/schedstat`` line
    (``<on cpu ns> <waiting ns> <timeslices>``, sched-stats.rst), None when unreadable."""
    parts = (text or "").split()
    if len(parts) < 2 or not (parts[0].isdigit() and parts[1].isdigit()):
        return None
    return int(parts[0]), int(parts[1])


def thread_waits(pid: int | str, proc: Path = PROC) -> dict[int, int]:
    """Run-queue wait (ns) of each thread of process ``pid`` (``"self"`` for this one) now,
    by tid; empty without schedstat."""
    out = {}
    try:
        tasks = list((proc / str(pid) / "task").iterdir())
    except OSError:
        return out
    for task in tasks:
        got = parse_schedstat(_read(task / "schedstat"))
        if got is not None and task.name.isdigit():
            out[int(task.name)] = got[1]
    return out


def tree_counters(pid: int, proc: Path = PROC) -> dict[str, Any]:
    """``cpu_s`` (utime + stime, s), ``nivcsw`` (involuntary context switches) and
    ``thread_wait_ns`` (:func:`thread_waits` of every process) of ``pid`` and its descendants
    now; each None when ``/proc/<pid>`` cannot be read (the process ended, or no procfs)."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    ticks, switches, waits = 0, 0, {}
    found = False
    for p in _tree(pid, proc):
        stat = _read(proc / str(p) / "stat")
        if not stat:
            continue
        # the command name (field 2) may hold spaces: fields after its closing parenthesis
        fields = stat.rpartition(")")[2].split()
        if len(fields) < 13:
            continue
        found = True
        ticks += int(fields[11]) + int(fields[12])  # utime, stime: fields 14, 15 of proc(5)
        try:
            tasks = list((proc / str(p) / "task").iterdir())
        except OSError:
            tasks = []
        for task in tasks:
            for line in (_read(task / "status") or "").splitlines():
                if line.startswith("nonvoluntary_ctxt_switches:"):
                    switches += int(line.split(":", 1)[1])
        waits.update(thread_waits(p, proc))
    if not found:
        return {"cpu_s": None, "nivcsw": None, "thread_wait_ns": None}
    return {"cpu_s": ticks / tick, "nivcsw": switches, "thread_wait_ns": waits or None}


def sample(pid: int | None = None, proc: Path = PROC) -> Sample:
    """Read the host's counters and the CPU time of this process (``pid`` None: all threads
    plus waited-for children) or of the process tree of ``pid``. Never raises for a missing
    source; costs well under a millisecond on Linux."""
    cpu_ticks, steal, running = parse_proc_stat(_read(proc / "stat"))
    if pid is None:
        t = os.times()
        own: dict[str, Any] = {"cpu_s": t.user + t.system + t.children_user + t.children_system}
        try:
            import resource  # POSIX only

            own["nivcsw"] = (
                resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw
                + resource.getrusage(resource.RUSAGE_CHILDREN).ru_nivcsw
            )
        except ImportError:
            own["nivcsw"] = None
        own["thread_wait_ns"] = thread_waits("self", proc) or None
    else:
        own = tree_counters(pid, proc)
    try:
        load = os.getloadavg()[0]
    except (OSError, AttributeError):
        load = None
    return Sample(
        t_s=time.monotonic(),
        psi_some_us=parse_psi_some_total(_read(proc / "pressure" / "cpu")),
        cpu_ticks=cpu_ticks,
        steal_ticks=steal,
        procs_running=running,
        load_1m=load,
        **own,
    )


def _delta(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else b - a


def _round(x: float | None, nd: int = 3) -> float | None:
    return None if x is None or not math.isfinite(x) else round(x, nd)


def _max_thread_wait(start: Sample, end: Sample) -> int | None:
    """The largest run-queue wait (ns) one thread added between the samples; a thread born
    in between counts from 0. None without schedstat at the end."""
    if end.thread_wait_ns is None:
        return None
    before = start.thread_wait_ns or {}
    return max((w - before.get(tid, 0) for tid, w in end.thread_wait_ns.items()), default=0)


def window_record(
    start: Sample, end: Sample, *, threads: int | None, scope: str, source: str
) -> dict[str, Any]:
    """The contention record of the span ``start`` .. ``end`` (the JSON of
    :class:`afbench.store.Contention`).

    Args:
        threads: the CPU threads the measured process asked for (torch intra-op threads, a
            command's ``OMP_NUM_THREADS``), None when unknown.
        scope: ``window`` (the measured window's first step start to its last step end) or
            ``run`` (the whole process: the window could not be told apart).
        source: one line saying which span and process were sampled.

    Returns:
        ``scope, source, wall_s`` (s), ``cpu_pressure_pct`` (PSI some share of the span, %),
        ``steal_pct`` (%), ``run_queue_wait_pct`` (the share of the span in which the measured
        process's most-delayed thread was runnable but waiting for a CPU, %), ``cpu_s`` (CPU
        seconds of the measured process), ``cpu_per_wall``
        (CPU seconds per wall second: 2.0 = two CPUs busy), ``threads``,
        ``cpu_of_threads_pct`` (cpu_per_wall / threads, %), ``involuntary_switches`` and
        ``involuntary_switches_per_s``, ``load_avg_1m``, ``procs_running`` (runnable tasks at
        the end, the sampler included), ``cpus`` (CPUs this process may run on). A measure
        whose source is missing is None.
    """
    wall = end.t_s - start.t_s
    ok = wall > 0
    psi = _delta(start.psi_some_us, end.psi_some_us)
    ticks, steal = (
        _delta(start.cpu_ticks, end.cpu_ticks),
        _delta(start.steal_ticks, end.steal_ticks),
    )
    cpu = _delta(start.cpu_s, end.cpu_s)
    switches = _delta(start.nivcsw, end.nivcsw)
    wait = _max_thread_wait(start, end)
    per_wall = cpu / wall if cpu is not None and ok else None
    try:
        cpus: int | None = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count()
    return {
        "scope": scope,
        "source": source,
        "wall_s": _round(wall, 4),
        # PSI totals are µs of wall time: min() against rounding at the edges of the span
        "cpu_pressure_pct": _round(min(100.0, psi / 1e4 / wall))
        if psi is not None and ok
        else None,
        "steal_pct": _round(100.0 * steal / ticks)
        if steal is not None and ticks
        else (0.0 if steal == 0 else None),
        # the most-delayed thread's run-queue wait over the span (schedstat)
        "run_queue_wait_pct": (
            _round(min(100.0, 100.0 * wait / 1e9 / wall), 2) if wait is not None and ok else None
        ),
        "cpu_s": _round(cpu, 4),
        "cpu_per_wall": _round(per_wall),
        "threads": threads,
        "cpu_of_threads_pct": (
            _round(100.0 * per_wall / threads, 2) if per_wall is not None and threads else None
        ),
        "involuntary_switches": int(switches) if switches is not None else None,
        "involuntary_switches_per_s": _round(switches / wall, 1)
        if switches is not None and ok
        else None,
        "load_avg_1m": _round(end.load_1m, 2),
        "procs_running": end.procs_running,
        "cpus": cpus,
    }


def judge(
    record: Mapping[str, Any] | Any | None,
) -> tuple[bool | None, list[tuple[str, dict[str, Any]]]]:
    """Whether a run was contended, from its contention record (a mapping or an object with
    the record's attributes, e.g. :class:`afbench.store.Contention`), and why.

    Contended when a thread of the process waited for a CPU more than
    :data:`RUN_QUEUE_WAIT_PCT` of the window, or the hypervisor stole more than
    :data:`STEAL_PCT`. Where the record has no run-queue wait (no schedstat) the host-wide
    measures stand in: CPU pressure above :data:`CPU_PRESSURE_PCT`, or (threads known) less
    than :data:`CPU_OF_THREADS_PCT` of the threads asked for.

    Returns ``(None, [])`` without a record (not measured), ``(None, [why])`` for a window
    shorter than :data:`MIN_WINDOW_S`, ``(False, [])`` when no measure crosses its
    threshold, else ``(True, reasons)``. Each reason is ``(code, values)``: a labels.yaml key
    (``cont_reason_short`` | ``_wait`` | ``_steal`` | ``_pressure`` | ``_cpu_share``) and the
    numbers its sentence takes (``("cont_reason_wait", {"wait": 34.2, "limit": 10.0})``:
    English "waited for a CPU 34% of the window > 10%"), worded by the caller
    (``afbench.messages.say``) in the reader's language."""
    if record is None:
        return None, []

    def get(key: str) -> Any:
        return record.get(key) if isinstance(record, Mapping) else getattr(record, key, None)

    wall = get("wall_s")
    if wall is not None and wall < MIN_WINDOW_S:
        return None, [("cont_reason_short", {"wall": wall, "limit": MIN_WINDOW_S})]

    reasons: list[tuple[str, dict[str, Any]]] = []
    wait, steal = get("run_queue_wait_pct"), get("steal_pct")
    if wait is not None and wait > RUN_QUEUE_WAIT_PCT:
        reasons.append(("cont_reason_wait", {"wait": wait, "limit": RUN_QUEUE_WAIT_PCT}))
    if steal is not None and steal > STEAL_PCT:
        reasons.append(("cont_reason_steal", {"steal": steal, "limit": STEAL_PCT}))
    if wait is None:
        psi, share = get("cpu_pressure_pct"), get("cpu_of_threads_pct")
        if psi is not None and psi > CPU_PRESSURE_PCT:
            reasons.append(("cont_reason_pressure", {"pressure": psi, "limit": CPU_PRESSURE_PCT}))
        if share is not None and share < CPU_OF_THREADS_PCT:
            reasons.append(
                (
                    "cont_reason_cpu_share",
                    {
                        "cpu_per_wall": get("cpu_per_wall"),
                        "threads": get("threads"),
                        "share": share,
                        "limit": CPU_OF_THREADS_PCT,
                    },
                )
            )
    return bool(reasons), reasons


class WindowSampler:
    """Samples taken at a window's start and end (:func:`sample`) and the record between
    them. ``pid``: the process tree measured (None: this process); it may be set after
    construction (a child started later). :meth:`start` again restarts the window;
    :meth:`end` before :meth:`start` does nothing."""

    def __init__(
        self,
        *,
        threads: int | None,
        scope: str,
        source: str,
        pid: int | None = None,
        proc: Path = PROC,
    ) -> None:
        self.threads, self.scope, self.source, self.pid, self.proc = (
            threads,
            scope,
            source,
            pid,
            proc,
        )
        self.first: Sample | None = None
        self.last: Sample | None = None

    def start(self) -> None:
        self.first, self.last = sample(self.pid, self.proc), None

    def end(self) -> None:
        if self.first is not None and self.last is None:
            self.last = sample(self.pid, self.proc)

    def record(self) -> dict[str, Any] | None:
        """:func:`window_record` of the span, None when the window was not both started and
        ended."""
        if self.first is None or self.last is None:
            return None
        return window_record(
            self.first, self.last, threads=self.threads, scope=self.scope, source=self.source
        )


#: :func:`uniform_slowdown`: at least this many ops whose launch count did not change ...
UNIFORM_MIN_OPS = 3
#: ... at least this share of them slower (or faster) by a similar ratio ...
UNIFORM_MIN_SHARE = 0.75
#: ... whose median is at least this factor away from 1 ...
UNIFORM_MIN_RATIO = 1.3
#: ... each within this factor of that median ("similar").
UNIFORM_MAX_SPREAD = 1.5


def uniform_slowdown(
    rows: list[Mapping[str, Any]], *, baseline: str, variant: str
) -> dict[str, Any] | None:
    """Whether an op diff's change is everywhere rather than in the switched ops.

    A switch changes the ops it touches (their launch counts change: fused ops appear,
    pieces disappear); the other ops keep their counts and, on an undisturbed machine, their
    time. When most of those unswitched ops take longer (or shorter) by a similar ratio, the
    difference came from the machine (one side's run was contended), not from the switch.

    Args:
        rows: the op diff (:func:`afbench.analysis.kernels.diff_kernel_tables` as records:
            ``op_type, count_baseline, count_variant, total_us_baseline, total_us_variant``),
            all op types, not only the top ones.
        baseline, variant: the sides' names.

    Returns:
        ``{"ratio": 1.90, "similar": 12, "ops": 14, "side": <the slower side>}`` (the values
        of the labels.yaml sentence ``uniform_slowdown_note``) when at least
        :data:`UNIFORM_MIN_OPS` unswitched ops exist,
        their median time ratio is at least :data:`UNIFORM_MIN_RATIO` away from 1 and at
        least :data:`UNIFORM_MIN_SHARE` of them lie within :data:`UNIFORM_MAX_SPREAD` of it
        on the same side of 1; else None.
    """
    ratios = sorted(
        float(r["total_us_variant"]) / float(r["total_us_baseline"])
        for r in rows
        if int(r["count_baseline"]) == int(r["count_variant"]) > 0
        and float(r["total_us_baseline"]) > 0
        and float(r["total_us_variant"]) > 0
    )
    if len(ratios) < UNIFORM_MIN_OPS:
        return None
    n = len(ratios)
    med = (ratios[(n - 1) // 2] + ratios[n // 2]) / 2
    if max(med, 1 / med) < UNIFORM_MIN_RATIO:
        return None
    slower = med > 1
    similar = [
        r for r in ratios if (r > 1) == slower and max(r / med, med / r) <= UNIFORM_MAX_SPREAD
    ]
    if len(similar) < UNIFORM_MIN_SHARE * n:
        return None
    return {
        "ratio": round(max(med, 1 / med), 4),
        "similar": len(similar),
        "ops": n,
        "side": variant if slower else baseline,
    }
