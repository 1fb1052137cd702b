"""Profiling status and kernel tables of the profile phase: the per-step phase tables, the op
tables and their diff, the profiler's step labels. Part of :mod:`afbench.compare`."""

from __future__ import annotations

from typing import Any

import pandas as pd

from afbench.analysis import kernels as K
from afbench.analysis import traces as T
from afbench.analysis.op_table import OP_TABLE_FILES
from afbench.analysis.steptrace import ProfilingResult, profiling_status
from afbench.collect import Collected
from afbench.compare.sides import run_ids, status_of
from afbench.messages import Message, say
from afbench.store import ProfilingComparison, StepDeviceTime


def kernel_tables(col: Collected) -> dict[str, pd.DataFrame]:
    """Variant -> normalised kernel table of its first profile run (variants with one only)."""
    tables = {}
    for variant in col.plan.variants:
        rid = run_ids(col, variant, col.plan.profile_phase)[0]
        sel = col.kernels[col.kernels.run_id == rid]
        if len(sel):
            tables[variant] = sel.drop(columns="run_id").reset_index(drop=True)
    return tables


def op_table_note(col: Collected, variant: str) -> Message | None:
    """Why ``variant``'s first profile run, which succeeded, has no op table
    (:attr:`afbench.collect.Collected.op_tables`), as a catalog message naming its folder or
    file; ``None`` when the run did not succeed or has one."""
    rid = run_ids(col, variant, col.plan.profile_phase)[0]
    found = col.op_tables.get(rid)
    if found is None or status_of(col.runs, [rid]) != ["OK"]:
        return None
    shown = [str(p.relative_to(col.out_dir)) for p in found.files]
    return say(
        f"op_table_{found.problem}",
        profile=f"runs/{rid}/profile",
        files=", ".join(shown),
        found=found.detail or say("none"),
        detail=found.detail.replace(str(found.files[0]) + ": ", "")
        if found.files
        else found.detail,
        formats=", ".join(OP_TABLE_FILES),
    )


def profiling_pair(col: Collected, variant: str, expected: list[int]) -> ProfilingComparison:
    """Profiling status of the first profile runs of ``variant`` and the baseline."""
    base, pphase = col.plan.baseline, col.plan.profile_phase
    b_id, v_id = run_ids(col, base, pphase)[0], run_ids(col, variant, pphase)[0]
    res = profiling_status(
        col.out_dir / "runs" / b_id / "profile",
        col.out_dir / "runs" / v_id / "profile",
        expected,
        baseline_failed=status_of(col.runs, [b_id]) != ["OK"],
        variant_failed=status_of(col.runs, [v_id]) != ["OK"],
    )
    phases = (
        []
        if res.means is None
        else [
            {
                "phase": ph,
                "baseline_us": float(row["baseline"]),
                "variant_us": float(row["variant"]),
            }
            for ph, row in res.means.iterrows()
        ]
    )
    labels, labels_msg = profiler_labels(col, b_id)
    return ProfilingComparison(
        variant=variant,
        baseline=base,
        phase=pphase,
        status=res.status,
        reason=res.reason,
        reason_msg=profiling_reason(res),
        phases=phases,
        device_ids={k: str(v) for k, v in res.device_ids.items()},
        profiler_steps=expected,
        step_labels=labels,
        labels_msg=labels_msg,
    )


def profiling_reason(res: ProfilingResult) -> Message:
    """:attr:`ProfilingResult.reason` as a catalog message, clause by clause (the sides named
    in the report's language, a parser's own message kept as written)."""
    ids = res.device_ids
    clauses = []
    for side, code, detail in res.parts:
        who = say(side) if side else None
        if code == "devices":
            clauses.append(
                say("profiling_devices", baseline=ids["baseline"], variant=ids["variant"])
            )
        elif code == "ok":
            clauses.append(say("profiling_ok", steps=detail, device=ids["baseline"]))
        else:
            clauses.append(say(f"profiling_{code}", side=who, detail=detail))
    return say("clauses", items=clauses)


