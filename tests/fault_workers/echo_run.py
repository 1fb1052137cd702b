"""Writes its argv and AFBENCH_* environment to argv[1] (JSON), then logs argv[2] steps."""

import json
import os
import sys

with open(sys.argv[1], "w", encoding="utf-8") as fh:
    env = {k: v for k, v in os.environ.items() if k.startswith(("AFBENCH_", "USER_"))}
    json.dump({"argv": sys.argv, "cwd": os.getcwd(), "env": env}, fh)
for step in range(1, int(sys.argv[2]) + 1):
    print(f"\x1b[32mstep: {step}\x1b[0m  loss: 0.5  elapsed_time_per_step: 0.02s", flush=True)
print("warning on stderr", file=sys.stderr, flush=True)
