"""``history check``: is the newest record of an experiment slower than its history, by more
than the noise explains? A CI performance gate (exit 1 on a regression, 0 otherwise).

The newest record of each variant is compared with up to ``window`` earlier records of the
same experiment and variant, on the same host (``host_id``) and with the same config hash: a
changed config or machine is a different measurement, not a regression. The statistics are
one function, :func:`compare_history`, with the signature of the verdict library's
``compare_runs`` (``afbench.verdict``, not merged yet).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from sqlalchemy import Engine, select

from afbench.analysis.paired import SLOWER, decide
from afbench.history.db import read_calibration
from afbench.history.schema import experiments, records, runs
from afbench.results import Speed

WELCH_METHOD = "Welch t on log run medians (history runs vs newest runs)"
STEP_METHOD = ("Welch t on log step times (fewer than 2 runs on a side: blind to run-to-run "
               "spread)")


def compare_history(baseline: Sequence[Sequence[float]], variant: Sequence[Sequence[float]], *,
                    confidence: float = 0.95, min_gain_pct: float = 2.0,
                    run_spread_pct: float | None = None) -> Speed:
    """The gain of ``variant`` (the newest record's runs) over ``baseline`` (the history
    window's runs), each a list of runs, each a list of measured step times in seconds.
    Percent of the baseline's time, positive = faster, as :class:`afbench.results.Speed`
    (gain_pct, ci_low_pct, ci_high_pct, level, mde_pct at 80% power, decision, method).

    TO BE REPLACED by ``afbench.verdict.compare_runs(baseline, variant,
    confidence=confidence, min_gain_pct=min_gain_pct, run_spread_pct=run_spread_pct)`` when
    the verdict library lands (same arguments, same Speed). Until then: a plain two-sample
    Welch t (Welch 1947) on the log of each run's median step time; with fewer than two runs
    on a side, on the log step times of all runs (which cannot see how much whole runs move).
    ``run_spread_pct`` (a host calibration: the run-to-run spread of the log run median,
    percent) is a floor under each side's standard deviation.

    Raises ValueError when a side has no step time, or one that is not finite and > 0."""
    from scipy import stats

    def logs(side: Sequence[Sequence[float]], what: str) -> list[np.ndarray]:
        arrays = [np.asarray(r, dtype=float) for r in side if len(r)]
        if not arrays or not all(np.all(np.isfinite(r) & (r > 0)) for r in arrays):
            raise ValueError(f"{what}: a step time that is not finite and > 0, or none")
        return [np.log(r) for r in arrays]

    base, var = logs(baseline, "history"), logs(variant, "newest record")
    if len(base) >= 2 and len(var) >= 2:
        a = np.array([np.median(r) for r in base])
        b = np.array([np.median(r) for r in var])
        method = WELCH_METHOD
    else:
        a, b = np.concatenate(base), np.concatenate(var)
        method = STEP_METHOD
        if len(a) < 2 or len(b) < 2:
            raise ValueError("fewer than 2 measured steps on a side")
    floor = (run_spread_pct or 0.0) / 100.0
    va = max(float(np.var(a, ddof=1)), floor ** 2) / len(a)
    vb = max(float(np.var(b, ddof=1)), floor ** 2) / len(b)
    se = math.sqrt(va + vb)
    d = float(np.mean(b) - np.mean(a))  # log(newest / history): > 0 is slower
    if se == 0.0:
        t_crit, df = 0.0, math.inf
    else:
        df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
        t_crit = float(stats.t.ppf(0.5 + confidence / 2, df))
    low, high = d - t_crit * se, d + t_crit * se
    gain = (1 - math.exp(d)) * 100
    ci_low, ci_high = (1 - math.exp(high)) * 100, (1 - math.exp(low)) * 100
    mde_log = (t_crit + float(stats.t.ppf(0.8, df))) * se if se else 0.0
    return Speed(gain_pct=gain, ci_low_pct=ci_low, ci_high_pct=ci_high, level=confidence,
                 kind="history", method=method, n_pairs=None,
                 mde_pct=(1 - math.exp(-mde_log)) * 100, mde_power=0.8,
                 min_gain_pct=min_gain_pct, decision=decide(ci_low, ci_high, min_gain_pct))


@dataclass(frozen=True)
class CheckResult:
    """One variant's gate: ``regression`` (exit 1 when any is True) and its one ``line``."""

    variant: str
    regression: bool
    line: str
    speed: Speed | None = None


def _records(engine: Engine, experiment: str, variant: str | None) -> list[dict[str, Any]]:
    """Records of ``experiment`` (and ``variant``), newest first, with host and versions."""
    q = (select(records, experiments.c.created_at, experiments.c.out_dir,
                experiments.c.host_id, experiments.c.versions, experiments.c.git_commit,
                experiments.c.afbench_version, experiments.c.cann)
         .join(experiments, records.c.experiment_id == experiments.c.id)
         .where(experiments.c.experiment == experiment)
         .order_by(experiments.c.created_at.desc(), records.c.id.desc()))
    if variant is not None:
        q = q.where(records.c.variant == variant)
    with engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(q)]


