"""``history check``: is the newest record of an experiment slower than its history, by more
than the noise explains? A CI performance gate (exit 1 on a regression, 0 otherwise).

The newest record of each variant is compared with up to ``window`` earlier records of the
same experiment and variant, on the same host (``host_id``) and with the same config hash: a
changed config or machine is a different measurement, not a regression. The record (one
experiment, e.g. one night) is the unit: the statistics are
:func:`afbench.verdict.compare_records` (a prediction interval of record means, so the host's
night-to-night spread is in the noise a slowdown must exceed; with fewer than
:data:`afbench.verdict.MIN_RECORDS` earlier records, the runs' spread plus an assumed
night-to-night spread), through :func:`compare_history`. A run recorded as contended
(``runs.contended``) is set aside there, on either side, and the line names it
(``contention="keep"``: every run decides, for a machine that is always shared). The line
states the check's false-alarm rate (labels ``h_gate_*``); bench/history_gate_sim.py measures it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from sqlalchemy import Engine, select

from afbench.errors import OutputError
from afbench.history.schema import experiments, records, runs
from afbench.store import OutDir, Speed
from afbench.verdict import (
    DEFAULT_NIGHT_SPREAD_PCT,
    MIN_RECORDS,
    SLOWER,
    compare_groups,
    compare_records,
)

log = logging.getLogger(__name__)


def compare_history(
    history: Sequence[Sequence[float]],
    newest: Sequence[Sequence[float]],
    *,
    confidence: float = 0.95,
    min_gain_pct: float = 2.0,
    calibration: dict[str, Any] | None = None,
    history_contended: Sequence[bool | None] | None = None,
    newest_contended: Sequence[bool | None] | None = None,
    history_record: Sequence[Any] | None = None,
    night_spread_pct: float = DEFAULT_NIGHT_SPREAD_PCT,
    keep_contended: bool = False,
) -> Speed:
    """The gain of ``newest`` (the newest record's runs) over ``history`` (the history window's
    runs), each a list of runs, each a list of measured step times in seconds, by
    :func:`afbench.verdict.compare_groups` (unpaired: Welch's t on log run medians, or the
    newest run against the history's run-to-run spread), as the stored
    :class:`afbench.store.Speed`. ``calibration``: the newest experiment's host calibration
    (its ``experiment.json``), used when each side has a single run and it is of one kind of run
    (:func:`afbench.history.calibration.of_one_kind`). ``*_contended``: per
    run, whether it was recorded as contended (set aside; see compare_groups).
    ``history_record``: per history run, the earlier record it belongs to (any key; runs of
    one record adjacent or not): the record is then the unit
    (:func:`afbench.verdict.compare_records`, ``night_spread_pct`` assumed while there are
    fewer than MIN_RECORDS records); None: the runs are judged as independent draws
    (:func:`afbench.verdict.compare_groups`), right only within one record.
    ``keep_contended``: --contention keep (see compare_groups).

    Raises ValueError when a side has no run, or a step time that is not finite and > 0."""
    from afbench.history.calibration import of_one_kind
    from afbench.verdict.calibration import RunSpread

    if calibration and not RunSpread.of(calibration).usable_for_one_round:
        calibration = None  # under 12 pairs, or it saw outlier runs: as for one round
    if not of_one_kind(calibration):
        # none, or a comparison's (two kinds of run): it does not describe the runs of the one
        # variant the gate compares over time
        calibration = None
    spread = {
        "run_spread_pct": calibration["spread_pct"] if calibration else None,
        "run_spread_df": calibration["df"] if calibration else None,
    }
    if history_record is None:
        speed = compare_groups(
            history,
            newest,
            confidence=confidence,
            min_gain_pct=min_gain_pct,
            history_contended=history_contended,
            newest_contended=newest_contended,
            keep_contended=keep_contended,
            **spread,
        )
    else:
        if len(history_record) != len(history):
            raise ValueError(
                f"history_record has {len(history_record)} keys for {len(history)} runs"
            )
        flags = history_contended or [None] * len(history)
        keys = list(dict.fromkeys(history_record))
        recs = [[r for r, k in zip(history, history_record) if k == key] for key in keys]
        rec_flags = [[f for f, k in zip(flags, history_record) if k == key] for key in keys]
        speed = compare_records(
            recs,
            newest,
            confidence=confidence,
            min_gain_pct=min_gain_pct,
            night_spread_pct=night_spread_pct,
            history_contended=rec_flags,
            newest_contended=newest_contended,
            keep_contended=keep_contended,
            **spread,
        )
    return Speed.of(
        speed, calibration=calibration if speed.spread_source == "calibration" else None
    )


def _calibration(out_dir: str | None) -> dict[str, Any] | None:
    """The host calibration the newest experiment recorded in its experiment.json, if any. A
    moved or deleted output directory gives none (the gate runs without it); a damaged one
    (OutputError: a hand-edited calibration) gives none and one warning naming it."""
    if not out_dir:
        return None
    try:
        return OutDir(Path(out_dir)).experiment().calibration_dict()
    except OutputError as exc:
        if Path(out_dir).is_dir():
            log.warning("afbench: history check: %s; its host calibration is not used", exc)
        return None
    except OSError:
        return None


@dataclass(frozen=True)
class CheckResult:
    """One variant's gate: ``regression`` (exit 1 when any is True) and its one ``line``."""

    variant: str
    regression: bool
    line: str
    speed: Speed | None = None


def _records(engine: Engine, experiment: str, variant: str | None) -> list[dict[str, Any]]:
    """Records of ``experiment`` (and ``variant``), newest first, with host and versions."""
    q = (
        select(
            records,
            experiments.c.created_at,
            experiments.c.out_dir,
            experiments.c.host_id,
            experiments.c.versions,
            experiments.c.git_commit,
            experiments.c.afbench_version,
            experiments.c.cann,
        )
        .join(experiments, records.c.experiment_id == experiments.c.id)
        .where(experiments.c.experiment == experiment)
        .order_by(experiments.c.created_at.desc(), records.c.id.desc())
    )
    if variant is not None:
        q = q.where(records.c.variant == variant)
    with engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(q)]


