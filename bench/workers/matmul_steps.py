"""A worker that does real CPU work per step: a fixed number of float64 matmuls (numpy, one
BLAS thread), timed with perf_counter and printed as the reference's step line.

    python matmul_steps.py STEPS [ITERS] [SIZE]

ITERS matmuls of SIZE x SIZE per step (defaults 150 and 128: ~20-50 ms on a 2-core CPU).
AFBENCH_BENCH_WORK (a factor, default 1.0) multiplies ITERS: 1.05 plants a 5% slowdown.
AFBENCH_BENCH_BUSY (default 0) starts that many busy loops (``python -c "while True: pass"``)
beside the steps, stopped at the end: planted contention (bench/contention.py, tests);
with AFBENCH_BENCH_BUSY_VARIANT set, only in the runs of that variant (AFBENCH_VARIANT, which
afbench's command engine sets), so both sides of a comparison run one program, one kind of run
for the host calibration, and only one side is loaded (bench/contended_aa.py).
The noise is the machine's own (scheduler, caches, other processes); nothing random is added.
Each step line ends with the step's CPU seconds (``cpu_s``, time.process_time): wall / CPU is
the step's slowdown from waiting for a CPU (bench/contention.py).
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import subprocess
import sys
import time

import numpy as np

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
iters = int(sys.argv[2]) if len(sys.argv) > 2 else 150
size = int(sys.argv[3]) if len(sys.argv) > 3 else 128
iters = round(iters * float(os.environ.get("AFBENCH_BENCH_WORK", "1.0")))

loaded = os.environ.get("AFBENCH_BENCH_BUSY_VARIANT") in (None, os.environ.get("AFBENCH_VARIANT"))
busy = [
    subprocess.Popen([sys.executable, "-c", "while True: pass"])
    for _ in range(int(os.environ.get("AFBENCH_BENCH_BUSY", "0")) if loaded else 0)
]
rng = np.random.default_rng(0)
a = rng.standard_normal((size, size))
b = rng.standard_normal((size, size)) / size**0.5
try:
    for step in range(1, steps + 1):
        t0, c0 = time.perf_counter(), time.process_time()
        x = a
        for _ in range(iters):
            x = x @ b
            x /= np.abs(x).max() + 1e-12  # keep values finite without changing the work
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
        print(
            f"step: {step:2d}  loss: {float(np.abs(x).mean()):8.5f}  "
            f"elapsed_time_per_step: {dt:.6f}s  iters: {iters}  cpu_s: {cpu:.6f}",
            flush=True,
        )
finally:
    for p in busy:
        p.kill()
        p.wait()
