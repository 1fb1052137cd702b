"""Benchmark: afbench's own wall-time overhead per run.

Runs ``python -m afbench`` on experiments whose worker does almost nothing (the command engine
running bench/workers/trivial_steps.py, which prints valid step lines) and the same executable
alone, the same number of times, interleaved (exe, afbench, exe, afbench ...), and reports:

* a 1-run experiment: afbench invocation wall minus the executable's wall;
* an sft_af_compare-shaped experiment (2 variants x train/profile phases = 4 runs): invocation
  wall minus 4 executable walls, per run, and as a share of a default sft_af_compare wall time;
* where the time goes (``python -X importtime``, cProfile of afbench's functions).

Target: < 1 s of overhead per run and < 2% of sft_af_compare's wall time.

    .venv/bin/python bench/overhead.py [--rounds 5] [--sft-dir OUT | --sft-wall-s S | --measure-sft]
"""

from __future__ import annotations

import argparse
import pstats
import statistics
import subprocess
import sys
import time
from pathlib import Path

import _common as C

TRIVIAL = C.WORKERS / "trivial_steps.py"
TARGET_PER_RUN_S = 1.0
TARGET_SHARE = 0.02


def recipes(work: Path, steps: int) -> Path:
    """Two recipes: ``bench_overhead_1`` (one run) and ``bench_overhead_4`` (the shape of
    sft_af_compare: baseline + one variant, a train phase and a profile phase)."""
    engine = C.command_engine(TRIVIAL, "{steps}")
    train = {"scheduler": {"steps": steps, "measure": {"first_step": 6, "last_step": steps}}}
    profile = {"scheduler": {"steps": steps + 2, "measure": {"first_step": 6, "last_step": steps}},
               "optimization": {"profiler": True,
                                "profiler_window": {"first_step": 6, "last_step": steps}}}
    C.write_recipe(work, "bench_overhead_1", {"a": {}}, {"train": train}, extra=engine)
    return C.write_recipe(work, "bench_overhead_4", {"a": {}, "b": {}},
                          {"train": train, "profile": profile}, extra=engine)


def time_exe(args: list[str]) -> float:
    """Wall seconds of the trivial executable alone (output piped, as the command engine does)."""
    t0 = time.perf_counter()
    subprocess.run([C.PYTHON, str(TRIVIAL), *args], capture_output=True, check=True)
    return time.perf_counter() - t0


