"""An output directory as rows of the history database, and writing them.

:func:`extract` reads a finished experiment directory through :mod:`afbench.store` (plan,
summary, experiment.json, each verdict-phase run's status, result and strict step-log
window) and returns one :class:`Extracted`: the ``experiments`` row, and per variant its
``records`` row with its ``runs`` rows (column names of :mod:`afbench.history.schema`).
:func:`write` inserts it in one transaction, or does nothing when the directory is already
recorded. Nothing is written to the output directory.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.exc import IntegrityError

from afbench.analysis.contention import judge
from afbench.analysis.errors import InvalidLog
from afbench.errors import OutputError
from afbench.history.db import utcnow
from afbench.history.schema import experiments, records, runs
from afbench.runspec import Plan, RunSpec
from afbench.store import Comparison, OutDir, Side, Summary, window_step_times
from afbench.switches.registry import switch_names
from afbench.verdict.runs import run_statistic


@dataclass
class VariantRows:
    record: dict[str, Any]
    runs: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Extracted:
    """One output directory's rows: ``experiment`` (an ``experiments`` row without ``id``)
    and ``variants`` (one :class:`VariantRows` per variant, plan order)."""

    experiment: dict[str, Any]
    variants: list[VariantRows]


def _utc(text: str | None) -> datetime | None:
    """An ISO time as naive UTC (naive input is taken as UTC); None when absent or unparsable."""
    if not text:
        return None
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        return None
    return t.astimezone(timezone.utc).replace(tzinfo=None) if t.tzinfo else t


def _finite(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and math.isfinite(x) else None


def _run_rows(out: OutDir, plan: Plan, variant: str) -> tuple[list[dict[str, Any]], list[Any]]:
    """The ``runs`` rows of ``variant``'s verdict-phase runs, and their RunResults (None
    where a run wrote none)."""
    rows, results = [], []
    for spec in plan.runs:
        if spec.variant != variant or spec.phase != plan.verdict_phase:
            continue
        rd = out.run(spec)
        st = rd.status()
        status = st.status if st else "NOT_RUN"
        times: list[float] | None = None
        if status == "OK":
            try:
                window = window_step_times(spec, rd.path)
                times = [window[k] for k in sorted(window)]
            except (InvalidLog, OSError):
                status = "FAILED"  # the report says RUN_FAILED for it too
        try:
            result = rd.result()
        except OutputError:
            result = None
        results.append(result)
        # result.json's contention (a field of RunResult, not an extra: read it as one)
        measured = getattr(result, "contention", None)
        contention = measured.model_dump(mode="json") if measured is not None else None
        stat = run_statistic(times) if times else None
        reused = (st.reason.text if st and st.reason else "").partition(RESUMED)[2] or None
        rows.append(
            {
                "resumed_from": reused,
                "run_id": spec.run_id,
                "repeat": spec.repeat,
                "status": status,
                "median_step_s": stat.location_s if stat else None,
                "mean_step_s": statistics.fmean(times) if times else None,
                "n_steps": len(times) if times else 0,
                "step_times_s": times,
                "contention": contention,
                "contended": judge(contention)[0],
            }
        )
    return rows, results


def _side(summary: Summary, variant: str) -> tuple[Side | None, Comparison | None]:
    for c in summary.comparisons:
        if c.variant.name == variant:
            return c.variant, c
    for c in summary.comparisons:
        if c.baseline.name == variant:
            return c.baseline, None
    return None, None


def _first_spec(plan: Plan, variant: str) -> RunSpec | None:
    return next(
        (s for s in plan.runs if s.variant == variant and s.phase == plan.verdict_phase), None
    )


def _record_row(
    out: OutDir, plan: Plan, summary: Summary, variant: str, run_rows: list[dict[str, Any]]
) -> dict[str, Any]:
    spec = _first_spec(plan, variant)
    side, comp = _side(summary, variant)
    speed = comp.speed if comp else None
    ok = [r for r in run_rows if r["step_times_s"]]
    if side is not None and side.runs_used:  # the runs the report's numbers rest on
        ok = [r for r in ok if r["run_id"] in side.runs_used] or ok
    all_steps = [t for r in ok for t in r["step_times_s"]]
    switches: dict[str, Any] = {}
    if spec is not None:
        switches = {name: getattr(spec.config.optimization, name) for name in switch_names()}
    if summary.variants.get(variant):
        switches["overrides"] = summary.variants[variant]
    report = next((p for p in (out.report_html, out.report_md) if p.is_file()), None)
    memory = side.memory if side else None
    eff = side.efficiency if side else None
    return {
        "variant": variant,
        "is_baseline": variant == plan.baseline,
        "config_hash": spec.config_hash if spec else None,
        "switches": switches,
        "report_path": str(report) if report else None,
        "verdict": comp.verdict if comp else ("BASELINE" if variant == plan.baseline else None),
        "decision": speed.decision if speed else None,
        "gain_pct": _finite(speed.gain_pct) if speed else None,
        "ci_low_pct": _finite(speed.ci_low_pct) if speed else None,
        "ci_high_pct": _finite(speed.ci_high_pct) if speed else None,
        "level": speed.level if speed else None,
        "n_pairs": speed.n_pairs if speed else None,
        "mde_pct": _finite(speed.mde_pct) if speed else None,
        "method": speed.method if speed else None,
        "kind": speed.kind if speed else None,
        "median_step_s": statistics.median(r["median_step_s"] for r in ok) if ok else None,
        "mean_step_s": statistics.fmean(all_steps) if all_steps else None,
        "n_steps": len(all_steps),
        "n_runs_ok": sum(1 for r in run_rows if r["step_times_s"]),
        "peak_memory_gib": _finite(memory.peak_gib) if memory else None,
        "memory_measure": memory.measure if memory else None,
        "tflops_per_device": _finite(eff.tflops_per_device) if eff else None,
        "mfu_pct": _finite(eff.mfu_pct) if eff else None,
        "tokens_per_s": _finite(side.tokens_per_s) if side else None,
    }


def extract(out: OutDir, source: str = "import") -> Extracted:
    """The rows of the finished experiment in ``out``; ``source``: ``live`` (recorded when the
    experiment ended) or ``import``.

    Raises OutputError naming the file when plan.json, summary.json or a status.json cannot
    be read."""
    out = OutDir(Path(out.path).resolve())
    plan, summary, exp = out.plan(), out.summary(), out.experiment()
    prov, host = exp.provenance, exp.provenance.host
    # a sweep job's variant carries its swept setting: one series per combination; a variant
    # that overrides a swept key (the baseline combination a paired job runs beside its own,
    # experiment.sweep_pairing=beside) carries its own value of it
    swept = out.sweep_setting()
    variants, results = [], []
    for variant in plan.variants:
        run_rows, res = _run_rows(out, plan, variant)
        results += res
        row = _record_row(out, plan, summary, variant, run_rows)
        if swept:
            own = summary.variants.get(variant) or {}
            setting = ",".join(f"{k}={own[k] if k in own else v}" for k, v in swept.items())
            row["variant"] = f"{variant} [{setting}]"
        variants.append(VariantRows(row, run_rows))
    first = next((r for r in results if r is not None and r.versions), None)
    env = first or summary.environment
    sweep = out.sweep()
    all_runs = [r for v in variants for r in v.runs]
    created = (
        _utc(exp.created_at)
        or _utc(summary.created_at)
        or _utc(summary.generated_at)
        or datetime.fromtimestamp(out.plan_path.stat().st_mtime, timezone.utc).replace(tzinfo=None)
    )
    row = {
        "out_dir": str(out.path),
        "experiment": plan.experiment,
        "created_at": created,
        "recorded_at": utcnow(),
        "source": source,
        "baseline": plan.baseline,
        "verdict_phase": plan.verdict_phase,
        "repeats": str(plan.rounds),
        "sweep_dir": str(sweep.path) if sweep else None,
        "job": out.path.name if sweep else None,
        "n_runs": len(all_runs),
        "n_failed": sum(r["status"] == "FAILED" for r in all_runs),
        "afbench_version": prov.afbench,
        "git_commit": prov.git_commit,
        "versions": dict(env.versions or {}),
        "cann": prov.cann,
        "backend": env.backend or (plan.runs[0].backend if plan.runs else None),
        "device": env.device,
        "host_id": host.host_id,
        "hostname": host.hostname,
        "cpu_model": host.cpu_model,
        "accelerator": host.accelerator,
        "driver": host.driver,
    }
    return Extracted(row, variants)


def is_recorded(engine: Engine, out_dir: Path) -> bool:
    with engine.connect() as conn:
        return (
            conn.execute(
                select(experiments.c.id).where(
                    experiments.c.out_dir == str(Path(out_dir).resolve())
                )
            ).first()
            is not None
        )


#: The English start of the status.json reason of a run a resumed experiment copied
#: (afbench.store.resume.reuse_run: ``run_resumed``; an older one recorded it as written).
RESUMED = "resumed from "


def _same_experiment(ex: Extracted) -> Any:
    """The ``experiments`` rows ``ex`` is recorded as already: the same output directory, or
    one of the same experiment, host, start time and sweep job (a copy of the directory: its
    experiment.json is the same experiment's)."""
    e = ex.experiment
    job = experiments.c.job == e["job"] if e.get("job") is not None else experiments.c.job.is_(None)
    same = (
        (experiments.c.experiment == e["experiment"])
        & (experiments.c.host_id == e.get("host_id"))
        & job
        & (experiments.c.created_at == e["created_at"])
    )
    return select(experiments.c.id).where((experiments.c.out_dir == e["out_dir"]) | same)


def _recorded_elsewhere(conn: Any, rows: list[dict[str, Any]]) -> set[str]:
    """The run ids of ``rows`` a resumed experiment copied from an experiment recorded
    already (its status.json ``resumed from <run dir>``): that record holds them."""
    roots = {
        r["run_id"]: str(Path(r["resumed_from"]).parent.parent)
        for r in rows
        if r.get("resumed_from")
    }
    if not roots:
        return set()
    known = set(
        conn.execute(
            select(experiments.c.out_dir).where(experiments.c.out_dir.in_(set(roots.values())))
        ).scalars()
    )
    return {rid for rid, root in roots.items() if root in known}


def write(engine: Engine, ex: Extracted) -> bool:
    """Insert ``ex`` in one transaction; False (and nothing written) when it is recorded
    already (:func:`_same_experiment`: its ``out_dir``, or a copy of it elsewhere), also when
    another process recorded it at the same moment. A run a resumed experiment copied from a
    recorded one is left out of its ``runs`` rows: the history counts each run once."""
    try:
        with engine.begin() as conn:
            if conn.execute(_same_experiment(ex)).first() is not None:
                return False
            exp_id = conn.execute(
                experiments.insert().values(**ex.experiment)
            ).inserted_primary_key[0]
            for v in ex.variants:
                rec_id = conn.execute(
                    records.insert().values(experiment_id=exp_id, **v.record)
                ).inserted_primary_key[0]
                copied = _recorded_elsewhere(conn, v.runs)
                rows = [
                    {k: x for k, x in r.items() if k != "resumed_from"}
                    for r in v.runs
                    if r["run_id"] not in copied
                ]
                if rows:
                    conn.execute(runs.insert(), [{"record_id": rec_id, **r} for r in rows])
    except IntegrityError:  # the unique out_dir: a concurrent writer got there first
        return False
    return True
