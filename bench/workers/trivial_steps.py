"""A worker that does almost nothing: prints N valid step lines (argv[1], default 10) and exits.

Used by bench/overhead.py and bench/report_speed.py to measure afbench's own cost.
"""

import sys

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 10
for step in range(1, steps + 1):
    print(
        f"step: {step:2d}  loss: {2.0 / step:8.5f}  "
        f"elapsed_time_per_step: {0.01 * (1 + step % 3):.6f}s",
        flush=True,
    )
