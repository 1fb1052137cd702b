"""The verdict's input and call for one comparison: the verdict-phase runs paired by round, each
run's measured contention, and :mod:`afbench.verdict` at the plan's design (one round, fixed
rounds, the sequential replay). Part of :mod:`afbench.compare`."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from afbench.analysis.contention import judge
from afbench.analysis.stats import finite_mean
from afbench.collect import Collected
from afbench.config.verdict import VerdictConfig
from afbench.messages import Message, say
from afbench.runspec import AutoDesign, Plan
from afbench.store import Speed
from afbench.verdict import (
    AUTO,
    INCONCLUSIVE,
    ONE_ROUND,
    SEQUENTIAL,
    Design,
    SequentialTest,
    compare_runs,
    gain_pct,
    quick_verdict,
)
from afbench.verdict.calibration import RunSpread
from afbench.verdict.estimate import CALIBRATION_STALE, CALIBRATION_UNFIT
from afbench.verdict.sequential import INTERRUPTED_STOP


def sequential_design(auto: AutoDesign, with_budget: bool = True) -> Design:
    """The :class:`afbench.verdict.Design` of a plan's ``rounds=auto`` settings (the
    time budget left out with ``with_budget=False``: offline there is no clock to hold it
    against)."""
    return Design(
        rounds=AUTO,
        level=auto.level,
        min_pairs=auto.min_pairs,
        max_pairs=auto.max_pairs,
        precision_pct=auto.precision_pct,
        time_budget_s=auto.time_budget_s if with_budget else None,
        min_gain_pct=auto.min_gain_pct,
    )


def contention_reason(result: Any, run_id: str) -> tuple[bool, Message | None]:
    """Whether a run was measured contended, and why: the reasons of
    :func:`afbench.analysis.contention.judge` of ``result.json``'s ``contention``
    record as the message ``run_reason`` (``<run_id>: <reason>; <reason>``, each reason a
    ``cont_reason_*`` message with its numbers, worded by the report); ``(False, None)`` when
    not measured or nothing crossed a threshold."""
    contended, reasons = judge(getattr(result, "contention", None))
    if not reasons:
        return bool(contended), None
    return bool(contended), say(
        "run_reason",
        run=run_id,
        reason=[say(code, **values).model_dump() for code, values in reasons],
    )


@dataclass
class VerdictPairs:
    """The verdict's input for one variant: per round, the measured step times (seconds) of
    the baseline's and the variant's verdict-phase runs, and each run's measured contention."""

    baseline: list[list[float]]
    variant: list[list[float]]
    contended: list[tuple[bool, bool]]
    detail: list[list[dict[str, Any]]]  # per pair: run_reason messages (JSON), maybe none
    ids: list[tuple[str, str]] = field(default_factory=list)  # per pair: (baseline, variant) run


def verdict_pairs(
    plan: Plan, variant: str, steps: dict[str, list[float]], results: dict[str, Any] | None = None
) -> VerdictPairs:
    """The baseline's and ``variant``'s verdict-phase runs paired by round (the runs of one
    round ran adjacently), in round order; a round where either run has no entry in ``steps``
    (run_id -> step times) is left out. ``results`` (run_id -> result.json) gives each run's
    measured contention, whatever verdict.contention says (the verdict decides what it does
    with it: ``keep_contended`` of :func:`afbench.verdict.compare_runs`)."""
    by_repeat: dict[int, dict[str, str]] = {}
    for r in plan.runs:
        if r.phase == plan.verdict_phase and r.variant in (plan.baseline, variant):
            by_repeat.setdefault(r.repeat, {})[r.variant] = r.run_id
    out = VerdictPairs([], [], [], [])
    for repeat in sorted(by_repeat):
        ids = by_repeat[repeat]
        b_id, v_id = ids.get(plan.baseline), ids.get(variant)
        if b_id in steps and v_id in steps:
            (cb, db), (cv, dv) = (
                contention_reason((results or {}).get(i), i) for i in (b_id, v_id)
            )
            out.baseline.append(steps[b_id])
            out.variant.append(steps[v_id])
            out.contended.append((cb, cv))
            out.detail.append([d.model_dump() for d in (db, dv) if d])
            out.ids.append((b_id, v_id))
    return out


def decided_runs(col: Collected, variant: str, speed: Speed) -> list[str]:
    """The run ids (baseline's and ``variant``'s) of the pairs ``speed`` rests on: the
    verdict-phase pairs it looked at (``n_pairs_run``: a sequential verdict's last look) less
    those it set aside; ``[]`` when none decided."""
    if not speed.n_pairs:
        return []
    ids = verdict_pairs(col.plan, variant, col.window_steps, col.results).ids
    aside = {a.pair for a in speed.set_aside}
    return [
        i
        for k, pair in enumerate(ids[: speed.n_pairs_run or len(ids)], 1)
        if k not in aside
        for i in pair
    ]


