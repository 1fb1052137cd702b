"""Logs steps 1..N (argv[1]) whose loss turns NaN at step argv[2] (default 3); sleeps after
each NaN step so a test can see that the engine stops it rather than waiting for it."""

import sys
import time

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 10
nan_at = int(sys.argv[2]) if len(sys.argv) > 2 else 3
for step in range(1, steps + 1):
    loss = float("nan") if step >= nan_at else 1.0 / step
    print(f"step: {step:2d}  loss: {loss:8.5f}  elapsed_time_per_step: 0.010000s", flush=True)
    if step >= nan_at:
        time.sleep(30)
