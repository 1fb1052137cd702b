"""Logs steps 1..N (argv[1]) of ~40 ms CPU work each, with argv[2] busy loops
(``python -c "while True: pass"``) running beside it, started by this command and stopped at
its end: planted contention (tests/test_contention_runs.py)."""

import subprocess
import sys
import time

steps = int(sys.argv[1])
busy = [
    subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(int(sys.argv[2]))
]
try:
    time.sleep(0.2 if busy else 0)  # let the loops reach the CPUs
    for step in range(1, steps + 1):
        t0, c0 = time.perf_counter(), time.process_time()
        while time.process_time() - c0 < 0.04:
            pass
        print(
            f"step: {step:2d}  loss: {2.0 / step:8.5f}  "
            f"elapsed_time_per_step: {time.perf_counter() - t0:.6f}s",
            flush=True,
        )
finally:
    for p in busy:
        p.kill()
        p.wait()
