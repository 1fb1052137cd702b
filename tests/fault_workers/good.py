"""Logs steps 1..N (argv[1], default 10) with finite losses and step times; exits 0."""

import sys

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 10
for step in range(1, steps + 1):
    print(
        f"step: {step:2d}  loss: {2.0 / step:8.5f}  "
        f"elapsed_time_per_step: {0.01 * (1 + step % 3):.6f}s",
        flush=True,
    )
