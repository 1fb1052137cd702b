"""The progress line's ETA: what the runs of an experiment have cost so far, to predict the
rest (:class:`RunTimes`)."""

from __future__ import annotations

from pathlib import Path

from afbench.runspec import RunSpec, RunStatus
from afbench.store import window_step_times


class RunTimes:
    """What runs have cost so far, to predict the rest (the progress line's ETA).

    A run's wall time is split into a fixed part (process start-up, model load and its first
    step, which carries torch.compile's compilation) and its steady steps: ``wall = fixed +
    (steps - 1) * step``, with ``step`` the median of its measured window and ``fixed`` what
    remains. Both are learnt per kind of run, ``(compiled, profiled, warm)``: a compiled run's
    first step can be minutes where an eager one's is a second, and a compiled run that starts
    with the kernels an earlier run built (``status.json``'s ``kernel_cache``: ``warm``; the
    runs of one CPU experiment share them) compiles in about half the time of the first. A kind
    not seen yet borrows the nearest kind's numbers, and a compiled kind that has not run yet
    makes the estimate a lower bound, which :meth:`eta_line` says.
    """

    def __init__(self) -> None:
        self.seen: dict[tuple[bool, bool, bool], list[tuple[float, float]]] = {}
        self.shared = False  # a compiled run recorded its kernel cache: later ones start warm

    def kind(self, run: RunSpec, st: RunStatus | None = None) -> tuple[bool, bool, bool]:
        """The kind of a finished run (``st``: warm as it started), or of a run to come (warm
        when it is compiled and an earlier compiled run shared its kernels)."""
        o = run.config.optimization
        # a command's switches are arguments of its own: afbench cannot tell that it compiles
        compiled = bool(o.autofuse or o.npugraph_ex) and run.config.engine.name != "command"
        warm = (st.kernel_cache == "warm") if st is not None else (compiled and self.shared)
        return compiled, bool(o.profiler), warm

    def add(self, run: RunSpec, st: RunStatus) -> None:
        """Learn from a run that really ran (OK, its measured window parsed); else nothing."""
        if st.status != "OK" or (st.reason is not None and st.reason.key == "run_resumed"):
            return
        try:
            times = sorted(window_step_times(run, Path(run.run_dir)).values())
        except (OSError, ValueError):
            return
        step = times[len(times) // 2]
        fixed = max(0.0, st.wall_s - (run.config.scheduler.steps - 1) * step)
        self.seen.setdefault(self.kind(run, st), []).append((fixed, step))
        self.shared |= st.kernel_cache is not None

    def _model(self, kind: tuple[bool, bool, bool]) -> tuple[float, float, bool, bool] | None:
        """(fixed s, step s, known, cold for warm) for ``kind``: its own mean, else the
        nearest: the same compile kind's (profiled or not, then warm or cold), else any kind's
        (known False when the compile kind has not run; cold for warm True when a warm
        compiled run is predicted from cold ones, an upper bound)."""
        c, p, w = kind
        for cand in (
            (c, p, w),
            (c, not p, w),
            (c, p, not w),
            (c, not p, not w),
            (not c, p, False),
            (not c, not p, False),
            (not c, p, True),
            (not c, not p, True),
        ):
            if self.seen.get(cand):
                fixed, step = (sum(x) / len(self.seen[cand]) for x in zip(*self.seen[cand]))
                return fixed, step, cand[0] == kind[0], kind[0] and kind[2] and not cand[2]
        return None

    def eta_line(self, runs: list[RunSpec]) -> str | None:
        """``ETA 3.9 min for 3 more run(s)``, ``ETA >= 0.6 min ... (compile time not known
        yet: no compiled run has finished)``, ``ETA <= 4.4 min ... (the first compile counted
        for ...)``, or None when no run has taught anything."""
        total, unknown, over = 0.0, False, False
        for run in runs:
            model = self._model(self.kind(run))
            if model is None:
                return None
            fixed, step, known, cold_for_warm = model
            total += fixed + (run.config.scheduler.steps - 1) * step
            unknown |= not known
            over |= cold_for_warm
        if unknown:
            bound, note = ">= ", " (compile time not known yet: no compiled run has finished)"
        elif over:
            bound, note = (
                "<= ",
                (
                    " (the first compile counted for every compiled run: the "
                    "later ones start with its kernels and take about half)"
                ),
            )
        else:
            bound, note = "", ""
        return f"ETA {bound}{total / 60:.1f} min for {len(runs)} more run(s){note}"