def _step_times(engine: Engine, record_ids: list[int]) -> dict[int, list[list[float]]]:
    """record id -> its OK runs' measured step times (repeat order)."""
    out: dict[int, list[list[float]]] = {i: [] for i in record_ids}
    if not record_ids:
        return out
    q = (select(runs.c.record_id, runs.c.step_times_s).where(runs.c.record_id.in_(record_ids))
         .where(runs.c.status == "OK").order_by(runs.c.record_id, runs.c.repeat))
    with engine.connect() as conn:
        for rid, times in conn.execute(q):
            if times:
                out[rid].append(list(times))
    return out


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


def check(engine: Engine, experiment: str, variant: str | None = None, *, window: int = 10,
          confidence: float = 0.95, min_gain_pct: float = 2.0,
          threshold_pct: float = 5.0) -> list[CheckResult]:
    """Gate the newest record of each variant of ``experiment`` (or of ``variant``) against
    its history (see the module docstring). A regression: the interval of the gain lies wholly
    below 0 (:func:`compare_history`'s decision SLOWER) and the slowdown is at least
    ``threshold_pct`` percent. Empty list when the experiment has no record."""
    recs = _records(engine, experiment, variant)
    names = list(dict.fromkeys(r["variant"] for r in recs))
    results = []
    for name in names:
        mine = [r for r in recs if r["variant"] == name]
        newest = mine[0]
        history = [r for r in mine[1:] if r["host_id"] == newest["host_id"]
                   and r["config_hash"] == newest["config_hash"]][:window]
        times = _step_times(engine, [newest["id"], *[r["id"] for r in history]])
        history = [r for r in history if times[r["id"]]]
        label = f"{experiment}/{name}"
        if not times[newest["id"]]:
            results.append(CheckResult(name, False, f"SKIP {label}: the newest record "
                                       f"({newest['out_dir']}) has no measured run"))
            continue
        if not history:
            results.append(CheckResult(name, False, f"OK {label}: no earlier record with "
                                       "measured runs on this host with the same config: "
                                       "nothing to compare"))
            continue
        calib = read_calibration(engine, newest["host_id"] or "", label)
        speed = compare_history([t for r in history for t in times[r["id"]]], times[newest["id"]],
                                confidence=confidence, min_gain_pct=min_gain_pct,
                                run_spread_pct=calib["spread_pct"] if calib else None)
        slower = -(speed.gain_pct or 0.0)
        regression = speed.decision == SLOWER and slower >= threshold_pct
        n_hist = sum(len(times[r["id"]]) for r in history)
        detail = (f"median step {newest['median_step_s']:.4g} s vs "
                  f"{history[0]['median_step_s']:.4g} s before; gain {speed.gain_pct:+.2f}% "
                  f"[{speed.ci_low_pct:+.2f}%, {speed.ci_high_pct:+.2f}%] at "
                  f"{confidence:.0%} ({speed.decision}), {len(times[newest['id']])} run(s) vs "
                  f"{n_hist} run(s) of {len(history)} earlier record(s), {speed.method}")
        if regression:
            line = (f"REGRESSION {label}: {slower:.1f}% slower than its history ({detail}); "
                    f"now {software(newest)}, before {software(history[0])}; "
                    f"{newest['out_dir']}")
        elif speed.decision == SLOWER:
            line = (f"OK {label}: {slower:.1f}% slower, below the {threshold_pct:g}% "
                    f"threshold ({detail})")
        else:
            line = f"OK {label}: no slowdown the noise cannot explain ({detail})"
        results.append(CheckResult(name, regression, line, speed))
    return results
