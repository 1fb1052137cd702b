"""Logs steps 1..N (argv[1]), then fills the disk of argv[2] (its run folder) with zeros
until the disk is full, and exits 0: the disk is full when the launcher writes its status."""

import sys
from pathlib import Path

steps = int(sys.argv[1])
for step in range(1, steps + 1):
    print(
        f"step: {step:2d}  loss: {2.0 / step:8.5f}  "
        f"elapsed_time_per_step: {0.01 * (1 + step % 3):.6f}s",
        flush=True,
    )
try:
    with open(Path(sys.argv[2]) / "fill.bin", "wb") as fh:
        while True:
            fh.write(bytes(1 << 20))
            fh.flush()
except OSError:
    pass