def _failed_runs(engine: Engine, record_id: int) -> list[str]:
    """The run ids of record ``record_id`` whose status is FAILED (repeat order)."""
    q = (
        select(runs.c.run_id)
        .where(runs.c.record_id == record_id)
        .where(runs.c.status == "FAILED")
        .order_by(runs.c.repeat)
    )
    with engine.connect() as conn:
        return [r for (r,) in conn.execute(q)]


def _step_times(
    engine: Engine, record_ids: list[int]
) -> dict[int, list[tuple[list[float], bool | None]]]:
    """record id -> its OK runs' measured step times and contention flag (repeat order)."""
    out: dict[int, list[tuple[list[float], bool | None]]] = {i: [] for i in record_ids}
    if not record_ids:
        return out
    q = (
        select(runs.c.record_id, runs.c.step_times_s, runs.c.contended)
        .where(runs.c.record_id.in_(record_ids))
        .where(runs.c.status == "OK")
        .order_by(runs.c.record_id, runs.c.repeat)
    )
    with engine.connect() as conn:
        for rid, times, contended in conn.execute(q):
            if times:
                out[rid].append((list(times), contended))
    return out


def _words(speed: Speed, macro: str) -> str:
    """A macro of templates/verdict_words.j2 on ``speed``, in English: ``set_aside_note``
    (``history run 3 set aside: contended``) or ``speed_note`` (`` (no interval: why)``)."""
    from afbench.report.render import verdict_words

    return str(getattr(verdict_words("en"), macro)(speed))


def is_regression(speed: Speed, threshold_pct: float) -> bool:
    """The gate's rule: the interval lies wholly below 0 (SLOWER) and the slowdown
    (``-gain_pct``) is at least ``threshold_pct`` percent."""
    return speed.decision == SLOWER and -(speed.gain_pct or 0.0) >= threshold_pct


def _gate_note(speed: Speed, confidence: float, n_records: int, night_spread_pct: float) -> str:
    """What the check promises (labels ``h_gate_level``) or, with fewer than MIN_RECORDS
    earlier records, what it assumes (``h_gate_few_records``), in English."""
    from afbench.report.render import labels

    words = labels("en")
    if speed.spread_source == "records":
        alpha = (1 - confidence) / 2
        return (
            words["h_gate_level"]
            .replace("{alpha}", f"{alpha * 100:.3g}")
            .replace("{month}", f"{(1 - (1 - alpha) ** 30) * 100:.0f}")
        )
    return (
        words["h_gate_few_records"]
        .replace("{k}", str(n_records))
        .replace("{min}", str(MIN_RECORDS))
        .replace("{night}", f"{night_spread_pct:g}")
    )


def software(rec: dict[str, Any]) -> str:
    """The software a record ran with, short: ``torch 2.13.0, torch_npu ..., git 1a2b3c4``."""
    v = rec.get("versions") or {}
    parts = [f"{k} {v[k]}" for k in ("torch", "torch_npu", "transformers") if v.get(k)]
    if rec.get("cann"):
        dates = sorted({d for d in rec["cann"].values() if d})
        parts += [f"CANN {dates[-1]}"] if dates else []
    if rec.get("git_commit"):
        parts.append(f"git {rec['git_commit'][:12]}")
    return ", ".join(parts) or "versions not recorded"


