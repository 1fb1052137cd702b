"""Compare every variant with the baseline: verdicts, gains, parity, compile cost, profiling
status, kernel tables. Pure functions over :class:`afbench.collect.Collected` that build the
typed results of :mod:`afbench.store`; :func:`compare` returns the :class:`Summary` written as
``summary.json`` and handed to the report templates."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pandas as pd

from afbench.analysis import kernels as K
from afbench.analysis.contention import uniform_slowdown
from afbench.analysis.fusion import rmsnorm_evidence
from afbench.analysis.op_table import op_rows
from afbench.collect import Collected
from afbench.compare.parity import (
    PLACEHOLDER_LOSS_REASON,
    generation_parity,
    loss_parity,
    parity_of,
)
from afbench.compare.profiling import (
    kernel_tables,
    op_table_note,
    profiler_labels,
    profiling_pair,
    profiling_reason,
    step_device_time,
)
from afbench.compare.sides import (
    caveats_of,
    compile_cost,
    efficiency_of,
    failure_reasons,
    first_step,
    memory_change,
    memory_of,
    run_ids,
    side,
    status_of,
)
from afbench.compare.speed import (
    VerdictPairs,
    contention_reason,
    decided_runs,
    dotted,
    sequential_design,
    speed_of,
    verdict_pairs,
)
from afbench.config.models import ReportConfig
from afbench.config.verdict import VerdictConfig
from afbench.messages import Message, say
from afbench.runspec import INTERRUPTED_REASON, Plan
from afbench.store import (
    Comparison,
    Environment,
    FusedEvidence,
    KernelDiffRow,
    KernelRow,
    PhaseParameters,
    ProfilingComparison,
    RunResult,
    Side,
    Speed,
    StepDeviceTime,
    Summary,
    SwitchRecord,
)
from afbench.switches.registry import compiles, requested_not_reported
from afbench.verdict import INCONCLUSIVE, RUN_FAILED, SKIPPED, verdict_word
from afbench.verdict.sequential import INTERRUPTED_STOP

# the package's API: the comparison and the pieces the sweep, the history and the tests use
__all__ = [
    "CAVEAT",
    "PLACEHOLDER_LOSS_REASON",
    "VerdictPairs",
    "caveats_of",
    "compare",
    "compare_pair",
    "comparisons",
    "compile_cost",
    "efficiency_of",
    "failure_reasons",
    "first_step",
    "generation_parity",
    "kernel_tables",
    "loss_parity",
    "memory_change",
    "memory_of",
    "op_table_note",
    "parity_of",
    "profiler_labels",
    "profiling_pair",
    "profiling_reason",
    "contention_reason",
    "run_ids",
    "sequential_design",
    "side",
    "speed_of",
    "status_of",
    "step_device_time",
    "switch_records",
    "verdict_pairs",
    "workload_of",
]


#: ``summary.caveat`` of a one-round experiment: the templates word it (labels.yaml
#: ``caveat_text``); summaries before the verdict library stored the English sentence here.
CAVEAT = "one_round"


def compare_pair(
    col: Collected,
    b: Side,
    variant: str,
    report: ReportConfig,
    settings: VerdictConfig,
    rtol: float,
    aa: bool,
) -> Comparison:
    """One variant against the baseline side ``b`` on the verdict phase, decided by the
    ``settings`` (the ``verdict`` section; ``report``: its memory caveat)."""
    phase, workload = col.plan.verdict_phase, workload_of(col)
    v = side(col, variant, phase, workload, settings.contention == "set_aside")
    interrupted = _interrupted(col, run_ids(col, variant, phase) + run_ids(col, b.name, phase))
    if (v.skipped and b.ok) or (interrupted and "FAILED" not in b.statuses + v.statuses):
        # a run stopped by Ctrl-C (or SIGTERM) is SKIPPED, interrupted: nothing failed
        verdict, speed = (
            SKIPPED,
            Speed(level=settings.confidence, stop_reason=INTERRUPTED_STOP if interrupted else None),
        )
    elif not (b.ok and v.ok and b.repeats_s and v.repeats_s):
        verdict, speed = (
            RUN_FAILED,
            Speed(level=settings.confidence, stop_reason=_stop_reason(col.plan, variant)),
        )
    else:
        speed = speed_of(col, variant, settings)
        verdict = verdict_word(speed.decision or INCONCLUSIVE, variant)
        # every table beside the verdict rests on the runs of the pairs it decided on
        used = decided_runs(col, variant, speed)
        # (no pair decided: the quiet runs, labelled as no verdict, whatever verdict.contention)
        b = side(col, b.name, phase, workload, True, used)
        v = side(col, variant, phase, workload, True, used)
    parity = parity_of(col, b, v, phase, workload, rtol)
    memory = memory_change(b, v, report.memory_warn_pct)
    caveat_msgs = caveats_of(b, v, memory, speed)
    if settings.contention == "keep" and speed.ci_low_pct is not None:
        # the measured-contended runs whose pairs decided (not set aside as outliers)
        measured = verdict_pairs(col.plan, variant, col.window_steps, col.results)
        aside = {a.pair for a in speed.set_aside}
        kept = [
            i
            for k, (ids, flags) in enumerate(zip(measured.ids, measured.contended), 1)
            if k not in aside
            for i, f in zip(ids, flags)
            if f
        ]
        if kept:
            caveat_msgs.append(say("caveat_contention_kept", runs=", ".join(kept)))
    caveats = [m.text for m in caveat_msgs]
    reasons = failure_reasons(col, run_ids(col, variant, phase) + run_ids(col, b.name, phase))
    return Comparison(
        baseline=b,
        variant=v,
        phase=phase,
        workload=workload,
        verdict=verdict,
        verdict_line="",  # worded by the report (templates/verdict_words.j2: fill_lines)
        speed=speed,
        parity=parity,
        compile=compile_cost(b, v, speed, _compiles(col, variant)),
        memory=memory,
        caveats=caveats,
        caveat_msgs=caveat_msgs,
        aa=aa,
        reasons=[m.text for m in reasons],
        reason_msgs=reasons,
    )


def _contended_profile(col: Collected, pc: ProfilingComparison) -> ProfilingComparison:
    """``pc`` INCOMPARABLE when a profile run it rests on was measured as contended (its
    op times carry the other jobs' load, as a train run's step times do): the clause
    ``profiling_contended`` naming each such run and why goes first."""
    ids = [run_ids(col, n, col.plan.profile_phase)[0] for n in (pc.baseline, pc.variant)]
    found = [d for d in (contention_reason(col.results.get(i), i) for i in ids) if d[0]]
    if not found:
        return pc
    clause = say("profiling_contended", runs=[m.model_dump() for _, m in found if m])
    items = [
        clause.model_dump(),
        *(
            (pc.reason_msg.args.get("items") or [])
            if pc.reason_msg and pc.status != "COMPARABLE"
            else []
        ),
    ]
    return pc.model_copy(
        update={
            "status": "INCOMPARABLE",
            "reason": clause.text,
            "reason_msg": say("clauses", items=items),
        }
    )


def switch_records(plan: Plan, run_id: str, result: RunResult) -> list[SwitchRecord]:
    """What each switch did in one run: the engine's reports, then every switch the run's
    config turns on that the engine did not report (``applied`` None, no detail: the command
    engine cannot see inside its program), so that the report lists every requested switch."""
    spec = next((r for r in plan.runs if r.run_id == run_id), None)
    records = list(result.switches)
    if spec is not None:
        records += [
            SwitchRecord(name=name)
            for name in requested_not_reported(spec.config, [sw.name for sw in records])
        ]
    return records


def _interrupted(col: Collected, ids: list[str]) -> bool:
    """Whether a run of ``ids`` was stopped by the user (SKIPPED with the interrupt reason)."""
    return any(
        col.reasons.get(i) is not None and col.reasons[i].key == INTERRUPTED_REASON for i in ids
    )


def _compiles(col: Collected, variant: str) -> bool:
    """Whether ``variant``'s verdict-phase runs compile the model (a switch that compiles)."""
    specs = [r for r in col.plan.runs if r.variant == variant and r.phase == col.plan.verdict_phase]
    return any(compiles(r.config) for r in specs)


