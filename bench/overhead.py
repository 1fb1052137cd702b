"""Benchmark: afbench's own wall-time overhead per run.

Runs ``python -m afbench`` on experiments whose worker does almost nothing (the command engine
running bench/workers/trivial_steps.py, which prints valid step lines) and the same executable
alone, the same number of times, interleaved (exe, afbench, exe, afbench ...), and reports:

* a 1-run experiment: afbench invocation wall minus the executable's wall;
* an sft_af_compare-shaped experiment (2 variants x train/profile phases = 4 runs): invocation
  wall minus 4 executable walls, per run, and as a share of a default sft_af_compare wall time;
* a config error (``python -m afbench scheduler.stepz=1``, exit 2) beside ``python -c "import
  hydra"``, the floor any Hydra application pays, interleaved the same way;
* where the time goes (``python -X importtime`` of a run and of ``--cfg job``, cProfile of
  afbench's functions).

Targets: a config error in < 1.5 s and within 1 s of the bare Hydra import; a 1-run experiment
in < 1.8 s (overhead < 1.5 s); the 4-run overhead < 1% of sft_af_compare's wall time.

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
TARGET_ERROR_S = 1.5  # a config error, whole invocation
TARGET_ERROR_OVER_HYDRA_S = 1.0
TARGET_ONE_RUN_S = 1.8  # a 1-run experiment, whole invocation
TARGET_ONE_RUN_OVERHEAD_S = 1.5
TARGET_SHARE = 0.01
CONFIG_ERROR = "scheduler.stepz=1"


def recipes(work: Path, steps: int) -> Path:
    """Two recipes: ``bench_overhead_1`` (one run) and ``bench_overhead_4`` (the shape of
    sft_af_compare: baseline + one variant, a train phase and a profile phase)."""
    engine = C.command_engine(TRIVIAL, "{steps}")
    train = {"scheduler": {"steps": steps, "measure": {"first_step": 6, "last_step": steps}}}
    profile = {
        "scheduler": {"steps": steps + 2, "measure": {"first_step": 6, "last_step": steps}},
        "optimization": {
            "profiler": True,
            "profiler_window": {"first_step": 6, "last_step": steps},
        },
    }
    C.write_recipe(work, "bench_overhead_1", {"a": {}}, {"train": train}, extra=engine)
    return C.write_recipe(
        work,
        "bench_overhead_4",
        {"a": {}, "b": {}},
        {"train": train, "profile": profile},
        extra=engine,
    )


def time_exe(args: list[str]) -> float:
    """Wall seconds of the trivial executable alone (output piped, as the command engine does)."""
    t0 = time.perf_counter()
    subprocess.run([C.PYTHON, str(TRIVIAL), *args], capture_output=True, check=True)
    return time.perf_counter() - t0


def stats_line(name: str, values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else float("nan")
    return (
        f"{name:<48} median {C.median(values):7.3f} s  mean {C.mean(values):7.3f}  "
        f"sd {sd:6.3f}  min {min(values):7.3f}  max {max(values):7.3f}  (n={len(values)})"
    )


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
        print(
            f"sft_af_compare measured: invocation {wall + wait:.1f} s, of which {wait:.1f} s "
            f"waiting for the device lock -> {wall:.1f} s; its runs "
            + ", ".join(f"{k} {v:.1f} s" for k, v in walls.items())
        )
        return wall, "measured now (--measure-sft), whole invocation less device-lock waits"
    if args.sft_dir:
        walls = C.run_walls(Path(args.sft_dir))
        if not walls:
            raise SystemExit(f"--sft-dir {args.sft_dir}: no runs/*/status.json")
        print(
            "sft_af_compare runs (status.json wall_s): "
            + ", ".join(f"{k} {v:.1f} s" for k, v in walls.items())
        )
        return sum(walls.values()), (
            f"sum of status.json wall_s in {args.sft_dir} (runs only: "
            "a lower bound of the invocation, so the share is an upper bound)"
        )
    return None, "not given (use --sft-dir, --sft-wall-s or --measure-sft)"


def import_costs(stderr: str, top: int = 10) -> list[tuple[float, str]]:
    """(cumulative seconds, module) of the top-level imports in ``-X importtime`` output."""
    rows = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        _, cum, name = line[len("import time:") :].split("|", 2)
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
        self_us, _, name = line[len("import time:") :].split("|", 2)
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
    wall, proc = C.run_afbench(
        work, recipes_dir, "experiment=bench_overhead_1", python_flags=("-X", "importtime")
    )
    wall -= sum(C.lock_wait_s(d) for d in C.output_dirs(work) if d not in before)
    total = (
        sum(
            int(ln.split("|")[0][len("import time:") :])
            for ln in proc.stderr.splitlines()
            if ln.startswith("import time:") and "self [us]" not in ln
        )
        / 1e6
    )
    print(
        f"main process: wall {wall:.2f} s with -X importtime, of which imports {total:.2f} s "
        "(device-lock waits excluded)"
    )
    print("top-level imports of the main process (cumulative s):")
    for sec, name in import_costs(proc.stderr):
        print(f"  {sec:6.3f}  {name}")
    print("import time by top-level package (sum of self times, s):")
    for sec, name in package_self_times(proc.stderr):
        print(f"  {sec:6.3f}  {name}")

    prof = work / "afbench.prof"
    C.run_afbench(
        work,
        recipes_dir,
        "experiment=bench_overhead_1",
        python_flags=("-m", "cProfile", "-o", str(prof)),
    )
    st = pstats.Stats(str(prof))
    rows = []
    for (filename, line, func), (_cc, _nc, _tt, ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
        if "/afbench/" in filename and "/bench/" not in filename:
            rows.append((ct, f"{filename.split('/afbench/', 1)[1]}:{line}({func})"))
    print(
        f"cProfile, afbench functions by cumulative time (total {st.total_tt:.2f} s under "  # type: ignore[attr-defined]
        "cProfile, which inflates Python-heavy code: read the shares):"
    )
    for ct, name in sorted(rows, reverse=True)[:16]:
        print(f"  {ct:6.2f}  {name}")

    cfg = subprocess.run(
        [
            C.PYTHON,
            "-X",
            "importtime",
            "-m",
            "afbench",
            "experiment=bench_overhead_1",
            "--cfg",
            "job",
        ],
        cwd=work,
        env=C.afbench_env(recipes_dir),
        capture_output=True,
        text=True,
        check=True,
    )
    print(
        "python -X importtime -m afbench experiment=bench_overhead_1 --cfg job, top-level "
        "imports (cumulative s):"
    )
    for sec, name in import_costs(cfg.stderr, 8):
        print(f"  {sec:6.3f}  {name}")
    print(
        "  by top-level package (self s): "
        + ", ".join(f"{name} {sec:.3f}" for sec, name in package_self_times(cfg.stderr, 8))
    )

    w = subprocess.run(
        [C.PYTHON, "-X", "importtime", "-c", "import afbench.worker, afbench.engines.command"],
        capture_output=True,
        text=True,
        check=True,
    )
    wt = (
        sum(
            int(ln.split("|")[0][len("import time:") :])
            for ln in w.stderr.splitlines()
            if ln.startswith("import time:") and "self [us]" not in ln
        )
        / 1e6
    )
    print(f"worker process imports (afbench.worker + engines.command): {wt:.3f} s; top:")
    for sec, name in import_costs(w.stderr, 6):
        print(f"  {sec:6.3f}  {name}")


def time_python(args: list[str], cwd: Path | None = None, expect: int = 0) -> float:
    """Wall seconds of ``python <args>``; raises RuntimeError unless it exits ``expect``."""
    t0 = time.perf_counter()
    proc = subprocess.run(
        [C.PYTHON, *args], capture_output=True, text=True, cwd=cwd, env=C.afbench_env(None)
    )
    wall = time.perf_counter() - t0
    if proc.returncode != expect:
        raise RuntimeError(
            f"python {' '.join(args)} exited {proc.returncode}, expected {expect}: "
            f"{proc.stderr[-500:]}"
        )
    return wall


def time_config_error(work: Path) -> float:
    """Wall seconds of a config error (unknown key): exit 2, nothing written."""
    return time_python(["-m", "afbench", CONFIG_ERROR], cwd=work, expect=2)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="invocations of each kind (default 5)")
    ap.add_argument("--steps", type=int, default=10, help="step lines per train run (default 10)")
    ap.add_argument("--sft-wall-s", type=float, help="sft_af_compare wall time in seconds")
    ap.add_argument(
        "--sft-dir", help="an sft_af_compare output dir: sum its runs' status.json wall_s"
    )
    ap.add_argument("--measure-sft", action="store_true", help="run sft_af_compare now and time it")
    ap.add_argument("--no-profile", action="store_true", help="skip the profile section")
    ap.add_argument(
        "--keep", help="work in this folder and keep it (default: a temp folder, removed)"
    )
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
    hydra_import, config_error = [], []
    for _ in range(args.rounds):
        hydra_import.append(time_python(["-c", "import hydra"]))
        config_error.append(time_config_error(work))
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
    print(
        f"device-lock waits (another afbench run held /tmp/afbench-cpu.lock), excluded from "
        f"the walls below: {sum(waits):.1f} s over {sum(w > 0 for w in waits)} of "
        f"{len(waits)} invocations"
    )

    over1 = [a - e for a, e in zip(af1, exe1)]
    over4 = [(a - e) / 4 for a, e in zip(af4, exe4)]
    med = C.median
    marginal = (med(af4) - med(af1) - (med(exe4) - med(exe1))) / 3
    print("\n-- wall times --")
    print(stats_line('python -c "import hydra" (the floor)', hydra_import))
    print(stats_line(f"python -m afbench {CONFIG_ERROR} (exit 2)", config_error))
    print(stats_line("executable alone, 1 run", exe1))
    print(stats_line("python -m afbench, 1-run experiment", af1))
    print(stats_line("executable alone, 4 runs (sum)", exe4))
    print(stats_line("python -m afbench, 4 runs (sft_af_compare shape)", af4))
    print(stats_line("worker process per run (status.json wall_s)", worker_walls))
    print("\n-- afbench overhead (medians below) --")
    print(stats_line("1-run experiment, whole invocation", over1))
    print(stats_line("4-run experiment, per run", over4))
    print(f"marginal cost of one more run (worker process + bookkeeping): {marginal:.3f} s")
    print(
        f"worker process overhead per run (worker wall - executable): "
        f"{med(worker_walls) - med(exe1):.3f} s"
    )
    print(f"fixed cost per invocation (1-run overhead - marginal): {med(over1) - marginal:.3f} s")

    sft_s, source = sft_wall(args, work)
    total4 = med(af4) - med(exe4)
    print("\n-- results (medians, side by side) --")
    err, floor = med(config_error), med(hydra_import)
    print(
        f"(a) config error {err:.2f} s vs import hydra {floor:.2f} s: +{err - floor:.2f} s; "
        f"target < {TARGET_ERROR_S} s and within {TARGET_ERROR_OVER_HYDRA_S:.0f} s: "
        f"{C.verdict_mark(err < TARGET_ERROR_S and err - floor < TARGET_ERROR_OVER_HYDRA_S)}"
    )
    one, over_one = med(af1), med(over1)
    print(
        f"(b) 1-run experiment {one:.2f} s (executable alone {med(exe1):.3f} s, overhead "
        f"{over_one:.2f} s); target < {TARGET_ONE_RUN_S} s, overhead < "
        f"{TARGET_ONE_RUN_OVERHEAD_S} s: "
        f"{C.verdict_mark(one < TARGET_ONE_RUN_S and over_one < TARGET_ONE_RUN_OVERHEAD_S)}"
    )
    print(
        f"    4-run experiment {med(af4):.2f} s (executables {med(exe4):.3f} s): overhead "
        f"{total4:.2f} s, {med(over4):.2f} s per run"
    )
    if sft_s:
        share = total4 / sft_s
        print(f"    sft_af_compare wall: {sft_s:.1f} s ({source})")
        print(
            f"    4-run overhead {total4:.2f} s = {share:.2%} of sft_af_compare; target < "
            f"{TARGET_SHARE:.0%}: {C.verdict_mark(share < TARGET_SHARE)}"
        )
    else:
        print(f"    share of sft_af_compare: n/a, sft_af_compare wall time {source}")
    if not args.no_profile:
        profile(work, recipes_dir)
    C.cleanup(work, args.keep)
    C.footer(t_start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
