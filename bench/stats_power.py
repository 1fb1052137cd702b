"""Simulation benchmark: false positives, power and cost of afbench's verdict methods.

Not a test, and it times nothing: it draws synthetic step times shaped like this 2-core
machine's and prints, per method and planted effect, how often the verdict calls the variant
slower or faster and how many runs the comparison used. No afbench run is launched.

The machine model (per trial, runs in the order they would execute):

* step times: ``base * run_level * drift * exp(e_t)``, ``e_t`` an AR(1) series (lag-1
  correlation ``--rho``, stationary sd ``--step-cv``: ~4% measured within a run);
* ``run_level = exp(N(0, --between-cv))`` per run (what changes between processes), and with
  probability ``--loaded-p`` a loaded run whose every step is x U(1.05, 1.3);
* ``drift``: a random walk over run slots, sd ``--drift-cv`` per run (the machine's load
  changing slowly);
* bursts: each step with probability ``--burst-p`` is x U(2, 5) (another process's burst).

Methods compared:

* ``today``: Welch t on per-repeat mean step times, 3 repeats, order A B A B A B
  (afbench.analysis.stats.t_interval_of_gain);
* ``paired3`` / ``paired8``: paired log-ratio t of per-run medians, 3 / 8 counterbalanced
  pairs (afbench.analysis.paired.paired_gain);
* ``boot3``: hierarchical bootstrap of per-run medians, 3 pairs;
* ``auto``: the sequential rule with its defaults (afbench.analysis.sequential);
  ``auto_pocock`` / ``auto_trim``: the same with Pocock spending / a 20%-trimmed statistic.

    .venv/bin/python bench/stats_power.py [--trials 500] [--between-cv 0.015] [--seed 1]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from afbench.analysis.paired import (  # noqa: E402
    FASTER,
    SLOWER,
    counterbalanced_order,
    hierarchical_bootstrap_gain,
    paired_gain,
)
from afbench.analysis.sequential import SequentialDesign, sequential_decision  # noqa: E402
from afbench.analysis.stats import t_interval_of_gain  # noqa: E402

SLOWDOWNS = (0.0, 0.02, 0.05, 0.10)
TODAY_RUNS = 6  # repeats: 3 = three baseline and three variant runs


class Machine:
    """Draws runs in execution order; one instance per trial (its drift is shared)."""

    def __init__(self, rng: np.random.Generator, args: argparse.Namespace) -> None:
        self.rng, self.args = rng, args
        self.drift = 0.0

    def run(self, slowdown: float) -> list[float]:
        a, rng = self.args, self.rng
        self.drift += rng.normal(0.0, a.drift_cv)
        level = a.base_s * (1.0 + slowdown) * math.exp(self.drift + rng.normal(0.0, a.between_cv))
        if rng.random() < a.loaded_p:
            level *= rng.uniform(1.05, 1.3)
        innovations = rng.normal(0.0, a.step_cv * math.sqrt(1 - a.rho**2), a.steps)
        e = np.empty(a.steps)
        e[0] = rng.normal(0.0, a.step_cv)
        for i in range(1, a.steps):
            e[i] = a.rho * e[i - 1] + innovations[i]
        steps = level * np.exp(e)
        bursts = rng.random(a.steps) < a.burst_p
        steps[bursts] *= rng.uniform(2.0, 5.0, int(bursts.sum()))
        return list(steps)

    def pairs(self, n: int, slowdown: float) -> tuple[list[list[float]], list[list[float]]]:
        baseline, variant = [], []
        for first, _ in counterbalanced_order(n):
            runs = {first: self.run(slowdown if first == "variant" else 0.0)}
            second = "baseline" if first == "variant" else "variant"
            runs[second] = self.run(slowdown if second == "variant" else 0.0)
            baseline.append(runs["baseline"])
            variant.append(runs["variant"])
        return baseline, variant


def today(machine: Machine, slowdown: float) -> tuple[str, int]:
    base, var = [], []
    for _ in range(3):
        base.append(float(np.mean(machine.run(0.0))))
        var.append(float(np.mean(machine.run(slowdown))))
    _, low, high = t_interval_of_gain(base, var)
    return (FASTER if low > 0 else SLOWER if high < 0 else "other"), TODAY_RUNS


def paired(n: int):
    def method(machine: Machine, slowdown: float) -> tuple[str, int]:
        return paired_gain(*machine.pairs(n, slowdown)).decision, 2 * n

    return method


def boot3(machine: Machine, slowdown: float) -> tuple[str, int]:
    return hierarchical_bootstrap_gain(*machine.pairs(3, slowdown), n_boot=500).decision, 6


def auto(design: SequentialDesign):
    def method(machine: Machine, slowdown: float) -> tuple[str, int]:
        baseline, variant = [], []
        for first, _ in counterbalanced_order(design.max_pairs):
            b, v = machine.pairs(1, slowdown) if first == "baseline" else _reversed(machine, slowdown)
            baseline += b
            variant += v
            decision = sequential_decision(baseline, variant, design)
            if decision.stop:
                return decision.estimate.decision, 2 * decision.n_pairs
        raise AssertionError("the rule always stops at max_pairs")

    return method


def _reversed(machine: Machine, slowdown: float):
    v = machine.run(slowdown)
    b = machine.run(0.0)
    return [b], [v]


def simulate(name, method, args, seed_offset: int) -> dict[float, tuple[float, float, float]]:
    """{slowdown: (P(FASTER), P(SLOWER), mean runs)}."""
    out = {}
    for j, slowdown in enumerate(SLOWDOWNS):
        rng = np.random.default_rng([args.seed, seed_offset, j])
        faster = slower = runs = 0
        for _ in range(args.trials):
            decision, used = method(Machine(rng, args), slowdown)
            faster += decision == FASTER
            slower += decision == SLOWER
            runs += used
        out[slowdown] = (faster / args.trials, slower / args.trials, runs / args.trials)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=500, help="K trials per condition (500)")
    ap.add_argument("--steps", type=int, default=18, help="measured steps per run (18)")
    ap.add_argument("--base-s", type=float, default=0.03, help="step time, s (0.03)")
    ap.add_argument("--step-cv", type=float, default=0.04, help="step noise sd, log (0.04)")
    ap.add_argument("--rho", type=float, default=0.3, help="lag-1 step correlation (0.3)")
    ap.add_argument("--between-cv", type=float, default=0.015, help="run level sd (0.015)")
    ap.add_argument("--drift-cv", type=float, default=0.007, help="drift per run sd (0.007)")
    ap.add_argument("--loaded-p", type=float, default=0.05, help="P(loaded run) (0.05)")
    ap.add_argument("--burst-p", type=float, default=0.03, help="P(burst step) (0.03)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--methods", default="today,paired3,boot3,paired8,auto,auto_pocock,auto_trim",
                    help="comma-separated subset")
    args = ap.parse_args(argv)

    methods = {
        "today": today,
        "paired3": paired(3),
        "boot3": boot3,
        "paired8": paired(8),
        "auto": auto(SequentialDesign()),
        "auto_pocock": auto(SequentialDesign(spending="pocock")),
        "auto_trim": auto(SequentialDesign(trim=0.2)),
    }
    chosen = [m for m in args.methods.split(",") if m]
    print("== bench/stats_power.py (simulation; no afbench run, no timing)")
    print(f"K={args.trials} trials per condition; {args.steps} measured steps/run; step sd "
          f"{args.step_cv:.1%} (AR1 rho {args.rho}), between-run sd {args.between_cv:.1%}, "
          f"drift {args.drift_cv:.1%}/run, loaded runs p={args.loaded_p}, bursts p={args.burst_p}")
    print(f"auto design: {SequentialDesign()}")
    header = f"{'method':<12} {'A/A false +/-':>14} " + " ".join(
        f"{f'{s:.0%} found':>9}" for s in SLOWDOWNS[1:]) + f" {'runs A/A/2/5/10%':>22} {'x today':>8}"
    print(header)
    started = time.monotonic()
    for k, name in enumerate(chosen):
        res = simulate(name, methods[name], args, k)
        fp = res[0.0][0] + res[0.0][1]
        found = " ".join(f"{res[s][1]:>9.1%}" for s in SLOWDOWNS[1:])
        runs = "/".join(f"{res[s][2]:.1f}" for s in SLOWDOWNS)
        decided = [res[s][2] for s in SLOWDOWNS[1:]]
        print(f"{name:<12} {fp:>14.1%} {found} {runs:>22} {np.mean(decided) / TODAY_RUNS:>8.2f}")
    mc = math.sqrt(0.05 * 0.95 / args.trials)
    print(f"Monte Carlo standard error at 5%: {mc:.1%}; targets: A/A <= 5%, 5% found >= 95%, "
          f"2% found >= 50%, runs per decided comparison <= 2x today")
    print(f"simulation wall time: {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
