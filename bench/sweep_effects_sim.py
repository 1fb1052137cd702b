"""Simulation with known truth of a sweep's main effects (issue 30, item 2).

A 2x2 or 2x2x2 sweep of boolean keys is 4 or 8 Hydra jobs that run one after another in Hydra's
order (the basic sweeper's product: the first key changes slowest, so it is the key most
confounded with time). With the default ``experiment.sweep_pairing=beside`` every job but the
baseline combination's (all off, job 0) runs the baseline combination beside its own in
counterbalanced rounds (r1: base, own; r2: own, base; ...), and its row is judged on those pairs
by afbench.verdict.compare_runs. The main effects are then what the sweep report prints:
afbench.verdict.effects.factorial_contrasts of the rows' paired gains (PairedGain.of each row's
Speed), adjusted across keys by afbench.verdict.effects.main_effects (Holm, family-wise 95%).

The machine's level on the log step time moves over the sweep's timeline (one tick per run) and
is never flagged as contended: 'steady'; 'drift 0.2%/run' and 'drift 0.5%/run' (a load or a
thermal state that grows); 'load step' (a background load starts at a random run and stays,
+15%); 'random walk' (sd 2% per run). On top: run-to-run spread 3% and the within-run AR(1) noise
of bench/verdict_sim.py (bench/sweep_pairing_sim.py's ``run``).

Per cell: A/A (every combination the same program): the share of sweeps in which ANY main
effect's interval excludes 0 (FASTER or SLOWER; family-wise, must be <= 5%). With a real 10%
gain of the first key (every combination with it on runs 10% faster): the share of sweeps that
call that key FASTER (power), the share whose interval for it holds the true 10% (coverage), and
the share in which another key (no effect) is called (family-wise error of the null keys); and
the share of main effects without an interval (every cell dropped: one round whose runs no
longer fit the host calibration, afbench.verdict's ``calibration_stale``). One round (``--rounds
1``) decides with a host calibration of 15 A/A pairs taken on the steady host before the sweep.
``--order random`` runs the jobs in a random order instead of Hydra's (what randomising would buy).

Run: python bench/sweep_effects_sim.py [--n 1000]   (about 6 min on a quiet 2-core machine)
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
import time

import numpy as np

from afbench.verdict import (
    FASTER,
    SLOWER,
    compare_runs,
    one_kind,
    run_spread_from_pairs,
    sweep_level,
)
from afbench.verdict.effects import PairedGain, factorial_contrasts, main_effects
from sweep_pairing_sim import run, timeline

STATES = ("steady", "drift 0.2%/run", "drift 0.5%/run", "load step", "random walk")
TRUE_GAIN_PCT = 10.0


def sweep(
    rng: np.random.Generator, state: str, n_keys: int, rounds: int, gain_pct: float, order: str
) -> list:
    """The main effects (afbench.verdict.effects.MainEffect, key order) of one simulated sweep;
    the first key has a true gain of ``gain_pct``."""
    keys = [f"k{i}" for i in range(n_keys)]
    combos = list(itertools.product(("false", "true"), repeat=n_keys))  # Hydra's order
    if order == "random":
        combos = [combos[0]] + [combos[i] for i in 1 + rng.permutation(len(combos) - 1)]
    slots = rounds * (2 * len(combos) - 1)
    state_at = iter(timeline(rng, state, slots))
    log_gain = math.log(1 - gain_pct / 100.0)
    level = sweep_level(0.95, len(combos) - 1)
    # one round decides only with a host calibration: 15 A/A pairs on this host beforehand
    cal = (
        one_kind(
            run_spread_from_pairs(
                [run(rng, 0.0, 0.0) for _ in range(15)], [run(rng, 0.0, 0.0) for _ in range(15)]
            )
        )
        if rounds == 1
        else None
    )
    settings, gains = [], []
    for values in combos:
        log_own = log_gain if values[0] == "true" else 0.0
        settings.append(dict(zip(keys, values)))
        if values == combos[0]:  # the baseline job runs only its own combination
            [next(state_at) for _ in range(rounds)]
            gains.append(None)
            continue
        b, v = [], []
        for r in range(rounds):  # counterbalanced: base first in odd rounds
            first_base = r % 2 == 0
            x = run(rng, 0.0 if first_base else log_own, next(state_at))
            y = run(rng, log_own if first_base else 0.0, next(state_at))
            (b.append(x), v.append(y)) if first_base else (v.append(x), b.append(y))
        speed = compare_runs(b, v, confidence=level, calibration=cal)
        gains.append(PairedGain.of(",".join(values), speed))
    contrasts = [c for _, _, c, _ in factorial_contrasts(settings, gains, keys, settings[0])]
    done = iter(main_effects([c for c in contrasts if c is not None], confidence=0.95))
    return [next(done) if c is not None else None for c in contrasts]


def called(effect) -> bool:
    """Whether a main effect was called (its interval excludes 0); ``None``: no interval."""
    return effect is not None and effect.decision in (FASTER, SLOWER)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1000, help="sweeps per cell")
    ap.add_argument("--rounds", type=int, nargs="+", default=[3, 5])
    ap.add_argument("--order", choices=("hydra", "random"), default="hydra")
    ap.add_argument("--states", nargs="+", default=list(STATES), choices=STATES)
    args = ap.parse_args()
    started = time.time()
    print(
        f"# sweep_effects_sim: {args.n} sweeps per cell, jobs in {args.order} order, "
        "beside pairing, main effects Holm-adjusted at family-wise 95%"
    )
    print(
        "| machine | sweep | rounds | A/A: any main effect called | 10% key: called FASTER "
        "| its interval holds 10% | another key called | effects without an interval |"
    )
    print("|---|---|---|---|---|---|---|---|")
    seed = 100
    for state in args.states:
        for n_keys in (2, 3):
            for rounds in args.rounds:
                seed += 1
                rng = np.random.default_rng(seed)
                aa = [sweep(rng, state, n_keys, rounds, 0.0, args.order) for _ in range(args.n)]
                real = [
                    sweep(rng, state, n_keys, rounds, TRUE_GAIN_PCT, args.order)
                    for _ in range(args.n)
                ]
                any_aa = np.mean([any(called(e) for e in s) for s in aa])
                power = np.mean([s[0] is not None and s[0].decision == FASTER for s in real])
                with_interval = [s[0] for s in real if s[0] is not None]
                cover = (
                    np.mean([e.ci_low_pct <= TRUE_GAIN_PCT <= e.ci_high_pct for e in with_interval])
                    if with_interval
                    else math.nan
                )
                other = np.mean([any(called(e) for e in s[1:]) for s in real])
                missing = np.mean([e is None for s in aa + real for e in s])
                print(
                    f"| {state} | {'x'.join(['2'] * n_keys)} | {rounds} | {100 * any_aa:.1f}% "
                    f"| {100 * power:.1f}% | {100 * cover:.1f}% | {100 * other:.1f}% "
                    f"| {100 * missing:.1f}% |",
                    flush=True,
                )
    print(f"# {time.time() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
