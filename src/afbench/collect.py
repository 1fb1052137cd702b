"""Collect an output directory into pandas tables. Reads only files; runs nothing, so it works
offline on any (also partial) output directory."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from afbench.analysis.contention import judge
from afbench.analysis.errors import InvalidLog, LogNotRead
from afbench.analysis.op_table import OpTable, load_op_table
from afbench.analysis.reading import ReadBudget
from afbench.analysis.recompiles import (
    Recompile,
    recompile_caveat,
    recompile_in_records,
    recompile_in_window,
)
from afbench.analysis.stats import describe, finite_mean
from afbench.analysis.steplog import DEFAULT_STEP_PATTERN, iter_log, mean_step_time
from afbench.errors import OutputError
from afbench.messages import Message, say
from afbench.runspec import Plan, RunSpec

# the strict parse of a run's measured window lives with the file layout; re-exported here
from afbench.store import (
    METRICS,
    RESULT,
    RESULT_FILE,
    STDOUT_LOG,
    ExperimentRecord,
    OutDir,
    RunDir,
    RunResult,
    StepRecord,
)
from afbench.store import window_step_times as window_step_times
from afbench.switches.registry import compiles

# Per-run means over the measured window, from metrics.jsonl step records.
MEANS = {
    "sft": ("tokens_per_s", "loss"),
    "infer": (
        "tokens_per_s",
        "ttft_ms",
        "tpot_ms_mean",
        "tpot_ms_p50",
        "tpot_ms_p90",
        "generated_tokens",
        "prompt_tokens",
    ),
}


@dataclass
class Collected:
    """Everything known about one output directory.

    runs: one row per RunSpec (run_id, variant, phase, repeat, status, exit_code, reason (the
      English text of its status reason: a table holds text; the message is in ``reasons``),
      wall_s, mean_step_s (strict log parse of the measured window, seconds), log_error,
      first_step_s, tokens_per_s (mean over the window), recompile (a compiled run's
      :func:`recompile_caveat` when it recompiled inside the measured window, else ""),
      recompile_after_step (that recompile's step, else None), the contention columns of
      :func:`contention_columns` (``contended``: bool, None when not measured;
      ``contention_reasons``), ``replaced_by`` / ``rerun_of`` (reruns of contended runs),
      ``lock_wait_s``), ``kernel_cache`` (a compiled run's status.json ``kernel_cache``:
      "warm", "cold", None when not recorded or the run compiles nothing). Runs replaced by
      a rerun are rows too.
    steps: one row per logged step from metrics.jsonl (run_id, variant, phase, repeat, step,
      step_time_s, loss, grad_norm, tokens_per_s) or per decode run for inference.
    kernels: run_id + the normalised kernel table (op_type, count, total_us, ratio_pct).
    results: run_id -> its result.json (None for a run without one); its ``contention`` is
      the run's typed contention record (:class:`afbench.store.Contention`).
    window_steps: run_id -> the measured window's step times in step order (seconds, the
      strict log parse), for every OK run whose log passes it (the paired statistics' input).
    reasons: run_id -> its status.json reason (a catalog message; ``run_not_run`` for a run
      never started), for every run that has one.
    """

    out_dir: Path
    plan: Plan
    experiment: ExperimentRecord
    runs: pd.DataFrame
    steps: pd.DataFrame
    kernels: pd.DataFrame
    results: dict[str, RunResult | None] = field(default_factory=dict)
    window_steps: dict[str, list[float]] = field(default_factory=dict)
    # run_id -> what load_op_table found in a run's profile/ folder that gave no op table
    # (no file of any format, no kernels in it, or a file that does not parse)
    op_tables: dict[str, OpTable] = field(default_factory=dict)
    reasons: dict[str, Message] = field(default_factory=dict)

    def spec(self, run_id: str) -> RunSpec:
        return next(r for r in launched_runs(self.plan) if r.run_id == run_id)


def _step_records(path: Path) -> list[StepRecord]:
    """The ``step`` records of a metrics.jsonl (other kinds, e.g. inference ``decode``, are
    left out)."""
    out = []
    if not path.is_file():
        return out
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by a crash; the strict log parse decides validity
        if rec.get("kind") == "step":
            try:
                out.append(StepRecord.model_validate(rec))
            except ValueError as exc:
                raise OutputError(
                    f"{path}: step record {line[:120]!r} does not fit the step "
                    f"schema: {str(exc).splitlines()[1:3]}"
                ) from exc
    return out


def run_result(path: Path) -> RunResult | None:
    """``result.json`` at ``path`` as a :class:`RunResult`; ``None`` when there is none.

    Raises:
        OutputError: a malformed result (names the file).
    """
    return RESULT_FILE.read(path) if path.exists() else None


def _recompile(spec: RunSpec, run_dir: Path, records: list[StepRecord]) -> Recompile | None:
    """The first recompile of a compiled run (autofuse / npugraph_ex) inside its measured
    window, from its log's dynamo warnings or the builtin engine's graph counter; None
    otherwise."""
    if not compiles(spec.config):
        return None
    w = spec.config.scheduler.measure
    pattern = getattr(spec.config.engine, "step_pattern", None) or DEFAULT_STEP_PATTERN
    log = run_dir / STDOUT_LOG
    text = iter_log(log) if log.is_file() else ""
    try:
        found = recompile_in_window(text, w.first_step, w.last_step, pattern)
    except LogNotRead:  # an OK run's log_error says so; a failed run's log tells nothing more
        found = None
    return found or recompile_in_records(
        [r.model_dump() for r in records], w.first_step, w.last_step
    )


def run_dir_of(out_dir: Path, spec: RunSpec) -> Path:
    """The run directory of ``spec`` in the output directory ``out_dir``: ``runs/<run_id>``
    beside plan.json (:meth:`afbench.store.OutDir.run`), so a copied or moved output directory
    reads only its own runs even while the original still exists; a folder missing there is a
    run that did not run, never read from the plan's original path."""
    return OutDir(Path(out_dir)).run(spec).path


def launched_runs(plan: Plan) -> list[RunSpec]:
    """Every run of ``plan`` in launch order: ``plan.runs`` with each run replaced by a rerun
    (``plan.reruns``, experiment.rerun_contended) just before the run that replaced it."""
    before = {r.by: r.replaced for r in plan.reruns}
    out: list[RunSpec] = []
    for spec in plan.runs:
        chain, cur = [], spec.run_id
        while cur in before:
            chain.insert(0, before[cur])
            cur = before[cur].run_id
        out += [*chain, spec]
    return out


def contention_columns(result: RunResult | None) -> dict[str, Any]:
    """The runs table's contention columns of a run (:class:`afbench.store.RunRow`):
    ``contended`` and ``contention_reasons`` (:func:`afbench.analysis.contention.judge`, the
    reasons' English ``"; "``-joined: a data column, the report words the codes itself), the
    measures the report shows and the record's scope; None where the run has no contention
    record."""
    record = result.contention if result is not None else None
    contended, reasons = judge(record)
    return {
        "contended": contended,
        "contention_reasons": "; ".join(say(code, **values).text for code, values in reasons),
        **{
            key: getattr(record, attr, None)
            for key, attr in (
                ("cpu_pressure_pct", "cpu_pressure_pct"),
                ("steal_pct", "steal_pct"),
                ("run_queue_wait_pct", "run_queue_wait_pct"),
                ("cpu_per_wall", "cpu_per_wall"),
                ("threads", "threads"),
                ("contention_scope", "scope"),
            )
        },
    }


def collect(out_dir: Path) -> Collected:
    """Read plan.json, experiment.json and every run directory below ``out_dir``; a run
    replaced by a rerun (experiment.rerun_contended) is a row of ``runs`` (``replaced_by``
    names the rerun; the rerun's ``rerun_of`` names it) but gives no ``window_steps``."""
    out_dir = Path(out_dir)
    plan, experiment = OutDir(out_dir).plan(), OutDir(out_dir).experiment()
    run_rows, step_rows, kernel_frames, results, window_steps = [], [], [], {}, {}
    op_tables: dict[str, OpTable] = {}
    reasons: dict[str, Message] = {}
    replaced_by = {r.replaced.run_id: r.by for r in plan.reruns}
    rerun_of = {r.by: r.replaced.run_id for r in plan.reruns}
    for spec in launched_runs(plan):
        run_dir = run_dir_of(out_dir, spec)
        status = RunDir(run_dir).status()
        result = run_result(run_dir / RESULT)
        results[spec.run_id] = result
        reason = status.reason if status else say("run_not_run")
        if reason is not None:
            reasons[spec.run_id] = reason
        ident = {
            "run_id": spec.run_id,
            "variant": spec.variant,
            "phase": spec.phase,
            "repeat": spec.repeat,
        }
        row: dict[str, Any] = {
            **ident,
            "status": status.status if status else "NOT_RUN",
            "exit_code": status.exit_code if status else None,
            "reason": reason.text if reason else "",
            "wall_s": status.wall_s if status else None,
            "mean_step_s": None,
            "log_error": "",
            "first_step_s": result.first_step_s if result else None,
            "tokens_per_s": None,
            "workload": spec.config.scheduler.workload,
            "step_cv_pct": None,
            "recompile": "",
            **contention_columns(result),
            "replaced_by": replaced_by.get(spec.run_id),
            "rerun_of": rerun_of.get(spec.run_id),
            "lock_wait_s": status.lock_wait_s if status else None,
            "recompile_after_step": None,
            # a compiled run's compiler caches when it started (warm: kernels built by an
            # earlier run of the experiment); None for a run that compiles nothing
            "kernel_cache": (status.kernel_cache if status and compiles(spec.config) else None),
        }
        records = _step_records(run_dir / METRICS)
        for rec in records:
            # only the keys the engine wrote: the steps table keeps today's columns
            step_rows.append({**ident, **rec.model_dump(exclude={"kind"}, exclude_unset=True)})
        sched = spec.config.scheduler
        window = sched.measure
        in_window = [r for r in records if window.first_step <= r.step <= window.last_step]
        budget = ReadBudget(spec.collect_timeout_s)  # a run's log reads, all together
        if row["status"] == "OK":
            try:
                with budget:
                    times = window_step_times(spec, run_dir)
                row["mean_step_s"] = mean_step_time(times)
                if spec.run_id not in replaced_by:  # a replaced run stays out of the verdict
                    window_steps[spec.run_id] = [times[s] for s in sorted(times)]
            except InvalidLog as exc:
                row["log_error"] = str(exc)
            for key in MEANS[sched.workload]:
                row[key] = finite_mean(getattr(r, key) for r in in_window)
            times_s = [r.step_time_s for r in in_window if r.step_time_s]
            tokens = [r.tokens or r.generated_tokens for r in in_window]
            if times_s and all(tokens) and len(tokens) == len(times_s):
                # tokens/s of the window = its tokens / its time (not a mean of per-step rates)
                row["tokens_per_s"] = sum(tokens) / sum(times_s)
            finite = [t for t in times_s if math.isfinite(t)]
            if len(finite) >= 2:
                row["step_cv_pct"] = 100.0 * describe(finite)["cv"]
            with budget:
                found = _recompile(spec, run_dir, records)
            # a string column ("" for none: pandas would turn None into NaN)
            row["recompile"] = recompile_caveat(found) if found else ""
            row["recompile_after_step"] = found.after_step if found else None
            if result is not None and result.sanity is not None:
                row["sanity"] = result.sanity["status"]
            if row["log_error"]:  # an invalid log yields no statistics at all
                for key in (*MEANS[sched.workload], "tokens_per_s", "step_cv_pct"):
                    row[key] = None
        run_rows.append(row)
        if (run_dir / "profile").is_dir():
            with budget:  # a trace read past it is UNREADABLE, its message kept
                found = load_op_table(run_dir / "profile")
            if found.table is not None:
                kernel_frames.append(found.table.assign(run_id=spec.run_id))
            else:
                op_tables[spec.run_id] = found
    kernels = (
        pd.concat(kernel_frames, ignore_index=True)
        if kernel_frames
        else pd.DataFrame(columns=["op_type", "count", "total_us", "ratio_pct", "run_id"])
    )
    return Collected(
        out_dir,
        plan,
        experiment,
        pd.DataFrame(run_rows),
        pd.DataFrame(step_rows),
        kernels,
        results,
        window_steps,
        op_tables,
        reasons,
    )
