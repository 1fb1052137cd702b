"""Logs two steps, then SIGKILLs itself (what the kernel's OOM killer does)."""

import os
import signal

for step in (1, 2):
    print(f"step: {step:2d}  loss: 1.00000  elapsed_time_per_step: 0.010000s", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
