"""Logs steps 1..N (the run's scheduler.steps) whose step time depends on the run's switches.

The switches come from ``runspec.json`` in the working directory (the command engine runs the
command in the run directory), so a sweep over ``optimization.autofuse`` and
``optimization.add_rmsnorm`` reaches this script unchanged. The logged
``elapsed_time_per_step`` is *planted*, not measured: 0.1 s, x0.7 with autofuse, x1.2 with
add_rmsnorm, times seeded noise (sd 2 %, the seed is the switches, variant, repeat and step, so
every rerun logs the same numbers and identical variants still log different samples). Timing
real sleeps on a shared 2-core machine would make the verdict tests flaky; what the tests pin
is what afbench does with the numbers.

Environment (from the test, inherited through the orchestrator and the worker):
  SWITCH_TIMED_COUNTER  append one line "<variant>-r<repeat> <switches>" per invocation
  SWITCH_TIMED_FAIL     "autofuse=true,add_rmsnorm=true": exit 4 after step 1 when the run's
                        switches match every pair
  SWITCH_TIMED_SLEEP_S  really sleep this long per step (for the interrupt tests)
  SWITCH_TIMED_LOADED   "autofuse=false,add_rmsnorm=true,repeat=2": that run is a loaded one,
                        every step x4 and two steps x3 on top (a whole run slowed by another
                        process, with bursts)
  SWITCH_TIMED_DRIFT    "<file>:<pct>": the machine drifts: each invocation appends a line to
                        <file> and is slower by <pct> percent per earlier invocation (a load
                        that grows over the sweep; the same for every switch)
"""

import json
import os
import random
import sys
import time

spec = json.load(open("runspec.json", encoding="utf-8"))
opt = spec["config"]["optimization"]
switches = {
    "autofuse": str(opt["autofuse"]).lower(),
    "add_rmsnorm": str(opt["add_rmsnorm"]).lower(),
}
tag = ",".join(f"{k}={v}" for k, v in switches.items())
counter = os.environ.get("SWITCH_TIMED_COUNTER")
if counter:
    with open(counter, "a", encoding="utf-8") as fh:
        fh.write(f"{spec['variant']}-r{spec['repeat']} {tag}\n")

fail_when = os.environ.get("SWITCH_TIMED_FAIL", "")
fail = bool(fail_when) and all(
    switches.get(k) == v for k, _, v in (p.partition("=") for p in fail_when.split(","))
)
sleep_s = float(os.environ.get("SWITCH_TIMED_SLEEP_S", "0"))
loaded_when = dict(
    p.partition("=")[::2] for p in os.environ.get("SWITCH_TIMED_LOADED", "").split(",") if p
)
loaded = bool(loaded_when) and all(
    {**switches, "repeat": str(spec["repeat"])}.get(k) == v for k, v in loaded_when.items()
)
drift_file, _, drift_pct = os.environ.get("SWITCH_TIMED_DRIFT", "").rpartition(":")
drift = 1.0
if drift_file:
    with open(drift_file, "a+", encoding="utf-8") as fh:
        fh.seek(0)
        drift += float(drift_pct) / 100 * len(fh.read().splitlines())
        fh.write(tag + "\n")
planted = drift * 0.1 * (0.7 if opt["autofuse"] else 1.0) * (1.2 if opt["add_rmsnorm"] else 1.0)
for step in range(1, spec["config"]["scheduler"]["steps"] + 1):
    rng = random.Random(f"{tag}-{spec['variant']}-{spec['repeat']}-{step}")
    time.sleep(sleep_s)
    factor = (4.0 * (3.0 if step in (4, 7) else 1.0)) if loaded else 1.0
    print(
        f"step: {step:2d}  loss: {2.0 / step:8.5f}  "
        f"elapsed_time_per_step: {planted * factor * rng.gauss(1.0, 0.02):.6f}s",
        flush=True,
    )
    if fail:
        print("fatal: injected failure for " + tag, file=sys.stderr, flush=True)
        sys.exit(4)