def stats_line(name: str, values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else float("nan")
    return (f"{name:<48} median {C.median(values):7.3f} s  mean {C.mean(values):7.3f}  "
            f"sd {sd:6.3f}  min {min(values):7.3f}  max {max(values):7.3f}  (n={len(values)})")


def sft_wall(args: argparse.Namespace, work: Path) -> tuple[float | None, str]:
    """sft_af_compare's wall time (seconds, device-lock waits excluded) and where it came from."""
    if args.sft_wall_s:
        return args.sft_wall_s, "given with --sft-wall-s"
    if args.measure_sft:
        print(C.load_line("load before sft_af_compare"), flush=True)
        sft_cwd = work / "sft"
        sft_cwd.mkdir(exist_ok=True)
        wall, wait, out = C.run_afbench_out(sft_cwd, None, "experiment=sft_af_compare")
        walls = C.run_walls(out)
        print(C.load_line("load after sft_af_compare"))
        print(f"sft_af_compare measured: invocation {wall + wait:.1f} s, of which {wait:.1f} s "
              f"waiting for the device lock -> {wall:.1f} s; its runs "
              + ", ".join(f"{k} {v:.1f} s" for k, v in walls.items()))
        return wall, "measured now (--measure-sft), whole invocation less device-lock waits"
    if args.sft_dir:
        walls = C.run_walls(Path(args.sft_dir))
        if not walls:
            raise SystemExit(f"--sft-dir {args.sft_dir}: no runs/*/status.json")
        print("sft_af_compare runs (status.json wall_s): "
              + ", ".join(f"{k} {v:.1f} s" for k, v in walls.items()))
        return sum(walls.values()), (f"sum of status.json wall_s in {args.sft_dir} (runs only: "
                                     "a lower bound of the invocation, so the share is an upper bound)")
    return None, "not given (use --sft-dir, --sft-wall-s or --measure-sft)"


def import_costs(stderr: str, top: int = 10) -> list[tuple[float, str]]:
    """(cumulative seconds, module) of the top-level imports in ``-X importtime`` output."""
    rows = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        _, cum, name = line[len("import time:"):].split("|", 2)
        if name.startswith(" ") and not name.startswith("  "):  # nesting level 0
            rows.append((int(cum) / 1e6, name.strip()))
    return sorted(rows, reverse=True)[:top]


def package_self_times(stderr: str, top: int = 10) -> list[tuple[float, str]]:
    """(seconds, top-level package): the sum of the self import times of every module of that
    package in ``-X importtime`` output (robust to lazy sub-imports, unlike one cumulative row)."""
    totals: dict[str, float] = {}
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, _, name = line[len("import time:"):].split("|", 2)
        root = name.strip().split(".")[0]
        totals[root] = totals.get(root, 0.0) + int(self_us) / 1e6
    return sorted(((v, k) for k, v in totals.items()), reverse=True)[:top]


def profile(work: Path, recipes_dir: Path) -> None:
    """Where the time of a 1-run invocation goes."""
    print("\n-- profile of a 1-run invocation (python -X importtime; cProfile) --")
    print(C.load_line("load"))
    bare = [time_python(["-c", "pass"]) for _ in range(3)]
    print(f"bare interpreter start (python -c pass): {min(bare):.3f} s")
    before = set(C.output_dirs(work))
    wall, proc = C.run_afbench(work, recipes_dir, "experiment=bench_overhead_1",
                               python_flags=("-X", "importtime"))
    wall -= sum(C.lock_wait_s(d) for d in C.output_dirs(work) if d not in before)
    total = sum(int(l.split("|")[0][len("import time:"):]) for l in proc.stderr.splitlines()
                if l.startswith("import time:") and "self [us]" not in l) / 1e6
    print(f"main process: wall {wall:.2f} s with -X importtime, of which imports {total:.2f} s (device-lock waits excluded)")
    print("top-level imports of the main process (cumulative s):")
    for sec, name in import_costs(proc.stderr):
        print(f"  {sec:6.3f}  {name}")
    print("import time by top-level package (sum of self times, s):")
    for sec, name in package_self_times(proc.stderr):
        print(f"  {sec:6.3f}  {name}")

    prof = work / "afbench.prof"
    C.run_afbench(work, recipes_dir, "experiment=bench_overhead_1",
                  python_flags=("-m", "cProfile", "-o", str(prof)))
    st = pstats.Stats(str(prof))
    rows = []
    for (filename, line, func), (_cc, _nc, _tt, ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
        if "/afbench/" in filename and "/bench/" not in filename:
            rows.append((ct, f"{filename.split('/afbench/', 1)[1]}:{line}({func})"))
    print(f"cProfile, afbench functions by cumulative time (total {st.total_tt:.2f} s under "  # type: ignore[attr-defined]
          "cProfile, which inflates Python-heavy code: read the shares):")
    for ct, name in sorted(rows, reverse=True)[:16]:
        print(f"  {ct:6.2f}  {name}")

    w = subprocess.run([C.PYTHON, "-X", "importtime", "-c",
                        "import afbench.worker, afbench.engines.command"],
                       capture_output=True, text=True, check=True)
    wt = sum(int(l.split("|")[0][len("import time:"):]) for l in w.stderr.splitlines()
             if l.startswith("import time:") and "self [us]" not in l) / 1e6
    print(f"worker process imports (afbench.worker + engines.command): {wt:.3f} s; top:")
    for sec, name in import_costs(w.stderr, 6):
        print(f"  {sec:6.3f}  {name}")


def time_python(args: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([C.PYTHON, *args], capture_output=True, check=True)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="invocations of each kind (default 5)")
    ap.add_argument("--steps", type=int, default=10, help="step lines per train run (default 10)")
    ap.add_argument("--sft-wall-s", type=float, help="sft_af_compare wall time in seconds")
    ap.add_argument("--sft-dir", help="an sft_af_compare output dir: sum its runs' status.json wall_s")
    ap.add_argument("--measure-sft", action="store_true", help="run sft_af_compare now and time it")
    ap.add_argument("--no-profile", action="store_true", help="skip the profile section")
    ap.add_argument("--keep", help="work in this folder and keep it (default: a temp folder, removed)")
    args = ap.parse_args(argv)

    t_start = time.perf_counter()
    C.header("bench/overhead.py", argv)
    work = C.scratch_dir(args.keep, "afbench-overhead-")
    recipes_dir = recipes(work, args.steps)
    exe1_args = [str(args.steps)]
    exe4_args = [[str(args.steps)]] * 2 + [[str(args.steps + 2)]] * 2

    # one untimed invocation first: the first run writes .pyc files and warms the page cache
    C.run_afbench(work, recipes_dir, "experiment=bench_overhead_1")
    exe1, af1, exe4, af4, worker_walls, waits = [], [], [], [], [], []
    for _ in range(args.rounds):
        exe1.append(time_exe(exe1_args))
        wall, wait, out = C.run_afbench_out(work, recipes_dir, "experiment=bench_overhead_1")
        af1.append(wall)
        waits.append(wait)
        worker_walls += C.run_walls(out).values()
        exe4.append(sum(time_exe(a) for a in exe4_args))
        wall, wait, out = C.run_afbench_out(work, recipes_dir, "experiment=bench_overhead_4")
        af4.append(wall)
        waits.append(wait)
        worker_walls += C.run_walls(out).values()
    print(C.load_line("load after timed rounds"))
    print(f"device-lock waits (another afbench run held /tmp/afbench-cpu.lock), excluded from "
          f"the walls below: {sum(waits):.1f} s over {sum(w > 0 for w in waits)} of "
          f"{len(waits)} invocations")

    over1 = [a - e for a, e in zip(af1, exe1)]
    over4 = [(a - e) / 4 for a, e in zip(af4, exe4)]
    med = C.median
    marginal = (med(af4) - med(af1) - (med(exe4) - med(exe1))) / 3
    print("\n-- wall times --")
    print(stats_line("executable alone, 1 run", exe1))
    print(stats_line("python -m afbench, 1-run experiment", af1))
    print(stats_line("executable alone, 4 runs (sum)", exe4))
    print(stats_line("python -m afbench, 4 runs (sft_af_compare shape)", af4))
    print(stats_line("worker process per run (status.json wall_s)", worker_walls))
    print("\n-- afbench overhead (medians below) --")
    print(stats_line("1-run experiment, whole invocation", over1))
    print(stats_line("4-run experiment, per run", over4))
    print(f"marginal cost of one more run (worker process + bookkeeping): {marginal:.3f} s")
    print(f"worker process overhead per run (worker wall - executable): "
          f"{med(worker_walls) - med(exe1):.3f} s")
    print(f"fixed cost per invocation (1-run overhead - marginal): {med(over1) - marginal:.3f} s")

    sft_s, source = sft_wall(args, work)
    total4 = med(af4) - med(exe4)
    print("\n-- results --")
    met_run = med(over4) < TARGET_PER_RUN_S and med(over1) < TARGET_PER_RUN_S
    print(f"overhead per run: {med(over4):.2f} s amortised over a 4-run experiment, "
          f"{med(over1):.2f} s for a 1-run experiment; target < {TARGET_PER_RUN_S:.0f} s: "
          f"{C.verdict_mark(met_run)}")
    if sft_s:
        share = total4 / sft_s
        print(f"sft_af_compare wall: {sft_s:.1f} s ({source})")
        print(f"afbench overhead of a 4-run experiment: {total4:.2f} s = {share:.2%} of "
              f"sft_af_compare; target < {TARGET_SHARE:.0%}: {C.verdict_mark(share < TARGET_SHARE)}")
    else:
        print(f"share of sft_af_compare: n/a, sft_af_compare wall time {source}")
    if not args.no_profile:
        profile(work, recipes_dir)
    C.cleanup(work, args.keep)
    C.footer(t_start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
