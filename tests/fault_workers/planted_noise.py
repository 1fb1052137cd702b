"""Logs steps 1..N (argv[1]) whose times are planted, not measured: 10 ms x FACTOR (argv[3],
e.g. 1.3 for a 30% slower variant) x lognormal noise of SPREAD (argv[4], default 0.03),
seeded by the run's round and variant (argv[2]: '{round}-{variant}'), so every run differs
and a rerun gives the same log. Exits 0 at once: nothing is timed."""

import random
import sys

steps = int(sys.argv[1])
rng = random.Random(sys.argv[2])
factor = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
spread = float(sys.argv[4]) if len(sys.argv) > 4 else 0.03
for step in range(1, steps + 1):
    t = 0.01 * factor * rng.lognormvariate(0.0, spread)
    print(f"step: {step:2d}  loss: {2.0 / step:8.5f}  elapsed_time_per_step: {t:.6f}s", flush=True)