def profiler_labels(col: Collected, run_id: str) -> tuple[list[int], Message | None]:
    """The ``ProfilerStep#N`` labels of the trace of the profile run ``run_id`` (sorted), and
    the sentence saying which training steps they are: torch.profiler's label counts its own
    steps from 0, so with ``prof.step()`` after every step the profiler window's training
    steps ``first..last`` carry the labels ``first-1..last-1``
    (:func:`afbench.analysis.traces.training_steps_of` with the window's schedule). Labels
    that do not fit the window (the run's own profiler had its own schedule, e.g. a user's
    ``schedule(wait=1, warmup=2, active=3[, repeat])``) are mapped to the training steps
    they are (label + 1, per :func:`afbench.analysis.traces.label_stretches`), with that
    schedule's cycles and active steps. ``([], None)`` without a run that succeeded, a
    trace, or labels in it."""
    if status_of(col.runs, [run_id]) != ["OK"]:
        return [], None
    profile = col.out_dir / "runs" / run_id / "profile"
    trace = T.find_trace(profile)
    if trace is None:
        return [], None
    try:
        labels = T.profiler_step_labels(trace)
    except (OSError, ValueError):
        return [], None  # the kernel tables report an unreadable trace
    if not labels:
        return [], None
    window = col.spec(run_id).config.optimization.profiler_window
    schedule = {
        "wait": window.first_step - 1 - window.warmup_steps,
        "warmup": window.warmup_steps,
        "active": len(window.steps),
    }
    training = T.training_steps_of(len(labels), schedule)
    args = dict(
        trace=str(trace.relative_to(col.out_dir)),
        first_label=labels[0],
        last_label=labels[-1],
        first_step=window.first_step,
        last_step=window.last_step,
        **schedule,
    )
    if labels == [t - 1 for t in training]:  # the schedule's steps, labelled one off
        return labels, say(
            "profiler_labels", **{**args, "first_step": training[0], "last_step": training[-1]}
        )
    # the run's own schedule (a user's profiler): label N is still training step N + 1
    stretches = T.label_stretches(labels)
    steps = ", ".join(f"{a + 1}–{b + 1}" if b > a else f"{a + 1}" for a, b in stretches)
    return labels, say(
        "profiler_labels_other",
        expected_first=window.first_step - 1,
        expected_last=window.last_step - 1,
        steps=steps,
        cycles=len(stretches),
        cycle_active=max(b - a + 1 for a, b in stretches),
        ready=labels[0],
        **args,
    )


def step_device_time(out_dir, run_id: str) -> StepDeviceTime | None:
    """Device time per profiled step from the ``kernel_details.csv`` files below the profile
    run ``run_id``'s ``profile/`` (one per profiled rank;
    :func:`afbench.analysis.kernels.kernel_details_per_step`), or the note ``per-step
    breakdown unavailable: ...`` (naming the file relative to ``out_dir``) when one has no
    ``Step Id`` column or does not parse; None without any ``kernel_details.csv`` (the report
    then says so once for the whole profile phase)."""
    shown = f"runs/{run_id}/profile"
    paths = K.find_kernel_details(out_dir / shown)
    if not paths:
        return None
    rows: list[dict[str, Any]] = []
    for path in paths:
        where = f"{shown}/{path.relative_to(out_dir / shown)}"
        try:
            found = K.kernel_details_per_step(path)
        except (OSError, ValueError) as exc:
            note = say("step_time_error", file=where, error=str(exc).removeprefix(str(path) + ": "))
            return StepDeviceTime(note=note.text, note_msg=note)
        if found.table is None:
            note = say("step_time_no_step_id", file=where)
            return StepDeviceTime(note=note.text, note_msg=note)
        rows += found.table.to_dict("records")
    return StepDeviceTime.model_validate({"rows": rows})