def check(
    engine: Engine,
    experiment: str,
    variant: str | None = None,
    *,
    window: int = 10,
    confidence: float = 0.95,
    min_gain_pct: float = 2.0,
    threshold_pct: float = 5.0,
    contention: str = "set_aside",
    night_spread_pct: float = DEFAULT_NIGHT_SPREAD_PCT,
) -> list[CheckResult]:
    """Gate the newest record of each variant of ``experiment`` (or of ``variant``) against
    its history (see the module docstring). A regression: the interval of the gain lies wholly
    below 0 (:func:`compare_history`'s decision SLOWER) and the slowdown is at least
    ``threshold_pct`` percent. ``night_spread_pct``: the night-to-night spread assumed while
    there are fewer than MIN_RECORDS earlier records. ``contention``: ``set_aside`` (runs
    recorded as contended do not decide) or ``keep``. Empty list when the experiment has no record."""
    if contention not in ("set_aside", "keep"):
        raise ValueError(f"contention must be set_aside or keep, got {contention!r}")
    recs = _records(engine, experiment, variant)
    names = list(dict.fromkeys(r["variant"] for r in recs))
    results = []
    for name in names:
        mine = [r for r in recs if r["variant"] == name]
        newest = mine[0]
        history = [
            r
            for r in mine[1:]
            if r["host_id"] == newest["host_id"] and r["config_hash"] == newest["config_hash"]
        ][:window]
        times = _step_times(engine, [newest["id"], *[r["id"] for r in history]])
        history = [r for r in history if times[r["id"]]]
        label = f"{experiment}/{name}"
        if not times[newest["id"]]:
            failed = _failed_runs(engine, newest["id"])
            # a switch that breaks the run (crash, hang, invalid log) fails the gate; runs a
            # backend skipped (graph mode on CPU) measured nothing to judge
            results.append(
                CheckResult(
                    name,
                    bool(failed),
                    (
                        f"FAILED {label}: the newest record ({newest['out_dir']}) has no measured run: "
                        f"{len(failed)} run(s) failed ({', '.join(failed[:3])}); see its report"
                    )
                    if failed
                    else f"SKIP {label}: the newest record ({newest['out_dir']}) has no "
                    "measured run",
                )
            )
            continue
        if not history:
            results.append(
                CheckResult(
                    name,
                    False,
                    f"OK {label}: no earlier record with "
                    "measured runs on this host with the same config: "
                    "nothing to compare",
                )
            )
            continue
        hist_runs = [run for r in history for run in times[r["id"]]]
        hist_record = [r["id"] for r in history for _ in times[r["id"]]]
        new_runs = times[newest["id"]]
        keep = contention == "keep"
        speed = compare_history(
            [t for t, _ in hist_runs],
            [t for t, _ in new_runs],
            confidence=confidence,
            min_gain_pct=min_gain_pct,
            calibration=_calibration(newest["out_dir"]),
            history_contended=[c for _, c in hist_runs],
            newest_contended=[c for _, c in new_runs],
            keep_contended=keep,
            history_record=hist_record,
            night_spread_pct=night_spread_pct,
        )
        if speed.ci_low_pct is None or speed.ci_high_pct is None:
            results.append(
                CheckResult(
                    name,
                    False,
                    f"SKIP {label}: no verdict{_words(speed, 'speed_note')}; {newest['out_dir']}",
                    speed,
                )
            )
            continue
        aside = f"; {_words(speed, 'set_aside_note')}" if speed.set_aside else ""
        slower = -(speed.gain_pct or 0.0)
        # the records that count: those with a run not set aside as contended
        counted = len({k for k, (_, c) in zip(hist_record, hist_runs) if keep or not c})
        regression = is_regression(speed, threshold_pct)
        n_hist = len(hist_runs)
        detail = (
            f"median step {newest['median_step_s']:.4g} s vs "
            f"{history[0]['median_step_s']:.4g} s in the record before; gain against "
            f"the history {speed.gain_pct:+.2f}% "
            f"[{speed.ci_low_pct:+.2f}%, {speed.ci_high_pct:+.2f}%] at "
            f"{confidence:.0%} ({speed.decision}), {len(new_runs)} run(s) vs "
            f"{n_hist} run(s) of {len(history)} earlier record(s), {speed.method}; "
            f"{_gate_note(speed, confidence, counted, night_spread_pct)}{aside}"
        )
        if regression:
            line = (
                f"REGRESSION {label}: {slower:.1f}% slower than its history ({detail}); "
                f"now {software(newest)}, before {software(history[0])}; "
                f"{newest['out_dir']}"
            )
        elif speed.decision == SLOWER:
            line = (
                f"OK {label}: {slower:.1f}% slower, below the {threshold_pct:g}% "
                f"threshold ({detail})"
            )
        else:
            line = f"OK {label}: no slowdown the noise cannot explain ({detail})"
        results.append(CheckResult(name, regression, line, speed))
    return results
