"""Simulation with known truth of the verdict's pair-count hints (issue 20): does "roughly K
pairs (verdict.rounds=K) to decide an effect of the size seen" deliver?

An undecided comparison whose gain is beyond the margin but below its MDE prints
``Speed.pairs_for_gain``: the pairs a fixed design would need for an MDE of the gain seen, at
the spread seen (afbench.verdict.power.pairs_for_mde, 80% power). Here, per true gain and
run-to-run spread, N first experiments at 3 fixed pairs (the smallest fixed design that prints
it without a calibration); each that prints a hint K is followed by a fresh experiment of K
pairs with the same true gain, as a user would run it; the share of those that decide FASTER
is what the hint delivered (its claim: about 80%, "roughly"). Beside it, the pairs the true
effect and spread would need (the same function on the truth) and the spread of the K printed.

Noise as bench/verdict_sim.py: a run's log step times are u_run + e_j, u_run ~ N(0, spread),
e_j AR(1) (rho 0.5, sd 3%), 5 measured steps.

Run: python bench/pairs_hint_sim.py [--n 1000]   (a few minutes on 2 cores)
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np

from afbench.verdict import FASTER, compare_runs, pairs_for_mde

MAX_K = 120  # hints above this are counted, not followed (a user would not run them either)


def run(rng: np.random.Generator, log_mu: float, spread: float, window: int = 5) -> list[float]:
    e = np.empty(window)
    e[0] = rng.normal(0, 0.03)
    for j in range(1, window):
        e[j] = 0.5 * e[j - 1] + rng.normal(0, 0.03 * math.sqrt(0.75))
    return list(np.exp(log_mu + rng.normal(0, spread) + e))


def experiment(rng, n: int, gain_pct: float, spread: float):
    log_v = math.log(1 - gain_pct / 100.0)
    b = [run(rng, 0.0, spread) for _ in range(n)]
    v = [run(rng, log_v, spread) for _ in range(n)]
    return compare_runs(b, v)


def true_pairs(gain_pct: float, spread: float, window: int = 5) -> int:
    """The pairs the truth needs: sd of one pair's log ratio from the noise model (run-to-run
    spread plus the median of the window's AR(1) steps, measured by simulation)."""
    rng = np.random.default_rng(0)
    d = [
        math.log(np.median(run(rng, 0.0, spread)) / np.median(run(rng, 0.0, spread)))
        for _ in range(20000)
    ]
    return pairs_for_mde(float(np.std(d)), gain_pct)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1000, help="first experiments per cell")
    args = ap.parse_args()
    started = time.time()
    print(f"# pairs_hint_sim: {args.n} first experiments of 3 pairs per cell")
    print(
        "| spread | true gain | hints printed | K printed (median, 10-90%) | K the truth needs "
        "| followed (K <= 120) | decided FASTER at K |"
    )
    print("|---|---|---|---|---|---|---|")
    seed = 0
    for spread in (0.02, 0.05):
        for gain in (5.0, 8.0, 12.0):
            seed += 1
            rng = np.random.default_rng(seed)
            ks, found = [], []
            for _ in range(args.n):
                sp = experiment(rng, 3, gain, spread)
                if sp.pairs_for_gain is None:
                    continue
                ks.append(sp.pairs_for_gain)
                if sp.pairs_for_gain <= MAX_K:
                    found.append(
                        experiment(rng, sp.pairs_for_gain, gain, spread).decision == FASTER
                    )
            q = np.percentile(ks, [50, 10, 90]) if ks else [float("nan")] * 3
            print(
                f"| {spread:.0%} | {gain:.0f}% | {len(ks) / args.n:.1%} | {q[0]:.0f} "
                f"({q[1]:.0f}-{q[2]:.0f}) | {true_pairs(gain, spread)} | {len(found)} | "
                f"{(np.mean(found) if found else float('nan')):.1%} |",
                flush=True,
            )
    print(f"# {time.time() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
