"""Benchmark: the smallest difference this machine lets any paired design resolve.

One long run of the matmul worker (bench/workers/matmul_steps.py, one process, one BLAS
thread; the noise is the machine's own) records every step time for ``--seconds``. The trace
is then read the way a paired A/A comparison reads runs: a block of ``L`` seconds of steps
(run A's measured window), a gap of ``--gap`` seconds (the next process starting: afbench's
per-run overhead plus the unmeasured warmup steps), a second block of ``L`` seconds (run B),
and the log ratio of the two blocks' medians. Block pairs start every 0.25 s along the trace.

Printed per run length ``L``: ``sigma_d``, the standard deviation of that log ratio (what one
pair contributes to the verdict's interval), and the fewest pairs with which *any* test could
find a planted 2% or 5% slowdown 95% of the time at a two-sided 5% error:

    n >= ((z_0.975 + z_0.95) * sigma_d / ln(1 / (1 - effect)))^2

the sample size of the z test with the variance known (the most powerful test of a normal
shift, Neyman-Pearson; a t test with the variance estimated, trimmed or sequential, needs more).
With it, the wall time those pairs cost (two runs of ``L`` + ``--overhead`` seconds each), beside
what ``verdict.rounds: 3`` and twice that cost, the issue 16 budget. Also the trend of
the trace (medians of consecutive 2-second blocks): whether the spread is process-to-process
or moves within one process.

**Replay.** The same trace then drives afbench's own statistics
(:mod:`afbench.verdict`, the defaults of ``report`` and ``experiment``) for ``--replays`` simulated
comparisons per run window and
effect: runs laid end to end on the trace (window, gap, window, ...) in the counterbalanced
order A B, B A, ..., the variant's step times multiplied by 1 + effect. Four designs: one
round without a calibration (never decides), one round with a host calibration from an A/A
of 12 pairs read elsewhere on the trace, ``verdict.rounds=3`` (the paired t) and ``verdict.rounds=auto``
(the sequential rule, 3..8 pairs). Printed: the share of comparisons called SLOWER (for effect 0,
FASTER or SLOWER: the false-positive rate) and the mean pairs used. Replays start at random
points of one trace, so for long windows they overlap and are not independent: read those
rates as indications; the printed ``independent`` column says how many non-overlapping
comparisons fit.

    .venv/bin/python bench/noise_floor.py [--seconds 360] [--gap 1.5] [--overhead 1.6]
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import time

import numpy as np

import _common as C
from afbench.verdict import (
    AUTO,
    FASTER,
    SLOWER,
    Design,
    SequentialTest,
    compare_runs,
    run_spread_from_pairs,
)
from afbench.verdict.calibration import MIN_CALIBRATION_PAIRS

WORKER = C.WORKERS / "matmul_steps.py"
Z_ALPHA = 1.959964  # z_{0.975}
Z_POWER = 1.644854  # z_{0.95}
RUN_LENGTHS_S = (0.45, 1.0, 2.0, 5.0, 10.0, 20.0)
REPLAY_WINDOWS_S = (0.45, 2.0, 5.0)
REPLAY_EFFECTS = (0.0, 0.02, 0.05, 0.10)


def trace(seconds: float, iters: int) -> np.ndarray:
    """Step times (s) of one matmul_steps.py process running about ``seconds``."""
    probe = subprocess.run(
        [C.PYTHON, str(WORKER), "20", str(iters)], capture_output=True, text=True, check=True
    ).stdout
    per_step = float(np.median(_steps(probe)))
    out = subprocess.run(
        [C.PYTHON, str(WORKER), str(int(seconds / per_step)), str(iters)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return np.array(_steps(out))


def _steps(stdout: str) -> list[float]:
    return [
        float(line.split("elapsed_time_per_step:")[1].split()[0].rstrip("s"))
        for line in stdout.splitlines()
        if "elapsed_time_per_step:" in line
    ]


def pair_log_ratios(
    steps: np.ndarray, run_s: float, gap_s: float, stride_s: float = 0.25
) -> np.ndarray:
    """ln(median(B) / median(A)) for block pairs A (run_s), gap (gap_s), B (run_s) read off the
    trace, one pair starting every ``stride_s`` seconds."""
    t = np.concatenate([[0.0], np.cumsum(steps)])  # step i runs over [t[i], t[i+1])
    out = []
    start = 0.0
    while start + 2 * run_s + gap_s <= t[-1]:
        a = steps[(t[:-1] >= start) & (t[1:] <= start + run_s)]
        b0 = start + run_s + gap_s
        b = steps[(t[:-1] >= b0) & (t[1:] <= b0 + run_s)]
        if a.size >= 3 and b.size >= 3:
            out.append(math.log(float(np.median(b)) / float(np.median(a))))
        start += stride_s
    return np.array(out)


def _runs(
    steps: np.ndarray, t: np.ndarray, start: float, n_runs: int, run_s: float, gap_s: float
) -> list[np.ndarray] | None:
    """``n_runs`` consecutive windows of ``run_s`` seconds from ``start``, ``gap_s`` apart."""
    out = []
    for i in range(n_runs):
        a = start + i * (run_s + gap_s)
        w = steps[(t[:-1] >= a) & (t[1:] <= a + run_s)]
        if w.size < 3:
            return None
        out.append(w)
    return out


def _pairs(runs: list[np.ndarray], n: int, effect: float) -> tuple[list, list]:
    base, var = [], []
    for j in range(n):  # pair j: A B when j is even, B A when odd
        first, second = runs[2 * j], runs[2 * j + 1]
        b, v = (first, second) if j % 2 == 0 else (second, first)
        base.append(list(b))
        var.append(list(v * (1.0 + effect)))
    return base, var


def replay(
    steps: np.ndarray, run_s: float, gap_s: float, effect: float, n: int, rng: np.random.Generator
) -> dict[str, tuple[float, float]]:
    """Per design: (share of comparisons called different in the planted direction, or in
    either direction when ``effect`` is 0; mean pairs used), over ``n`` replays. ``1r
    calibrated``: one round with a host calibration from an A/A of 12 pairs read at another
    random point of the same trace."""
    t = np.concatenate([[0.0], np.cumsum(steps)])
    design = Design(rounds=AUTO)
    n_cal = MIN_CALIBRATION_PAIRS
    need = 2 * max(design.max_pairs + design.max_set_aside, n_cal) * (run_s + gap_s)
    hits = {"one round": 0, "1r calibrated": 0, "repeats 3": 0, "auto": 0}
    pairs_used: list[int] = []
    done = 0
    while done < n:
        k_max = design.max_pairs + design.max_set_aside
        runs = _runs(steps, t, float(rng.uniform(0, t[-1] - need)), 2 * k_max, run_s, gap_s)
        cal_runs = _runs(steps, t, float(rng.uniform(0, t[-1] - need)), 2 * n_cal, run_s, gap_s)
        if runs is None or cal_runs is None:
            continue
        base, var = _pairs(runs, k_max, effect)
        calibration = run_spread_from_pairs(*_pairs(cal_runs, n_cal, 0.0))
        called = (FASTER, SLOWER) if effect == 0 else (SLOWER,)
        hits["one round"] += compare_runs(base[:1], var[:1]).decision in called
        hits["1r calibrated"] += (
            compare_runs(base[:1], var[:1], calibration=calibration).decision in called
        )
        hits["repeats 3"] += compare_runs(base[:3], var[:3]).decision in called
        test = SequentialTest(design)
        for b, v in zip(base, var):
            look = test.add(b, v)
            if look.stop:
                break
        assert look.speed is not None
        hits["auto"] += look.speed.decision in called
        pairs_used.append(look.n_pairs_run)
        done += 1
    mean_pairs = {
        "one round": 1.0,
        "1r calibrated": 1.0,
        "repeats 3": 3.0,
        "auto": float(np.mean(pairs_used)),
    }
    return {k: (v / n, mean_pairs[k]) for k, v in hits.items()}


def oracle_pairs(sigma_d: float, effect: float) -> float:
    """Fewest pairs of a known-variance z test for ``effect`` at 95% power, 5% two-sided."""
    return ((Z_ALPHA + Z_POWER) * sigma_d / math.log(1.0 / (1.0 - effect))) ** 2


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=360.0, help="trace length (default 360 s)")
    ap.add_argument(
        "--replays",
        type=int,
        default=400,
        help="replayed comparisons per run window and effect (default 400)",
    )
    ap.add_argument("--seed", type=int, default=2013, help="seed of the replays' start points")
    ap.add_argument(
        "--trace", help="replay a saved trace (.npy of step seconds) instead of recording one"
    )
    ap.add_argument("--save", help="save the recorded trace to this .npy file")
    ap.add_argument("--iters", type=int, default=150, help="matmuls per step (default 150)")
    ap.add_argument(
        "--gap",
        type=float,
        default=1.5,
        help="seconds between two runs' measured windows (default 1.5)",
    )
    ap.add_argument(
        "--overhead",
        type=float,
        default=1.6,
        help="afbench's seconds per run outside the measured window (default 1.6, "
        "bench/README.md §1)",
    )
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    C.header("bench/noise_floor.py", argv)
    steps = np.load(args.trace) if args.trace else trace(args.seconds, args.iters)
    if args.save:
        np.save(args.save, steps)
    med = float(np.median(steps))
    print(
        f"trace: {steps.size} steps in {steps.sum():.1f} s, median step {med * 1e3:.2f} ms, "
        f"step CV {np.std(steps) / np.mean(steps):.1%}"
    )
    t = np.cumsum(steps)
    blocks = [float(np.median(steps[(t > s) & (t <= s + 2.0)])) for s in np.arange(0, t[-1] - 2, 2)]
    print("medians of consecutive 2 s blocks (ms): " + " ".join(f"{b * 1e3:.1f}" for b in blocks))
    print(
        f"  range {min(blocks) * 1e3:.1f}..{max(blocks) * 1e3:.1f} ms "
        f"({max(blocks) / min(blocks) - 1:+.0%}) inside one process"
    )

    r3_pair_s = None
    print(
        f"\npaired A/A read off the trace: gap {args.gap:g} s between windows; per-run "
        f"overhead {args.overhead:g} s for the wall times"
    )
    print(
        f"{'run window':>11} {'steps':>6} {'pairs':>6} {'indep.':>6} {'sigma_d':>8} | "
        f"{'5%: pairs':>10} {'wall':>8} | {'2%: pairs':>10} {'wall':>8} | {'repeats 3':>9} "
        f"{'2x':>7}"
    )
    for run_s in RUN_LENGTHS_S:
        d = pair_log_ratios(steps, run_s, args.gap)
        if d.size < 10:
            print(f"{run_s:>9.2f} s: fewer than 10 block pairs fit in the trace; use --seconds")
            continue
        sigma = float(np.std(d, ddof=1))
        pair_s = 2 * (run_s + args.overhead)
        n5, n2 = oracle_pairs(sigma, 0.05), oracle_pairs(sigma, 0.02)
        r3 = 3 * pair_s
        r3_pair_s = r3_pair_s or r3
        independent = int(steps.sum() // (2 * run_s + args.gap))
        flag = " *" if independent < 10 else ""
        print(
            f"{run_s:>9.2f} s {round(run_s / med):>6d} {d.size:>6d} {independent:>6d} "
            f"{sigma:>8.2%} | "
            f"{n5:>10.1f} {n5 * pair_s:>7.0f}s | {n2:>10.1f} {n2 * pair_s:>7.0f}s | "
            f"{r3:>8.0f}s {2 * r3:>6.0f}s{flag}"
        )
    print(
        "\n'pairs' are the overlapping block pairs read (one every 0.25 s); 'indep.' how many "
        "non-overlapping ones fit in the trace. * fewer than 10 independent pairs: sigma_d "
        "rests on too few to trust; record a longer trace (--seconds)."
    )
    print(
        "'5%: pairs' is a lower bound for any test; the verdict's t test at 3-8 pairs needs "
        "more (its critical value is 2.4-4.3, not 1.96)."
    )

    rng = np.random.default_rng(args.seed)
    print(
        f"\nreplay: afbench's verdicts on this trace, {args.replays} comparisons per cell "
        f"(effect 0: FASTER or SLOWER = false positive; else SLOWER = detected)"
    )
    print(
        f"{'run window':>11} {'independent':>11} {'design':>10} | "
        + " ".join(f"{f'{e:.0%}':>7}" for e in REPLAY_EFFECTS)
        + " | mean pairs"
    )
    for run_s in REPLAY_WINDOWS_S:
        independent = int(steps.sum() // (16 * (run_s + args.gap)))
        if independent < 1:
            print(
                f"{run_s:>9.2f} s: the trace ({steps.sum():.0f} s) is shorter than one auto "
                f"comparison (16 runs: {16 * (run_s + args.gap):.0f} s); use --seconds "
                f"{16 * (run_s + args.gap) * 3:.0f} or more"
            )
            continue
        cells = {e: replay(steps, run_s, args.gap, e, args.replays, rng) for e in REPLAY_EFFECTS}
        for name in ("one round", "1r calibrated", "repeats 3", "auto"):
            print(
                f"{run_s:>9.2f} s {independent:>11d} {name:>10} | "
                + " ".join(f"{cells[e][name][0]:>7.1%}" for e in REPLAY_EFFECTS)
                + f" | {np.mean([cells[e][name][1] for e in REPLAY_EFFECTS]):.2f}"
            )
    print("targets (issue 16): false positives <= 5%; 5% detected >= 95%; 2% detected >= 50%")
    C.footer(t_start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
