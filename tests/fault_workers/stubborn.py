"""Logs one step, then ignores SIGTERM and sleeps: a stop takes launcher.kill_grace_s and
ends with SIGKILL. argv[2]: a marker on the command line, for the orphan check."""

import signal
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("step:  1  loss: 1.00000  elapsed_time_per_step: 0.010000s", flush=True)
time.sleep(3600)
