"""good.py with a per-step sleep: argv[1] steps, argv[2] seconds per step (default 0.5)."""

import sys
import time

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 10
sleep_s = float(sys.argv[2]) if len(sys.argv) > 2 else 0.5
for step in range(1, steps + 1):
    t0 = time.perf_counter()
    time.sleep(sleep_s)
    dt = time.perf_counter() - t0
    print(f"step: {step:2d}  loss: {2.0 / step:8.5f}  elapsed_time_per_step: {dt:.6f}s", flush=True)
