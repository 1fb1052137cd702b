"""Benchmark: does afbench's verdict hold up against real measurement noise?

K trials of one experiment through the real pipeline (``python -m afbench`` with a recipe from
a scratch AFBENCH_RECIPE_PATH, verdicts read from summary.json). Each trial is one experiment
whose variants share its baseline runs; the command engine runs bench/workers/matmul_steps.py
(numpy matmuls, ~20-50 ms/step; the noise is the machine's own):

* ``a``: the baseline;
* ``a_copy``: identical to ``a`` (A/A): a FASTER or SLOWER verdict is a false positive.
  Target: <= 5% of trials.
* ``slow2``, ``slow5``, ``slow10``: ``a`` with 2%, 5%, 10% more matmuls per step
  (AFBENCH_BENCH_WORK=1.02/1.05/1.10): detected when the verdict is ``<VARIANT>_SLOWER``.
  Targets: 5% detected >= 95%, 2% detected >= 50%.

Modes: ``--rounds 3`` (fixed rounds, today's default for a measured comparison) and
``--rounds auto`` (the sequential rule, verdict.max_rounds default 8). Printed per mode:
the A/A false-positive rate, the detection rate per effect, the mean pairs used per
comparison, and the wall time per trial (device-lock waits excluded). Wall time per decided
comparison of auto should be no more than 2x that of ``--rounds 3``.

``--sft``: the planted case through the builtin SFT engine instead (the shipped tiny model):
``a``, ``a_copy`` and ``seq5`` (``scheduler.seq_len`` about 5% larger); the true effect of
seq5 is stated as measured (the mean gain over the trials), since it is not exactly 5%.

    .venv/bin/python bench/noise.py [--trials 20] [--rounds 3|auto] [--steps 20] [--sft]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import _common as C
from afbench.store import Comparison, read_summary

WORKER = C.WORKERS / "matmul_steps.py"
EFFECTS = {"slow2": 0.02, "slow5": 0.05, "slow10": 0.10}
TARGET_FALSE_POSITIVE = 0.05
TARGET_DETECTED = {"slow5": 0.95, "slow2": 0.50}
SFT_SEQ_LEN = 128


def write_recipe(work: Path, args: argparse.Namespace) -> Path:
    train: dict = {
        "scheduler": {
            "steps": args.steps,
            "measure": {"first_step": args.first_step, "last_step": args.steps},
        }
    }
    if args.sft:
        longer = round(SFT_SEQ_LEN * 1.05)
        variants = {"a": {}, "a_copy": {}, "seq5": {"scheduler.seq_len": longer}}
        extra = {
            "scheduler": {"seq_len": SFT_SEQ_LEN, "global_batch_size": 4, "micro_batch_size": 4}
        }
    else:
        extra = C.command_engine(WORKER, "{steps}", str(args.iters))
        variants = {"a": {}, "a_copy": {}}
        variants.update(
            {
                name: {"engine": {"env": {"AFBENCH_BENCH_WORK": f"{1 + e:g}"}}}
                for name, e in EFFECTS.items()
            }
        )
    rounds = args.rounds if args.rounds == "auto" else int(args.rounds)
    return C.write_recipe(
        work, "bench_noise", variants, {"train": train}, rounds=rounds, extra=extra
    )


def fmt(c: Comparison) -> str:
    sp = c.speed
    if sp.gain_pct is None or sp.ci_low_pct is None:
        return f"{c.verdict}"
    return (
        f"{c.verdict:<15} {sp.gain_pct:+6.2f}% [{sp.ci_low_pct:+6.2f}, "
        f"{sp.ci_high_pct:+6.2f}] n={sp.n_pairs}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=20, help="K, experiments run (default 20)")
    ap.add_argument("--rounds", default="3", help="verdict.rounds: >= 2 or auto (default 3)")
    ap.add_argument(
        "--max-rounds",
        type=int,
        default=8,
        help="verdict.max_rounds for --rounds auto (default 8, afbench's)",
    )
    ap.add_argument("--steps", type=int, default=20, help="steps per run (default 20)")
    ap.add_argument("--first-step", type=int, default=3, help="first measured step (default 3)")
    ap.add_argument("--iters", type=int, default=150, help="matmuls per step (default 150)")
    ap.add_argument(
        "--sft", action="store_true", help="builtin SFT engine, tiny model, seq_len +5%%"
    )
    ap.add_argument(
        "--keep", help="work in this folder and keep it (default: a temp folder, removed)"
    )
    args = ap.parse_args(argv)
    if args.rounds != "auto" and (not args.rounds.isdigit() or int(args.rounds) < 2):
        ap.error("--rounds must be an integer >= 2 or 'auto'")

    t_start = time.perf_counter()
    C.header("bench/noise.py", argv)
    planted = ["seq5"] if args.sft else list(EFFECTS)
    print(
        f"K={args.trials} trials, variants a, a_copy, {', '.join(planted)}; rounds "
        f"{args.rounds}{f' (max {args.max_rounds})' if args.rounds == 'auto' else ''}, "
        f"{args.steps} steps/run (measured {args.first_step}..{args.steps}); "
        + ("builtin SFT, qwen3_tiny" if args.sft else f"{args.iters} matmuls 128x128/step")
        + "; confidence 0.95, min_gain_pct 2 (afbench defaults)"
    )
    work = C.scratch_dir(args.keep, "afbench-noise-")
    recipes = write_recipe(work, args)
    extra = [f"verdict.max_rounds={args.max_rounds}"] if args.rounds == "auto" else []

    false_pos = 0
    hits = {v: 0 for v in planted}
    gains: dict[str, list[float]] = {v: [] for v in ["a_copy", *planted]}
    pairs: list[int] = []
    decided = 0  # comparisons whose verdict is not INCONCLUSIVE (FASTER, SLOWER or NO_GAIN)
    walls, waits = [], []
    for k in range(1, args.trials + 1):
        wall, wait, out = C.run_afbench_out(work, recipes, "experiment=bench_noise", *extra)
        walls.append(wall)
        waits.append(wait)
        comp = {c.variant.name: c for c in read_summary(out / "summary.json").comparisons}
        aa = comp["a_copy"]
        false_pos += aa.verdict.endswith(("_FASTER", "_SLOWER"))
        for name, c in comp.items():
            if c.speed.gain_pct is not None:
                gains[name].append(c.speed.gain_pct)
            if c.speed.n_pairs:
                pairs.append(c.speed.n_pairs)
            decided += c.verdict != "INCONCLUSIVE"
        for v in planted:
            hits[v] += comp[v].verdict.endswith("_SLOWER")
        print(
            f"trial {k:2d}: A/A {fmt(aa)} | "
            + " | ".join(f"{v} {fmt(comp[v])}" for v in planted)
            + f" | {wall:.1f} s"
            + (f" (+{wait:.0f} s lock wait)" if wait else "")
            + f" | {C.load_line('')[2:]}",
            flush=True,
        )

    n = args.trials
    print(f"\n-- results (rounds {args.rounds}) --")
    print(
        f"A/A false positives (FASTER or SLOWER): {false_pos}/{n} = {false_pos / n:.1%}; "
        f"target <= {TARGET_FALSE_POSITIVE:.0%}: "
        f"{C.verdict_mark(false_pos / n <= TARGET_FALSE_POSITIVE)}"
    )
    for v in planted:
        target = TARGET_DETECTED.get(v)
        mark = (
            f"; target >= {target:.0%}: {C.verdict_mark(hits[v] / n >= target)}"
            if target is not None
            else ""
        )
        print(
            f"{v} detected (SLOWER): {hits[v]}/{n} = {hits[v] / n:.1%}; measured gain mean "
            f"{C.mean(gains[v]):+.2f}%{mark}"
        )
    print(
        f"A/A measured gain: mean {C.mean(gains['a_copy']):+.2f}%, sd "
        f"{statistics.stdev(gains['a_copy']) if len(gains['a_copy']) > 1 else float('nan'):.2f}%"
    )
    print(f"mean pairs used per comparison: {C.mean(pairs):.2f} ({len(pairs)} comparisons)")
    print(
        f"wall time per trial: mean {C.mean(walls):.1f} s, median {C.median(walls):.1f} s "
        f"({1 + len(planted)} comparisons per trial), device-lock waits excluded "
        f"({sum(waits):.0f} s in {sum(w > 0 for w in waits)} trials)"
    )
    print(
        f"decided comparisons (not INCONCLUSIVE): {decided}/{len(pairs)}; wall time per decided "
        f"comparison: {sum(walls) / decided if decided else float('inf'):.1f} s"
    )
    C.cleanup(work, args.keep)
    C.footer(t_start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
