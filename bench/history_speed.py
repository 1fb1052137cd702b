"""History speed (issue 21 item 5): what recording costs an experiment, and how long
``history report`` takes over 1,000 records.

    python bench/history_speed.py [--dirs 250] [--url URL] [--keep DIR]

1. Recording: ``afbench.history.record_experiment`` (the one call an experiment makes when it
   ends) on copies of the stored v1 output directory (tests/fixtures/results/v1: 4 variants,
   16 runs, 8 in the verdict phase), into a database that already holds the other copies.
   In one process: the first call creates the tables, the median of the next 20 is the cost
   once everything is loaded. Then what an experiment pays: a fresh interpreter with
   afbench's models and numpy loaded (as the experiment has them) records one directory into
   the existing database, whatever it imports included (median of 5). Target < 0.2 s.
2. ``python -m afbench.history import`` of all copies at once (``--dirs``, default 250: 1,000
   records), then ``python -m afbench.history report`` over them as a user runs it (a fresh
   process: interpreter start, imports, queries, change points, 8 SVG plots, HTML and
   Markdown). Target < 5 s. The copies get created_at one hour apart and, from the middle
   on, step times x 1.2 in their logs, so the report has a change point to find.

``--url``: another database (e.g. PostgreSQL; it must be empty); default a SQLite file in the
scratch folder. Prints MET / MISSED; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import _common as C

FIXTURE = C.REPO / "tests" / "fixtures" / "results" / "v1"
STEP_TIME = re.compile(r"(elapsed_time_per_step: )([0-9.]+)")


def make_copies(root: Path, n: int) -> list[Path]:
    """``n`` copies of the fixture directory, created an hour apart, the later half slower."""
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    out = []
    for k in range(n):
        d = root / "outputs" / f"exp{k:04d}"
        shutil.copytree(FIXTURE, d)
        exp = json.loads((d / "experiment.json").read_text())
        exp["created_at"] = (t0 + timedelta(hours=k)).isoformat(timespec="seconds")
        (d / "experiment.json").write_text(json.dumps(exp))
        if k >= n // 2:
            for log in d.glob("runs/*/stdout.log"):
                log.write_text(
                    STEP_TIME.sub(
                        lambda m: f"{m.group(1)}{float(m.group(2)) * 1.2:.6f}", log.read_text()
                    )
                )
        out.append(d)
    return out


def cpu_children() -> float:
    """User + system CPU seconds of this process's finished children."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def history(url: str, *args: str) -> tuple[float, float, subprocess.CompletedProcess]:
    """(wall s, CPU s, process) of ``python -m afbench.history --url URL args``. On a loaded
    machine the CPU time is close to what the wall time would be on an idle core."""
    t, c = time.perf_counter(), cpu_children()
    proc = subprocess.run(
        [C.PYTHON, "-m", "afbench.history", "--url", url, *args], capture_output=True, text=True
    )
    return time.perf_counter() - t, cpu_children() - c, proc


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dirs", type=int, default=250)
    ap.add_argument("--url")
    ap.add_argument("--keep")
    args = ap.parse_args()
    t_start = time.perf_counter()
    C.header("history_speed")
    root = C.scratch_dir(args.keep, "afbench-history-bench-")
    url = args.url or f"sqlite:///{root / 'history.sqlite'}"
    try:
        dirs = make_copies(root, args.dirs)
        print(
            f"database: {url.split('@')[-1]}; {len(dirs)} copies of {FIXTURE.name} "
            f"(4 variants each: {4 * len(dirs)} records)"
        )

        # 1. the hook, in this process, as the experiment calls it
        from afbench.history import record_experiment

        times, cpu_times = [], []
        for d in dirs[:21]:
            t, c = time.perf_counter(), time.process_time()
            assert record_experiment(d, url), f"{d} was not recorded"
            times.append(time.perf_counter() - t)
            cpu_times.append(time.process_time() - c)
        warm = statistics.median(times[1:])
        print(
            f"record_experiment: first call {times[0]:.3f} s (a new file: imports SQLAlchemy "
            f"and Alembic, creates the tables); then median wall {warm:.3f} s, CPU "
            f"{statistics.median(cpu_times[1:]):.3f} s, max wall {max(times[1:]):.3f} s over "
            f"{len(times) - 1} experiments (a sweep's jobs in one process)"
        )
        # what one experiment pays: its process has afbench's models and numpy loaded, not
        # SQLAlchemy; it records once, into a database that exists
        cold, cold_cpu, cold_main = [], [], []
        for d in dirs[21:26]:
            code = (
                "import time, afbench.runspec, afbench.store.layout, afbench.store.summary, "
                "afbench.verdict; t = time.perf_counter(); c = time.process_time(); "
                "m = time.thread_time(); "
                "from afbench.history import record_experiment; "
                f"assert record_experiment({str(d)!r}, {url!r}); "
                "import sys; print(int('sqlalchemy' in sys.modules), "
                "time.perf_counter() - t, time.process_time() - c, time.thread_time() - m)"
            )
            proc = subprocess.run([C.PYTHON, "-c", code], capture_output=True, text=True)
            if proc.returncode:
                raise SystemExit(proc.stderr)
            sqla, wall, cpu, main_cpu = (float(x) for x in proc.stdout.split()[-4:])
            cold.append(wall)
            cold_cpu.append(cpu)
            cold_main.append(main_cpu)
            imported = "SQLAlchemy imported" if sqla else "no SQLAlchemy import"
        per_exp, per_cpu = statistics.median(cold), statistics.median(cold_cpu)
        print(
            f"record_experiment in a fresh experiment process (opens the database, reads the "
            f"directory, writes; {imported}): median wall {per_exp:.3f} s "
            f"({', '.join(f'{c:.3f}' for c in cold)}), CPU {per_cpu:.3f} s "
            f"({', '.join(f'{c:.3f}' for c in cold_cpu)}); the recording thread's own CPU "
            f"{statistics.median(cold_main):.3f} s ({', '.join(f'{c:.3f}' for c in cold_main)}): "
            f"the rest of the process CPU is numpy's OpenBLAS worker threads, started when the "
            f"experiment imported numpy, spinning on the second core"
        )
        per_main = statistics.median(cold_main)
        print(
            f"  target < 0.2 s per experiment: wall {'MET' if per_exp < 0.2 else 'MISSED'}, "
            f"recording thread CPU {'MET' if per_main < 0.2 else 'MISSED'}, process CPU "
            f"{'MET' if per_cpu < 0.2 else 'MISSED'}"
        )

        # 2. import the rest, then the report as a user runs it
        wall, cpu, proc = history(url, "import", str(root / "outputs"))
        print(
            f"history import of {len(dirs)} directories ({len(dirs) - 26} new): {wall:.2f} s "
            f"wall, {cpu:.2f} s CPU "
            f"-> {proc.stdout.strip().splitlines()[-1]}"
        )
        reports, cpus = [], []
        for _ in range(3):
            wall, cpu, proc = history(url, "report", "-o", str(root / "report" / "history.html"))
            if proc.returncode:
                raise SystemExit(proc.stderr)
            reports.append(wall)
            cpus.append(cpu)
        page = (root / "report" / "history.html").read_text()
        print(f"history report: {proc.stdout.strip()}")
        print(
            f"  per run (fresh process): wall {', '.join(f'{w:.2f}' for w in reports)} s, "
            f"CPU {', '.join(f'{c:.2f}' for c in cpus)} s; "
            f"{page.count('<svg')} plots, {page.count('change')} 'change' mentions, "
            f"{len(page) / 1e6:.1f} MB of HTML"
        )
        best = min(reports)
        print(
            f"  target < 5 s over 1,000 records: wall {'MET' if best < 5 else 'MISSED'} "
            f"(best {best:.2f} s), CPU {'MET' if min(cpus) < 5 else 'MISSED'} "
            f"(best {min(cpus):.2f} s)"
        )
        wall, cpu, proc = history(url, "check", "--experiment", "fixture_results")
        print(f"history check (exit {proc.returncode}) in {wall:.2f} s wall, {cpu:.2f} s CPU:")
        for line in proc.stdout.splitlines():
            print(f"  {line[:200]}")
    finally:
        C.cleanup(root, args.keep)
        C.footer(t_start)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()
