"""Logs steps 1..N (argv[1]) in a format of its own, `iter N | time=X` (seconds), for a custom
engine.step_pattern; the default (reference) pattern matches none of these lines."""

import sys

for step in range(1, int(sys.argv[1]) + 1):
    print(f"iter {step} | time={0.01 * (1 + step % 3):.3f}", flush=True)
