"""A worker that does real CPU work per step: a fixed number of float64 matmuls (numpy, one
BLAS thread), timed with perf_counter and printed as the reference's step line.

    python matmul_steps.py STEPS [ITERS] [SIZE]

ITERS matmuls of SIZE x SIZE per step (defaults 150 and 128: ~20-50 ms on a 2-core CPU).
AFBENCH_BENCH_WORK (a factor, default 1.0) multiplies ITERS: 1.05 plants a 5% slowdown.
The noise is the machine's own (scheduler, caches, other processes); nothing random is added.
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import sys
import time

import numpy as np

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
iters = int(sys.argv[2]) if len(sys.argv) > 2 else 150
size = int(sys.argv[3]) if len(sys.argv) > 3 else 128
iters = round(iters * float(os.environ.get("AFBENCH_BENCH_WORK", "1.0")))

rng = np.random.default_rng(0)
a = rng.standard_normal((size, size))
b = rng.standard_normal((size, size)) / size ** 0.5
for step in range(1, steps + 1):
    t0 = time.perf_counter()
    x = a
    for _ in range(iters):
        x = x @ b
        x /= np.abs(x).max() + 1e-12  # keep values finite without changing the work
    dt = time.perf_counter() - t0
    print(f"step: {step:2d}  loss: {float(np.abs(x).mean()):8.5f}  "
          f"elapsed_time_per_step: {dt:.6f}s  iters: {iters}", flush=True)
