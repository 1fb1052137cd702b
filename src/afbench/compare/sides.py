"""One side of a comparison (a variant's verdict-phase runs): step times, time to first step,
memory, efficiency, and the memory change, caveats and compile cost between two sides. Part of
:mod:`afbench.compare`."""

from __future__ import annotations

from typing import Any

import pandas as pd

from afbench.analysis.stats import finite_mean
from afbench.collect import MEANS, Collected
from afbench.messages import Message, as_written, say
from afbench.store import (
    MEMORY_MEASURES,
    Compile,
    Efficiency,
    Memory,
    MemoryChange,
    RunResult,
    Side,
    Speed,
)


def status_of(runs: pd.DataFrame, ids: list[str]) -> list[str]:
    return runs[runs.run_id.isin(ids)].status.tolist()


def run_ids(col: Collected, variant: str, phase: str | None) -> list[str]:
    """Run ids of one variant and phase, in repeat order."""
    return [r.run_id for r in col.plan.runs if r.variant == variant and r.phase == phase]


def with_replaced(col: Collected, ids: list[str]) -> list[str]:
    """``ids`` and every run a rerun among them replaced (experiment.rerun_contended), down
    the chain of reruns."""
    out, by = list(ids), {r.by: r.replaced.run_id for r in col.plan.reruns}
    for rid in list(out):
        while rid in by:
            rid = by[rid]
            out.append(rid)
    return out


#: Why a side's numbers rest on the runs they do (:attr:`afbench.store.Side.runs_basis`).
RUNS_BASIS = ("verdict", "quiet", "all")


def side(
    col: Collected,
    variant: str,
    phase: str | None,
    workload: str,
    set_aside_contended: bool = False,
    verdict_runs: list[str] | None = None,
) -> Side:
    """``variant``'s numbers on ``phase`` from the runs table: means over its repeats (a mean
    step time only when every run is OK), the worst repeat's step-time CV, the means of the
    ``workload``'s window metrics (:data:`afbench.collect.MEANS`), the first run's inference
    sanity, its memory and efficiency (:func:`memory_of`, :func:`efficiency_of`) and the first
    recompile caveat of its runs. ``set_aside_contended`` (verdict.contention=set_aside): the
    means leave out the runs measured as contended, as the verdict does, while an OK run
    measured quiet is left (a side's mean step time then agrees with its verdict).
    ``verdict_runs``: the run ids of the pairs the verdict decided on; where any are this
    side's, every number but the statuses rests on them alone (``runs_basis`` "verdict"), so
    the tables match the verdict beside them. ``runs_used`` names the runs used."""
    runs = col.runs
    sel = runs[runs.run_id.isin(run_ids(col, variant, phase))]
    quiet = (
        sel[sel["contended"].map(lambda c: c is None or c != c or not bool(c))]
        if "contended" in sel
        else sel
    )  # None / NaN: not measured, kept
    decided = sel[sel.run_id.isin(verdict_runs or [])]
    if len(decided):
        use, basis = decided, "verdict"
    elif set_aside_contended and (quiet.status == "OK").any():
        use, basis = quiet, "quiet"
    else:
        use, basis = sel, "all"
    first = runs[runs.run_id.isin(with_replaced(col, sel.run_id.tolist()))]
    statuses = sel.status.tolist()
    errors = [e for e in sel.log_error.tolist() if e]
    sanity = [x for x in sel.get("sanity", pd.Series(dtype=object)).tolist() if isinstance(x, str)]
    per_repeat = [x for x in use.mean_step_s.tolist() if x is not None and x == x]
    cvs = [
        x
        for x in use.get("step_cv_pct", pd.Series(dtype=float)).tolist()
        if x is not None and x == x
    ]
    return Side(
        name=variant,
        statuses=statuses,
        log_errors=errors,
        repeats_s=per_repeat,
        mean_step_s=finite_mean(use.mean_step_s.tolist()) if (sel.status == "OK").all() else None,
        # a contended run's rerun finds the kernels it built: its cold first step still counts
        **first_step(first),
        first_step_set_aside=first_step_set_aside(first, use),
        step_cv_pct=max(cvs) if cvs else None,
        tokens_per_s=finite_mean(use.tokens_per_s.tolist()),
        metrics={k: finite_mean(use[k].tolist()) for k in MEANS[workload] if k in use},
        sanity=sanity[0] if sanity else None,
        memory=memory_of(_ok_results(col, use)),
        efficiency=efficiency_of(_ok_results(col, use)),
        recompile=next(
            (
                x
                for x in sel.get("recompile", pd.Series(dtype=object)).tolist()
                if isinstance(x, str) and x
            ),
            None,
        ),
        recompile_after_step=next(
            (
                int(x)
                for x in sel.get("recompile_after_step", pd.Series(dtype=object)).tolist()
                if x is not None and x == x
            ),
            None,
        ),
        runs_used=[r for r, st in zip(use.run_id, use.status) if st == "OK"],
        runs_basis=basis,
        skipped=bool(statuses) and all(s == "SKIPPED" for s in statuses),
        ok=bool(statuses) and all(s == "OK" for s in statuses) and not errors,
    )


