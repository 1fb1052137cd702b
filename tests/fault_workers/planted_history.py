"""Logs steps 1..N (argv[1]) whose times are planted, not measured: 10 ms x $AFBENCH_BENCH_WORK
(the matmul worker's work factor, default 1: 1.3 plants a 30% slowdown without changing the
config) x lognormal noise of 3%, seeded by $AFBENCH_PLANTED_SEED and the run (argv[2]:
'{round}-{variant}'), so two experiments differ as two real ones would and a rerun with the
same seed gives the same log. Exits 0 at once: nothing is timed."""

import os
import random
import sys

steps = int(sys.argv[1])
rng = random.Random(f"{os.environ.get('AFBENCH_PLANTED_SEED', '0')}-{sys.argv[2]}")
factor = float(os.environ.get("AFBENCH_BENCH_WORK", "1.0"))
for step in range(1, steps + 1):
    t = 0.01 * factor * rng.lognormvariate(0.0, 0.03)
    print(f"step: {step:2d}  loss: {2.0 / step:8.5f}  elapsed_time_per_step: {t:.6f}s", flush=True)
