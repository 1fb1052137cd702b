"""Benchmark: does afbench's verdict hold up against real measurement noise?

K trials of one experiment through the real pipeline (``python -m afbench`` with a recipe from
a scratch AFBENCH_RECIPE_PATH, verdicts read from summary.json). Each trial has three variants
of the command engine running bench/workers/matmul_steps.py (numpy matmuls, ~20-50 ms/step):

* ``a``: the baseline;
* ``a_copy``: identical to ``a`` (the A/A comparison): a ``A_COPY_FASTER`` verdict is a false
  positive. Target: <= 5% of trials.
* ``slow``: ``a`` with 5% more matmuls per step (AFBENCH_BENCH_WORK=1.05): detected when the
  gain's confidence interval lies wholly below zero (baseline faster). Target: >= 95% of trials.

Both comparisons of a trial share its baseline runs (one experiment per trial halves the wall
time); trials are independent. Also reported: the coefficient of variation (CV) of step times
within a run and of run means across repeats (what the interval sees).

    .venv/bin/python bench/noise.py [--trials 20] [--repeats 3] [--steps 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import _common as C
import pandas as pd

from afbench.results import Comparison, read_summary

WORKER = C.WORKERS / "matmul_steps.py"
TARGET_FALSE_FASTER = 0.05
TARGET_DETECTED = 0.95


def write_recipe(work: Path, args: argparse.Namespace) -> Path:
    engine = C.command_engine(WORKER, "{steps}", str(args.iters))
    slow = {"engine": {"env": {"AFBENCH_BENCH_WORK": f"{1 + args.slowdown:g}"}}}
    train = {"scheduler": {"steps": args.steps,
                           "measure": {"first_step": args.first_step, "last_step": args.steps}}}
    return C.write_recipe(work, "bench_noise", {"a": {}, "a_copy": {}, "slow": slow},
                          {"train": train}, repeats=args.repeats, extra=engine)


def step_cvs(out_dir: Path, first_step: int) -> tuple[list[float], dict[str, list[float]]]:
    """(CV of step times within each run, run means per variant) over the measured steps."""
    steps = pd.read_parquet(out_dir / "results" / "steps.parquet")
    steps = steps[steps.step >= first_step]
    within, means = [], {}
    for run_id, grp in steps.groupby("run_id"):
        t = grp.step_time_s.astype(float)
        within.append(float(t.std(ddof=1) / t.mean()))
        means.setdefault(str(run_id).split("-")[0], []).append(float(t.mean()))
    return within, means


def detectable_effect(cv: float, repeats: int, level: float = 0.95, power: float = 0.95) -> float:
    """Smallest relative slowdown the Welch interval finds with ``power``, for run means with
    coefficient of variation ``cv`` and ``repeats`` runs per side (equal variances, df 2(n-1))."""
    from scipy import stats

    df = 2 * (repeats - 1)
    se = cv * (2 / repeats) ** 0.5
    return float((stats.t.ppf(1 - (1 - level) / 2, df) + stats.t.ppf(power, df)) * se)


def fmt_ci(c: Comparison) -> str:
    if c.speed.gain_pct is None:
        return c.verdict
    return (f"{c.verdict:<14} gain {c.speed.gain_pct:+6.2f}% "
            f"[{c.speed.ci_low:+6.2f}%, {c.speed.ci_high:+6.2f}%]")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=20, help="K, experiments run (default 20)")
    ap.add_argument("--repeats", type=int, default=3, help="experiment.repeats (>= 3; default 3)")
    ap.add_argument("--steps", type=int, default=20, help="steps per run (default 20)")
    ap.add_argument("--first-step", type=int, default=3, help="first measured step (default 3)")
    ap.add_argument("--iters", type=int, default=150, help="matmuls per step (default 150)")
    ap.add_argument("--slowdown", type=float, default=0.05, help="planted extra work (default 0.05)")
    ap.add_argument("--keep", help="work in this folder and keep it (default: a temp folder, removed)")
    args = ap.parse_args(argv)
    if args.repeats < 3:
        ap.error("--repeats must be >= 3")

    t_start = time.perf_counter()
    C.header("bench/noise.py", argv)
    print(f"K={args.trials} trials x 3 variants x {args.repeats} repeats, {args.steps} steps/run "
          f"(measured {args.first_step}..{args.steps}), {args.iters} matmuls 128x128/step, "
          f"planted slowdown {args.slowdown:.0%}, confidence 0.95 (afbench default)")
    work = C.scratch_dir(args.keep, "afbench-noise-")
    recipes = write_recipe(work, args)

    false_faster = aa_slower = detected = 0
    within_all, between_all, walls, waits, planted_gains = [], [], [], [], []
    for k in range(1, args.trials + 1):
        wall, wait, out = C.run_afbench_out(work, recipes, "experiment=bench_noise")
        walls.append(wall)
        waits.append(wait)
        summary = read_summary(out / "summary.json")
        comp = {c.variant.name: c for c in summary.comparisons}
        aa, slow = comp["a_copy"], comp["slow"]
        if aa.verdict.endswith("_FASTER"):
            false_faster += 1
        if aa.speed.ci_high is not None and aa.speed.ci_high < 0:
            aa_slower += 1
        hit = slow.speed.ci_high is not None and slow.speed.ci_high < 0
        detected += hit
        if slow.speed.gain_pct is not None:
            planted_gains.append(slow.speed.gain_pct)
        within, means = step_cvs(out, args.first_step)
        within_all += within
        between_all += [statistics.stdev(v) / statistics.mean(v) for v in means.values() if len(v) > 1]
        print(f"trial {k:2d}: A/A {fmt_ci(aa)} | planted {fmt_ci(slow)}"
              f" {'detected' if hit else 'MISSED'} | {wall:.1f} s"
              + (f" (+{wait:.0f} s lock wait)" if wait else "") + f" | {C.load_line('')[2:]}",
              flush=True)

    n = args.trials
    print("\n-- results --")
    print(f"step-time CV within a run (measured steps): mean {C.mean(within_all):.2%}, "
          f"median {statistics.median(within_all):.2%}, max {max(within_all):.2%} "
          f"({len(within_all)} runs)")
    print(f"CV of run means across repeats (per variant and trial): mean {C.mean(between_all):.2%}, "
          f"median {statistics.median(between_all):.2%}, max {max(between_all):.2%}")
    cv = statistics.median(between_all)
    mde = detectable_effect(cv, args.repeats)
    need = next((n for n in range(args.repeats, 1000) if detectable_effect(cv, n) <= args.slowdown),
                None)
    print(f"smallest slowdown detectable 95% of the time at this noise (median CV of run means, "
          f"{args.repeats} repeats): {mde:.1%}; repeats needed for {args.slowdown:.0%}: {need}")
    print(f"planted slowdown measured as gain: mean {C.mean(planted_gains):+.2f}% "
          f"(expected about {-args.slowdown:.0%} of step time)")
    print(f"A/A wrongly FASTER: {false_faster}/{n} = {false_faster / n:.1%}; target <= "
          f"{TARGET_FALSE_FASTER:.0%}: {C.verdict_mark(false_faster / n <= TARGET_FALSE_FASTER)}"
          f"  (A/A interval wholly below 0, 'slower': {aa_slower}/{n})")
    print(f"planted {args.slowdown:.0%} slowdown detected (interval below 0): {detected}/{n} = "
          f"{detected / n:.1%}; target >= {TARGET_DETECTED:.0%}: "
          f"{C.verdict_mark(detected / n >= TARGET_DETECTED)}")
    print(f"afbench invocation wall: mean {C.mean(walls):.1f} s per trial, device-lock waits "
          f"excluded ({sum(waits):.0f} s in {sum(w > 0 for w in waits)} trials: other afbench runs "
          "held the machine's cpu lock)")
    C.cleanup(work, args.keep)
    C.footer(t_start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
