"""``experiment.steps=N``: one knob that makes any recipe short (or longer).

Every phase of the experiment (and the composed config itself) runs ``N`` steps; the measured
window becomes the last ``max(4, N // 2)`` of them (at least 4 measured steps: the verdict's
minimum; at least one warm-up step before it, which takes torch.compile's compilation); a phase
that profiles records that same window and keeps the steps it runs after its window (the profile
phase of ``sft_af_compare`` runs 2); any other phase runs exactly ``N`` steps. For inference the
steps are generation runs: ``N - w``
warm-up runs and ``w`` measured runs. At ``N = 10`` this is ``sft_af_compare``'s own train
phase (steps 10, window 6-10). A variant's own overrides still win over it.
"""

from __future__ import annotations

import copy
from typing import Any

#: 1 warm-up step + 4 measured steps, the fewest a verdict accepts
SHORT_MIN_STEPS = 5
MIN_MEASURED = 4


def short_window(n: int) -> tuple[int, int]:
    """(first, last) 1-based measured steps of an ``n``-step run: the last ``max(4, n // 2)``."""
    width = max(MIN_MEASURED, n // 2)
    return n - width + 1, n


def short_run(run: dict[str, Any], n: int) -> dict[str, Any]:
    """A copy of one run's plain config dict (``scheduler``, ``optimization``) set to ``n``
    steps, its measured window and (where the profiler is on) its profiler window moved to the
    last ``max(4, n // 2)`` steps. ``n >= SHORT_MIN_STEPS`` (the schema checks it)."""
    out = copy.deepcopy(run)
    sched = out.get("scheduler") or {}
    opt = out.setdefault("optimization", {})
    first, last = short_window(n)
    if sched.get("workload") == "infer":
        sched["warmup_runs"], sched["measured_runs"] = first - 1, last - first + 1
    else:
        window = sched.get("measure") or {}
        # a profiling phase keeps its steps after the window (its trace is written after
        # them); any other phase runs exactly n (issue 34: steps: 20 ran 16 at n = 6)
        tail = (
            max(0, int(sched.get("steps", 0)) - int(window.get("last_step", 0)))
            if opt.get("profiler")
            else 0
        )
        sched["steps"] = n + tail
        sched["measure"] = {**window, "first_step": first, "last_step": last}
    prof = opt.get("profiler_window") or {}
    warmup = min(int(prof.get("warmup_steps", 1)), first - 1)
    opt["profiler_window"] = {
        **prof,
        "first_step": first,
        "last_step": last,
        "warmup_steps": warmup,
    }
    return out
