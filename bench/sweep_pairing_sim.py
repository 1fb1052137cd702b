"""Simulation with known truth of a sweep's two pairings (experiment.sweep_pairing, issue 20 item 5).

A 2x2 sweep is 4 Hydra jobs that run one after another; the sweep judges the 3 combinations
against the baseline combination with afbench.verdict.compare_runs at the Bonferroni level.
  separate: job k runs only its own combination; its pairs are (baseline job's run r, its run r),
            minutes apart;
  beside:   job k (not the baseline job) runs the baseline combination beside its own, in
            counterbalanced rounds (r1: base, own; r2: own, base; ...), and is judged on those.
The machine's state is a level on the log step time that moves over the sweep's timeline (one
tick per run): 'steady' (does not move), 'drift 1%/run' (a load or a thermal state that grows),
'load step' (at a random run, a background load starts and stays: +15%, below what the contention
measurement flags), 'random walk' (sd 2% per run). On top: run-to-run spread 3% and the within-run
AR(1) noise of bench/verdict_sim.py (sd 3%, 5 measured steps). None of it is flagged contended:
this is what the contention measurement cannot see.

Per cell: A/A (every combination the same program) false positives per comparison, and the share
of comparisons that find a true 10% gain (every combination 10% faster than the baseline).

Run: python bench/sweep_pairing_sim.py [--n 1000]   (about 2 min on a quiet 2-core machine)
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np

from afbench.verdict import FASTER, SLOWER, compare_runs, sweep_level

JOBS = 4  # a 2x2 sweep: job 0 is the baseline combination
STATES = ("steady", "drift 1%/run", "load step", "random walk")


def timeline(rng: np.random.Generator, state: str, n: int) -> np.ndarray:
    """The machine's log level at each of ``n`` run slots."""
    if state == "steady":
        return np.zeros(n)
    if state.startswith("drift"):  # "drift <x>%/run"
        return np.log1p(float(state.split()[1].rstrip("%/run")) / 100.0 * np.arange(n))
    if state == "load step":
        level = np.zeros(n)
        level[rng.integers(1, n) :] = math.log(1.15)
        return level
    return np.cumsum(rng.normal(0.0, 0.02, n))  # random walk


def run(rng: np.random.Generator, log_mu: float, level: float, window: int = 5) -> list[float]:
    e = np.empty(window)
    e[0] = rng.normal(0, 0.03)
    for j in range(1, window):  # AR(1), stationary sd 3%
        e[j] = 0.5 * e[j - 1] + rng.normal(0, 0.03 * math.sqrt(1 - 0.25))
    return list(np.exp(log_mu + level + rng.normal(0.0, 0.03) + e))


def sweep(
    rng: np.random.Generator, state: str, pairing: str, rounds: int, gain_pct: float, level: float
) -> list[str]:
    """The 3 decisions of one simulated sweep."""
    log_v = math.log(1 - gain_pct / 100.0)
    slots = rounds * (1 + (JOBS - 1) * (2 if pairing == "beside" else 1))
    state_at = iter(timeline(rng, state, slots))
    base = [run(rng, 0.0, next(state_at)) for _ in range(rounds)]
    out = []
    for _ in range(1, JOBS):
        if pairing == "separate":
            b, v = base, [run(rng, log_v, next(state_at)) for _ in range(rounds)]
        else:
            b, v = [], []
            for r in range(rounds):  # counterbalanced: base first in odd rounds
                first_base = r % 2 == 0
                x = run(rng, 0.0 if first_base else log_v, next(state_at))
                y = run(rng, log_v if first_base else 0.0, next(state_at))
                (b.append(x), v.append(y)) if first_base else (v.append(x), b.append(y))
        out.append(compare_runs(b, v, confidence=level).decision)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1000, help="sweeps per cell")
    args = ap.parse_args()
    started = time.time()
    level = sweep_level(0.95, JOBS - 1)
    print(
        f"# sweep_pairing_sim: {args.n} 2x2 sweeps per cell, 3 comparisons each at the "
        f"Bonferroni level {100 * level:.2f}%"
    )
    print("| machine | rounds | pairing | A/A: FASTER / SLOWER per comparison | 10% gain found |")
    print("|---|---|---|---|---|")
    seed = 0
    for state in STATES:
        for rounds in (3, 5):
            for pairing in ("separate", "beside"):
                seed += 1
                rng = np.random.default_rng(seed)
                aa = np.array(
                    [sweep(rng, state, pairing, rounds, 0.0, level) for _ in range(args.n)]
                ).ravel()
                gain = np.array(
                    [sweep(rng, state, pairing, rounds, 10.0, level) for _ in range(args.n)]
                ).ravel()
                print(
                    f"| {state} | {rounds} | {pairing} | {100 * np.mean(aa == FASTER):.1f}% / "
                    f"{100 * np.mean(aa == SLOWER):.1f}% | {100 * np.mean(gain == FASTER):.1f}% |",
                    flush=True,
                )
    print(f"# {time.time() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
