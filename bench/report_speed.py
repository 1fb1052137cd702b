"""Benchmark: how long the reports of a 16-combination sweep take to build.

Builds a real sweep once (``python -m afbench -m`` over 4 binary keys = 16 jobs, each one run
of the command engine with bench/workers/trivial_steps.py), or reuses one given with
``--sweep-dir``; then, in this process, times

* ``afbench.sweep.build_sweep_report(sweep_dir)`` (collect all 16 jobs, rank, write
  sweep_summary.json, sweep_report.md/.html): the first call (cold: its lazy imports of
  collect/compare/render happen inside) and ``--repeats`` more (warm, as at the end of a sweep
  whose jobs ran in the same process);
* ``afbench.report.render.build_report(job_dir)`` for each job (collect, compare, write the
  results tables and summary.json, render report.md and report.html with plots).

Target: sweep report under 2 s.

    .venv/bin/python bench/report_speed.py [--sweep-dir DIR] [--repeats 5] [--keep DIR]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import _common as C

TRIVIAL = C.WORKERS / "trivial_steps.py"
TARGET_SWEEP_S = 2.0
KEYS = ["optimization.autofuse", "optimization.add_rmsnorm", "optimization.rmsnorm", "scheduler.lr"]
VALUES = {"scheduler.lr": "0.0001,0.0002"}


def build_sweep(work: Path, steps: int) -> Path:
    recipes = C.write_recipe(
        work,
        "bench_report",
        {"base": {}},
        {
            "train": {
                "scheduler": {"steps": steps, "measure": {"first_step": 2, "last_step": steps}}
            }
        },
        extra=C.command_engine(TRIVIAL, "{steps}"),
    )
    sweeps = [f"{k}={VALUES.get(k, 'false,true')}" for k in KEYS]
    print(C.load_line("load before building the sweep"), flush=True)
    wall, _ = C.run_afbench(work, recipes, "-m", "experiment=bench_report", *sweeps)
    dirs = sorted((work / "multirun").glob("*/*"))
    if not dirs:
        raise SystemExit("no sweep directory was written")
    print(
        f"built a 16-job sweep in {wall:.1f} s: python -m afbench -m experiment=bench_report "
        + " ".join(sweeps)
        + f" -> {dirs[-1]}"
    )
    return dirs[-1]


def line(name: str, values: list[float]) -> str:
    return (
        f"{name:<36} median {statistics.median(values):6.3f} s  mean {C.mean(values):6.3f}"
        f"  min {min(values):6.3f}  max {max(values):6.3f}  (n={len(values)})"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sweep-dir", help="reuse this sweep directory instead of building one")
    ap.add_argument("--repeats", type=int, default=5, help="warm sweep-report timings (default 5)")
    ap.add_argument("--steps", type=int, default=6, help="steps per job when building (default 6)")
    ap.add_argument(
        "--keep", help="work in this folder and keep it (default: a temp folder, removed)"
    )
    args = ap.parse_args(argv)

    t_start = time.perf_counter()
    C.header("bench/report_speed.py", argv)
    work = C.scratch_dir(args.keep, "afbench-report-")
    sweep_dir = Path(args.sweep_dir).resolve() if args.sweep_dir else build_sweep(work, args.steps)
    jobs = sorted((p.parent for p in sweep_dir.glob("*/plan.json")), key=lambda p: int(p.name))
    print(f"sweep: {len(jobs)} jobs in {sweep_dir}")

    from afbench.report.render import build_report
    from afbench.sweep import build_sweep_report

    print(C.load_line("load before timing"), flush=True)
    t0 = time.perf_counter()
    summary = build_sweep_report(sweep_dir)
    cold = time.perf_counter() - t0
    warm = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        build_sweep_report(sweep_dir)
        warm.append(time.perf_counter() - t0)
    per_job = []
    for job in jobs:
        t0 = time.perf_counter()
        build_report(job)
        per_job.append(time.perf_counter() - t0)
    print(C.load_line("load after timing"))

    verdicts = [c.verdict for c in summary.combinations]
    print(
        f"sweep summary: {len(summary.combinations)} combinations, swept keys "
        f"{summary.swept_keys}, baseline {summary.baseline!r}, verdicts "
        + ", ".join(f"{v} x{verdicts.count(v)}" for v in sorted(set(verdicts)))
    )
    print("\n-- results --")
    print(f"{'build_sweep_report, first call (cold)':<36} {cold:6.3f} s")
    print(line("build_sweep_report, warm", warm))
    print(line("build_report per job", per_job))
    print(
        f"{'build_report, all jobs':<36} {sum(per_job):6.3f} s (first job {per_job[0]:.3f} s, "
        "cold imports included)"
    )
    print(
        f"sweep report: cold {cold:.2f} s, warm median {statistics.median(warm):.2f} s; target "
        f"< {TARGET_SWEEP_S:.0f} s: cold {C.verdict_mark(cold < TARGET_SWEEP_S)}, warm "
        f"{C.verdict_mark(statistics.median(warm) < TARGET_SWEEP_S)}"
    )
    if not args.sweep_dir:
        C.cleanup(work, args.keep)
    C.footer(t_start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
