"""Logs one step, starts a grandchild that sleeps too, then sleeps forever.

argv[2] (optional) is a marker placed on both command lines so a test can look for orphans.
"""

import subprocess
import sys
import time

marker = sys.argv[2] if len(sys.argv) > 2 else "afbench-hang"
if len(sys.argv) > 3 and sys.argv[3] == "--grandchild":
    time.sleep(3600)
    sys.exit(0)
subprocess.Popen([sys.executable, __file__, "1", marker, "--grandchild"])
print("step:  1  loss: 1.00000  elapsed_time_per_step: 0.010000s", flush=True)
time.sleep(3600)