def _auto_speed(plan: Plan, variant: str, pairs: VerdictPairs, keep: bool) -> Any:
    """The sequential verdict at the loop's last look, replayed from the stored runs and design:
    the recorded stop reason (``interrupted`` when none was recorded). A time-budget stop gets
    the final analysis that spends the error left; before the first look (the loop ended
    early), no boundary was spent yet and the fixed-n paired t at the full level is the honest
    interval."""
    assert plan.auto is not None  # rounds == "auto" plans carry their design
    design = sequential_design(plan.auto, with_budget=False)
    stop = plan.auto_stops.get(variant)
    n = min(len(pairs.baseline), stop.n_pairs if stop else len(pairs.baseline))
    reason = stop.reason if stop else INTERRUPTED_STOP
    test = SequentialTest(
        design,
        pairs.baseline[:n],
        pairs.variant[:n],
        pairs.contended[:n],
        pairs.detail[:n],
        keep_contended=keep,
    )
    speed = test.speed(reason)
    if speed.ci_low_pct is None and speed.n_pairs >= 2:
        fixed = compare_runs(
            pairs.baseline[:n],
            pairs.variant[:n],
            confidence=design.level,
            min_gain_pct=design.min_gain_pct,
            contended=pairs.contended[:n],
            contention_detail=pairs.detail[:n],
            keep_contended=keep,
        )
        speed = replace(fixed, design=SEQUENTIAL, stop_reason=reason)
    return speed


def dotted(overrides: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` for display."""
    out: dict[str, Any] = {}
    for key, value in overrides.items():
        if isinstance(value, dict) and value:
            out.update(dotted(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def calibration_advice(col: Collected, variant: str) -> dict[str, str | None]:
    """What the report's advice names to calibrate this comparison: the recipe of its
    workload (:func:`afbench.plan.calibration_recipe`) and the variant's overrides as
    ``key=value`` (``None``: it sets nothing, its runs are the baseline's kind)."""
    from afbench.plan import calibration_recipe

    spec = next(r for r in col.plan.runs if r.variant == variant)
    over = dotted(col.experiment.variants.get(variant) or {})
    switch = " ".join(
        f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in over.items()
    )
    return {
        "calibrate_recipe": calibration_recipe(spec.config.scheduler.workload),
        "calibrate_switch": switch or None,
    }


def speed_of(col: Collected, variant: str, verdict: VerdictConfig) -> Speed:
    """The verdict on ``variant``'s speed from the stored runs (``col.window_steps``), by
    :mod:`afbench.verdict` at the plan's design and the ``verdict`` settings: ``rounds=auto``:
    the sequential verdict at the last look (:func:`_auto_speed`); otherwise
    :func:`afbench.verdict.compare_runs`, with the host calibration the experiment recorded
    (``experiment.json``'s ``calibration``) and each run's measured contention. One round
    carries the reference's quick verdict beside it. Callers handle failed and skipped sides
    first (no round, no Speed)."""
    plan = col.plan
    pairs = verdict_pairs(plan, variant, col.window_steps, col.results)
    keep = verdict.contention == "keep"
    advice = calibration_advice(col, variant)
    if not pairs.baseline:
        return Speed(
            level=verdict.confidence,
            decision=INCONCLUSIVE,
            no_interval_reason="no_pairs_left",
            **advice,
        )
    if plan.rounds == "auto" and plan.auto is not None:
        return Speed.of(_auto_speed(plan, variant, pairs, keep), **advice)
    calibration = col.experiment.calibration_dict()
    speed = compare_runs(
        pairs.baseline,
        pairs.variant,
        confidence=verdict.confidence,
        min_gain_pct=verdict.min_gain_pct,
        contended=pairs.contended,
        contention_detail=pairs.detail,
        keep_contended=keep,
        calibration=RunSpread.of(calibration) if calibration else None,
    )
    beside: dict[str, Any] = dict(advice)
    if (
        speed.spread_source and "calibration" in speed.spread_source
    ) or speed.no_interval_reason in (CALIBRATION_STALE, CALIBRATION_UNFIT):
        beside["calibration"] = calibration  # which one decided, or was refused
    if speed.design == ONE_ROUND:
        mb, mv = finite_mean(pairs.baseline[0]), finite_mean(pairs.variant[0])
        beside.update(
            reference_verdict=quick_verdict(variant, mb, mv, failed=False),
            reference_gain_pct=gain_pct(mb, mv),
        )
    return Speed.of(speed, **beside)