def first_step(sel: pd.DataFrame) -> dict[str, Any]:
    """``first_step_s`` (mean, s) and ``first_step_kernel_cache`` of the runs ``sel`` (a
    side's runs and the contended runs they replaced): over the runs whose compiler caches
    were cold when they started where there are any (a first compile, as a user meets it;
    contention in a run's measured steps does not make its compile less of one), else over
    all of them, marked "warm" when every run found
    kernels an earlier run of the experiment had built (launch.local.compiler_cache_dirs)."""
    if "first_step_s" not in sel:
        return {"first_step_s": None, "first_step_kernel_cache": None}
    states = sel.kernel_cache.tolist() if "kernel_cache" in sel else [None] * len(sel)
    cold = [t for t, k in zip(sel.first_step_s.tolist(), states) if k == "cold"]
    if cold:
        return {"first_step_s": finite_mean(cold), "first_step_kernel_cache": "cold"}
    warm = bool(states) and all(k == "warm" for k in states)
    return {
        "first_step_s": finite_mean(sel.first_step_s.tolist()),
        "first_step_kernel_cache": "warm" if warm else None,
    }


def first_step_set_aside(sel: pd.DataFrame, used: pd.DataFrame) -> list[str]:
    """The OK runs of ``sel`` that :func:`first_step` rests on (its cold runs where there are
    any) and that are not among ``used`` (the runs a side's other numbers rest on)."""
    if "first_step_s" not in sel or "run_id" not in sel:
        return []
    cold = sel[sel.kernel_cache == "cold"] if "kernel_cache" in sel else sel.iloc[:0]
    on = cold if len(cold) else sel
    return [r for r, st in zip(on.run_id, on.status) if st == "OK" and r not in set(used.run_id)]


def _ok_results(col: Collected, sel: pd.DataFrame) -> list[RunResult]:
    """The result.json of each OK run of ``sel`` (rows of the runs table), in repeat order."""
    return [
        r
        for rid, st in zip(sel.run_id, sel.status)
        if st == "OK" and (r := col.results.get(rid)) is not None
    ]


def _first(values) -> object:
    return next((v for v in values if v is not None), None)


def memory_of(results: list[RunResult]) -> Memory:
    """A side's :class:`Memory` from its verdict-phase runs' result.json: each peak the max
    over the repeats (GiB), the headline peak of the first kind of :data:`MEMORY_MEASURES`
    measured, the first run's source, window and KV-cache size."""
    peaks = {
        key: max((x for r in results if (x := getattr(r.memory, key)) is not None), default=None)
        for key, _ in MEMORY_MEASURES
    }
    measure = next((name for key, name in MEMORY_MEASURES if peaks[key] is not None), None)
    key = dict((name, k) for k, name in MEMORY_MEASURES).get(measure or "")
    return Memory(
        peak_gib=peaks[key] if key else None,
        measure=measure,
        peak_reserved_gib=peaks["peak_reserved_gib"],
        peak_allocated_gib=peaks["peak_allocated_gib"],
        peak_rss_gib=peaks["peak_rss_gib"],
        source=_first(r.memory.source for r in results),
        window=_first(r.memory.window for r in results),
        **{
            f: _first(getattr(r.memory, f) for r in results)
            for f in ("kv_cache_gib", "kv_cache_tokens", "kv_cache_batch", "kv_cache_source")
        },
    )


def efficiency_of(results: list[RunResult]) -> Efficiency:
    """A side's :class:`Efficiency`: TFLOPs per device and MFU (%) as means over its runs,
    the peak, FLOPs per token and sources of the first run that has them."""
    runs = [r.efficiency for r in results]
    return Efficiency(
        tflops_per_device=finite_mean(e.tflops_per_device for e in runs),
        mfu_pct=finite_mean(e.mfu_pct for e in runs),
        peak_tflops=_first(e.peak_tflops for e in runs),
        peak_source=_first(e.peak_source for e in runs),
        source=_first(e.source for e in runs),
        flops_per_token=_first(e.flops_per_token for e in runs),
        flops_params=_first(e.flops_params for e in runs),
        afbench_tflops_per_device=finite_mean(e.afbench_tflops_per_device for e in runs),
        afbench_mfu_pct=finite_mean(e.afbench_mfu_pct for e in runs),
        afbench_source=_first(e.afbench_source for e in runs),
    )


