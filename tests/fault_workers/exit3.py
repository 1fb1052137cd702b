"""Logs one step, then exits with status 3."""

import sys

print("step:  1  loss: 1.00000  elapsed_time_per_step: 0.010000s", flush=True)
print("fatal: injected exit 3", file=sys.stderr, flush=True)
sys.exit(3)
