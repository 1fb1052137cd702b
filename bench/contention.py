"""Benchmark: what does afbench's contention record show when the machine is shared, and
where is the line between a quiet and a contended run?

K trials; each trial runs one afbench experiment (``python -m afbench``, command engine,
bench/workers/matmul_steps.py: numpy matmuls, one BLAS thread, ``OMP_NUM_THREADS=1`` so the
record knows the threads asked) per condition, in turn:

* ``quiet``: nothing started beside it (the machine's own load stays: say so);
* ``busy1`` / ``busy2``: 1 or 2 busy loops (``python -c "while True: pass"``) started by this
  script beside the experiment, stopped after it;
* ``own2``: 2 busy loops started by the command itself (AFBENCH_BENCH_BUSY=2), as the issue
  planted it: they are in the command's process tree, so its CPU/wall counts them.

Per run it prints the measured window's record (result.json ``contention``:
afbench.analysis.contention) and the median step time; per condition the spread over the
trials and the slowdown against the quiet median. The thresholds in
afbench.analysis.contention are chosen from these tables (bench/README.md "Contention").
``experiment.rerun_contended=0``: every run is measured as it ran.

    .venv/bin/python bench/contention.py [--trials 5] [--steps 20] [--conditions quiet,busy2]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import _common as C
from afbench.analysis.contention import judge
from afbench.collect import collect
from afbench.messages import say

WORKER = C.WORKERS / "matmul_steps.py"
STEP_CPU = re.compile(r"step:\s*(\d+).*elapsed_time_per_step: ([0-9.]+)s.*cpu_s: ([0-9.]+)")
CONDITIONS = {"quiet": (0, 0), "busy1": (1, 0), "busy2": (2, 0), "own2": (0, 2)}
MEASURES = (
    "run_queue_wait_pct",
    "cpu_pressure_pct",
    "steal_pct",
    "cpu_per_wall",
    "cpu_of_threads_pct",
    "involuntary_switches_per_s",
    "load_avg_1m",
    "procs_running",
)


def write_recipe(work: Path, args: argparse.Namespace) -> Path:
    train = {
        "scheduler": {
            "steps": args.steps,
            "measure": {"first_step": args.first_step, "last_step": args.steps},
        }
    }
    extra = C.command_engine(WORKER, "{steps}", str(args.iters), env={"OMP_NUM_THREADS": "1"})
    variants = {
        name: {"engine": {"env": {"AFBENCH_BENCH_BUSY": str(own)}}}
        for name, (_, own) in CONDITIONS.items()
    }
    recipes = {}
    for name, over in variants.items():
        recipes[name] = C.write_recipe(
            work, f"bench_cont_{name}", {name: over}, {"train": train}, extra=extra
        )
    return next(iter(recipes.values()))


def wall_over_cpu(log: Path, first_step: int) -> float | None:
    """Sum of the window's step wall times over the sum of their CPU times (the worker's
    ``cpu_s``): 1.0 = the step never waited for a CPU; 1.5 = it took 1.5x its CPU time."""
    wall = cpu = 0.0
    for m in STEP_CPU.finditer(log.read_text(errors="replace")):
        if int(m.group(1)) >= first_step:
            wall, cpu = wall + float(m.group(2)), cpu + float(m.group(3))
    return wall / cpu if cpu else None


def busy_loops(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.kill()
        p.wait()


def fmt(x: float | None, spec: str) -> str:
    return "n/a" if x is None else format(x, spec)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=5, help="K, runs per condition (default 5)")
    ap.add_argument("--steps", type=int, default=20, help="steps per run (default 20)")
    ap.add_argument("--first-step", type=int, default=3, help="first measured step (default 3)")
    ap.add_argument("--iters", type=int, default=150, help="matmuls per step (default 150)")
    ap.add_argument(
        "--conditions",
        default=",".join(CONDITIONS),
        help=f"comma-separated subset of {', '.join(CONDITIONS)} (default: all)",
    )
    ap.add_argument("--keep", help="work in this folder and keep it (default: a temp folder)")
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    C.header("bench/contention.py", argv)
    work = C.scratch_dir(args.keep, "afbench-contention-")
    recipes = write_recipe(work, args)
    chosen = [c for c in args.conditions.split(",") if c]
    if not chosen or not set(chosen) <= set(CONDITIONS):
        ap.error(f"--conditions: choose among {', '.join(CONDITIONS)}")
    rows: dict[str, list[dict]] = {name: [] for name in chosen}
    for k in range(1, args.trials + 1):
        for name in chosen:
            beside = CONDITIONS[name][0]
            loops = busy_loops(beside)
            try:
                time.sleep(0.3 if beside else 0)  # let the loops reach the CPUs
                _, _, out = C.run_afbench_out(
                    work, recipes, f"experiment=bench_cont_{name}", "experiment.rerun_contended=0"
                )
            finally:
                stop(loops)
            col = collect(out)
            rid = col.plan.runs[0].run_id
            rec = col.results[rid].contention
            steps = col.window_steps.get(rid, [])
            slow = wall_over_cpu(out / "runs" / rid / "stdout.log", args.first_step)
            contended, codes = judge(rec)
            reasons = [say(code, **values).text for code, values in codes]
            row = {
                "median_step_s": statistics.median(steps) if steps else None,
                "wall_over_cpu": slow,
                "contended": contended,
                "reasons": reasons,
                **{m: getattr(rec, m, None) for m in MEASURES},
            }
            rows[name].append(row)
            print(
                f"trial {k} {name:<6} step {fmt(row['median_step_s'], '.4f')} s | wall/CPU "
                f"{fmt(slow, '.2f')} | wait "
                f"{fmt(row['run_queue_wait_pct'], '5.1f')}% | PSI some "
                f"{fmt(row['cpu_pressure_pct'], '5.1f')}% | steal {fmt(row['steal_pct'], '.1f')}% "
                f"| CPU/wall {fmt(row['cpu_per_wall'], '.2f')} "
                f"({fmt(row['cpu_of_threads_pct'], '.0f')}% of 1 thread) | nivcsw/s "
                f"{fmt(row['involuntary_switches_per_s'], '.0f')} | load "
                f"{fmt(row['load_avg_1m'], '.2f')} | running {row['procs_running']} | "
                f"{'CONTENDED: ' + '; '.join(reasons) if contended else 'quiet'}",
                flush=True,
            )
    quiet = statistics.median(r["median_step_s"] for r in rows[chosen[0]] if r["median_step_s"])
    print(
        f"\n| condition | runs | median step (s) | slowdown vs {chosen[0]} | wall/CPU "
        "(min-max) | run-queue wait % (min-max) | CPU pressure % (min-max) | steal % (max) | CPU/wall (min-max) | "
        "nivcsw/s (median) | judged contended |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, rs in rows.items():

        def col_of(m: str) -> list[float]:
            return [r[m] for r in rs if r[m] is not None]

        med = statistics.median(col_of("median_step_s"))
        psi, cpu = col_of("cpu_pressure_pct"), col_of("cpu_per_wall")
        wait = col_of("run_queue_wait_pct")
        ratio = col_of("wall_over_cpu")
        switches = col_of("involuntary_switches_per_s")
        print(
            f"| {name} | {len(rs)} | {med:.4f} | x{med / quiet:.2f} | "
            f"{fmt(min(ratio, default=None), '.2f')}-{fmt(max(ratio, default=None), '.2f')} | "
            f"{fmt(min(wait, default=None), '.1f')}-{fmt(max(wait, default=None), '.1f')} | "
            f"{fmt(min(psi, default=None), '.1f')}-{fmt(max(psi, default=None), '.1f')} | "
            f"{fmt(max(col_of('steal_pct'), default=None), '.1f')} | "
            f"{fmt(min(cpu, default=None), '.2f')}-{fmt(max(cpu, default=None), '.2f')} | "
            f"{fmt(statistics.median(switches) if switches else None, '.0f')} | "
            f"{sum(bool(r['contended']) for r in rs)}/{len(rs)} |"
        )
    C.cleanup(work, args.keep)
    C.footer(t_start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
