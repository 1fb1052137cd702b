"""Simulation with known truth of ``verdict.contention=keep`` (issue 34): kept contended runs
decide only when contention is balanced across each pair's sides.

The case of issue 34: a main job whose contended runs all fell on the AutoFuse-off side read
``AF_ON_FASTER (95% CI [+78.84%, +97.17%])`` under keep, for an effect of about +13%. Here, per
design (3 and 5 fixed pairs), contention pattern and true gain, N experiments are decided by
:func:`afbench.verdict.compare_runs` under the rule before (every run decides: ``contended``
passed as none) and the rule now (``keep_contended=True``: a pair contended on both sides
decides, one contended on one side makes the comparison INCONCLUSIVE). Printed per cell: the
share called FASTER or SLOWER, the share wrong (the interval misses the true gain, among
decided ones: FASTER/SLOWER with the truth outside), and the interval's coverage.

Contention patterns (the slowdown multiplies every step time of a contended run):
  none: no run contended.
  one_sided: the baseline's run of each of ``k`` pairs (k ~ 1..n) slowed x U(1.3, 2.0).
  balanced: both runs of each of ``k`` pairs slowed, each by its own x U(1.1, 1.5).

Noise as bench/verdict_sim.py: a run's log step times are u_run + e_j, u_run ~ N(0, 3%), e_j
AR(1) (rho 0.5, sd 3%), 5 measured steps.

Run: python bench/contention_keep_sim.py [--n 1000]   (about a minute on 2 cores)
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np

from afbench.verdict import FASTER, SLOWER, compare_runs


def run(
    rng: np.random.Generator, log_mu: float, spread: float = 0.03, window: int = 5
) -> list[float]:
    e = np.empty(window)
    e[0] = rng.normal(0, 0.03)
    for j in range(1, window):
        e[j] = 0.5 * e[j - 1] + rng.normal(0, 0.03 * math.sqrt(0.75))
    return list(np.exp(log_mu + rng.normal(0, spread) + e))


def experiment(rng, n: int, gain_pct: float, pattern: str):
    """(baseline runs, variant runs, per pair (baseline contended, variant contended))."""
    d = math.log(1 - gain_pct / 100)
    base, var, flags = [], [], []
    hit = (
        set(rng.choice(n, size=rng.integers(1, n + 1), replace=False))
        if pattern != "none"
        else set()
    )
    for k in range(n):
        b, v = run(rng, 0.0), run(rng, d)
        cb = cv = False
        if k in hit and pattern == "one_sided":
            b, cb = [t * rng.uniform(1.3, 2.0) for t in b], True
        elif k in hit and pattern == "balanced":
            b = [t * rng.uniform(1.1, 1.5) for t in b]
            v = [t * rng.uniform(1.1, 1.5) for t in v]
            cb = cv = True
        base.append(b)
        var.append(v)
        flags.append((cb, cv))
    return base, var, flags


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=34)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    rng = np.random.default_rng(args.seed)
    print(f"# contention_keep_sim: n={args.n} per cell, seed {args.seed}")
    print("| pairs | contention | true gain | rule | FASTER/SLOWER | wrong | coverage |")
    print("|---|---|---|---|---|---|---|")
    for n in (3, 5):
        for pattern in ("none", "one_sided", "balanced"):
            for gain in (0.0, 13.0):
                cells = {"before": [0, 0, 0, 0], "now": [0, 0, 0, 0]}  # decided, wrong, cov, ci
                for _ in range(args.n):
                    base, var, flags = experiment(rng, n, gain, pattern)
                    for rule, kw in (
                        ("before", {}),
                        ("now", {"contended": flags, "keep_contended": True}),
                    ):
                        sp = compare_runs(base, var, **kw)
                        c = cells[rule]
                        inside = (
                            sp.ci_low_pct is not None and sp.ci_low_pct <= gain <= sp.ci_high_pct
                        )
                        if sp.decision in (FASTER, SLOWER):
                            c[0] += 1
                            c[1] += not inside
                        if sp.ci_low_pct is not None:
                            c[3] += 1
                            c[2] += inside
                for rule, (dec, wrong, cov, ci) in cells.items():
                    print(
                        f"| {n} | {pattern} | {gain:+.0f}% | {rule} | "
                        f"{100 * dec / args.n:.1f}% | {100 * wrong / args.n:.1f}% | "
                        f"{100 * cov / ci:.1f}% of {ci} |"
                        if ci
                        else f"| {n} | {pattern} | {gain:+.0f}% | {rule} | "
                        f"{100 * dec / args.n:.1f}% | {100 * wrong / args.n:.1f}% | "
                        f"no interval |"
                    )
    print(f"# {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