def memory_change(b: Side, v: Side, warn_pct: float) -> MemoryChange:
    """The variant's peak memory against the baseline's, on the first kind of
    :data:`MEMORY_MEASURES` both sides measured; ``warn`` when it rises more than
    ``warn_pct`` percent."""
    measure = next(
        (
            name
            for _, name in MEMORY_MEASURES
            if b.memory.of(name) is not None and v.memory.of(name) is not None
        ),
        None,
    )
    if measure is None:
        return MemoryChange(warn_pct=warn_pct)
    base, var = b.memory.of(measure), v.memory.of(measure)
    pct = (var - base) / base * 100.0 if base > 0 else None
    return MemoryChange(
        measure=measure,
        baseline_gib=base,
        variant_gib=var,
        delta_gib=var - base,
        delta_pct=pct,
        warn_pct=warn_pct,
        warn=pct is not None and pct > warn_pct,
    )


def caveats_of(b: Side, v: Side, memory: MemoryChange, speed: Speed | None = None) -> list[Message]:
    """What the verdict line carries beside the verdict, as catalog messages (their ``text``
    is the English): a memory rise above ``report.memory_warn_pct``, each side's
    recompile inside its measured window, and a window that started too early (flagged steps
    opening the deciding runs' windows, ``speed.n_leading_*``: left out of their medians)."""
    out = []
    if speed is not None and (speed.n_leading_baseline or speed.n_leading_variant):
        out.append(
            say(
                "caveat_window_early",
                variant=v.name,
                baseline=b.name,
                variant_n=speed.n_leading_variant,
                baseline_n=speed.n_leading_baseline,
            )
        )
    if memory.warn:
        out.append(
            say(
                "caveat_memory",
                measure=memory.measure,
                delta_pct=memory.delta_pct,
                delta_gib=memory.delta_gib,
                baseline=b.name,
                warn_pct=memory.warn_pct,
            )
        )
    for x in (v, b):
        if x.recompile and x.recompile_after_step is not None:
            out.append(say("caveat_recompile", variant=x.name, step=x.recompile_after_step))
        elif x.recompile:  # a summary written before the step was kept
            out.append(Message(key="", text=f"{x.name} {x.recompile}"))
    return out


def compile_cost(b: Side, v: Side, speed: Speed, compiled: bool = True) -> Compile:
    """Compile overhead (variant's time to first step - its mean step time, s) and the steps
    its per-step saving over the baseline needs to pay that back (None without a saving).
    Empty for a variant that compiles nothing (``compiled`` False: no autofuse, no graph
    mode), whose first step is no compile and whose "break-even" would be noise."""
    if not compiled:
        return Compile()
    kernel_cache = v.first_step_kernel_cache
    overhead = (
        v.first_step_s - v.mean_step_s if v.first_step_s is not None and v.mean_step_s else None
    )
    # the per-step saving is the verdict's own gain (of the run medians) applied to the
    # baseline's step time, so break-even and verdict never disagree in sign when one
    # loaded run moves the means
    saving = (
        b.mean_step_s * speed.gain_pct / 100.0
        if speed.gain_pct is not None and b.mean_step_s
        else None
    )
    return Compile(
        overhead_s=overhead,
        kernel_cache=kernel_cache,
        break_even_steps=(
            overhead / saving if overhead is not None and saving and saving > 0 else None
        ),
    )


def failure_reasons(col: Collected, ids: list[str]) -> list[Message]:
    """Why a side has no number: the reasons of its runs that did not succeed, then the
    strict-parse errors of its logs, each as the message ``run_reason`` (English text
    ``run_id: reason``; the run's recorded reason message nested, a log error as written)."""
    pair = col.runs[col.runs.run_id.isin(ids)]
    found = [
        (r.run_id, col.reasons[r.run_id])
        for r in pair.itertuples()
        if r.status != "OK" and r.run_id in col.reasons
    ]
    found += [(r.run_id, as_written(r.log_error)) for r in pair.itertuples() if r.log_error]
    return [say("run_reason", run=run, reason=reason) for run, reason in found]
