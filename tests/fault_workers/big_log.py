"""Logs steps 1..N (argv[1]) like good.py, then argv[2] MiB of 1 MiB lines, each under the
8 MiB line cap, so afbench reads every byte of them once the run has ended; exits 0."""

import sys

steps, mib = int(sys.argv[1]), int(sys.argv[2])
for step in range(1, steps + 1):
    print(
        f"step: {step:2d}  loss: {2.0 / step:8.5f}  "
        f"elapsed_time_per_step: {0.01 * (1 + step % 3):.6f}s",
        flush=True,
    )
line = b"x" * ((1 << 20) - 1) + b"\n"
for _ in range(mib):
    sys.stdout.buffer.write(line)
sys.stdout.flush()