def _stop_reason(plan: Plan, variant: str) -> str | None:
    stop = plan.auto_stops.get(variant)
    return stop.reason if stop else None


def workload_of(col: Collected) -> str:
    """The workload (``sft`` | ``infer``) of the baseline's verdict-phase run."""
    plan = col.plan
    spec = next(
        r for r in plan.runs if r.variant == plan.baseline and r.phase == plan.verdict_phase
    )
    return spec.config.scheduler.workload


def parity_rtol(plan: Plan, variant: str, report: ReportConfig) -> float:
    """The parity tolerance of ``variant`` against the baseline: the looser of the two sides'
    dtypes' (a bfloat16 variant of a float32 baseline is judged at bfloat16's, not float32's)."""

    def rtol_of(name: str) -> float:
        spec = next(
            (r for r in plan.runs if r.variant == name and r.phase == plan.verdict_phase), None
        )
        if spec is None:
            return 0.0
        return float(getattr(report.parity, f"rtol_{spec.config.model.dtype}"))

    return max(rtol_of(plan.baseline), rtol_of(variant))


def comparisons(col: Collected, report: ReportConfig) -> list[Comparison]:
    """One :class:`Comparison` per non-baseline variant, in plan order, decided by the
    ``verdict`` settings the experiment ran with (experiment.json)."""
    plan = col.plan
    variants_cfg = col.experiment.variants
    verdict = col.experiment.verdict
    set_aside = verdict.contention == "set_aside"
    b = side(col, plan.baseline, plan.verdict_phase, workload_of(col), set_aside)
    return [
        compare_pair(
            col,
            b,
            variant,
            report,
            verdict,
            parity_rtol(plan, variant, report),
            aa=variants_cfg.get(variant) == variants_cfg.get(plan.baseline),
        )
        for variant in plan.variants
        if variant != plan.baseline
    ]


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows as dicts; a missing cell (NaN, which a float column keeps even after
    ``where(notna, None)``) is ``None``."""
    return [
        {k: None if isinstance(v, float) and v != v else v for k, v in row.items()}
        for row in df.to_dict("records")
    ]


def _run_rows(runs: pd.DataFrame, reasons: dict[str, Message]) -> list[dict[str, Any]]:
    """The runs table's rows for the summary: each run's reason its status message
    (``reasons``, :attr:`afbench.collect.Collected.reasons`), a recompile note as a catalog
    message too."""
    rows = _records(runs.where(runs.notna(), None))
    for row in rows:
        row["reason"] = reasons.get(row["run_id"])
        step = row.get("recompile_after_step")
        if row.get("recompile") and step is not None:
            row["recompile_after_step"] = int(step)
            row["recompile_msg"] = say("run_recompile", step=int(step))
    return rows


def compare(col: Collected, report: ReportConfig) -> Summary:
    """Build the summary: one comparison per non-baseline variant on the verdict phase, one
    profiling status per variant on the profile phase, kernel tables, parameters, runs."""
    plan = col.plan
    base = plan.baseline
    comps = comparisons(col, report)
    profiling: list[ProfilingComparison] = []
    kernels: dict[str, list[KernelRow]] = {}
    kernel_diffs: dict[str, list[KernelDiffRow]] = {}
    kernel_notes: dict[str, Message] = {}
    op_table_notes: dict[str, Message] = {}
    fused_evidence: dict[str, FusedEvidence] = {}
    per_step: dict[str, StepDeviceTime] = {}
    if plan.profile_phase is not None:
        spec = next(r for r in plan.runs if r.variant == base and r.phase == plan.profile_phase)
        # profiler step ids are 0-based (docs/reference.md §1)
        expected = [s - 1 for s in spec.config.optimization.profiler_window.steps]
        tables = kernel_tables(col)
        # typed rows (OpRow -> KernelRow by attribute): a reader's extra column stays out
        kernels = {
            v: [
                KernelRow.model_validate(r, from_attributes=True)
                for r in op_rows(K.top_n(t, report.top_n_kernels))
            ]
            for v, t in tables.items()
        }
        op_table_notes = {
            v: note
            for v in plan.variants
            if v not in tables
            for note in [op_table_note(col, v)]
            if note is not None
        }
        for variant in plan.variants:
            rid = run_ids(col, variant, plan.profile_phase)[0]
            found = (
                step_device_time(col.out_dir, rid) if status_of(col.runs, [rid]) == ["OK"] else None
            )
            if found is not None:
                per_step[variant] = found
        for variant in plan.variants:
            if variant == base:
                continue
            profiling.append(_contended_profile(col, profiling_pair(col, variant, expected)))
            if base in tables and variant in tables:
                diff = K.diff_kernel_tables(tables[base], tables[variant])
                kernel_diffs[variant] = _records(diff.head(report.top_n_kernels))
                found = uniform_slowdown(_records(diff), baseline=base, variant=variant)
                if found:
                    kernel_notes[variant] = say("uniform_slowdown_note", **found)
                fused_evidence[variant] = rmsnorm_evidence(tables[base], tables[variant])

    results = {rid: r for rid, r in col.results.items() if r is not None}
    env = next(iter(results.values()), None)
    return Summary.model_validate(
        {
            "experiment": plan.experiment,
            "out_dir": str(col.out_dir),
            "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "created_at": col.experiment.created_at,
            "baseline": base,
            "verdict_phase": plan.verdict_phase,
            "profile_phase": plan.profile_phase,
            "rounds": plan.rounds,
            "skip_policy": plan.skip_policy,
            "variants": {name: dotted(over) for name, over in col.experiment.variants.items()},
            "assets": col.experiment.assets,
            "environment": env.model_dump(include=set(Environment.model_fields), exclude_none=True)
            if env
            else {},
            "parameters": _parameters(col),
            "runs": _run_rows(col.runs, col.reasons),
            "switches": {rid: switch_records(col.plan, rid, r) for rid, r in results.items()},
            "ranks": {rid: r.ranks for rid, r in results.items() if r.ranks},
            "comparisons": comps,
            "profiling": profiling,
            "kernels": kernels,
            "kernel_diffs": kernel_diffs,
            "kernel_notes": kernel_notes,
            "op_table_notes": op_table_notes,
            "fused_evidence": fused_evidence,
            "step_device_time": per_step,
            # one round per variant, and something to compare (a single variant has no verdict)
            "caveat": CAVEAT if plan.rounds == 1 and len(plan.variants) > 1 else "",
            "headline": [],  # worded by the report (templates/verdict_words.j2: fill_lines)
        }
    )


def _parameters(col: Collected) -> list[PhaseParameters]:
    """Per phase: the run parameters of the baseline's run (the variants differ only by their
    overrides, listed beside)."""
    out = []
    for phase in col.plan.phases:
        spec = next(r for r in col.plan.runs if r.phase == phase and r.variant == col.plan.baseline)
        c = spec.config
        # only the keys the run's spec holds: a key added later (scheduler.optimizer_impl) is
        # not shown with today's default for a directory written before it existed
        s = c.scheduler.model_dump(exclude_unset=True)
        s.pop("workload", None)
        out.append(
            PhaseParameters(
                phase=phase,
                workload=c.scheduler.workload,
                model=c.model.name,
                dtype=c.model.dtype,
                data=c.data.name,
                world_size=c.parallel.world_size,
                backend=c.backend.name,
                scheduler=s,
                profiler=(
                    c.optimization.profiler_window.model_dump() if c.optimization.profiler else None
                ),
            )
        )
    return out
