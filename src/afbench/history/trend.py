"""Series of records over time and the change points in them.

A *series* is the records of one experiment and variant, oldest first. Change points are
looked for within each comparable part of it (same host, same config hash): a new machine or
a new config moves the step time by itself.

Method: PELT (Killick, Fearnhead & Eckley 2012, "Optimal detection of changepoints with a
linear computational cost", JASA 107:1590-1598) with the least-squares (``l2``) cost, from
the ``ruptures`` library (its ``KernelCPD`` with the linear kernel: the same search and cost
in C) (Truong, Oudre & Vayatis 2020, "Selective review of offline change
point detection methods", Signal Processing 167:107299). It runs on the log of each record's
median step time. A host's level wanders from night to night, each night like the one before
(autocorrelated): PELT's least-squares cost assumes independent values and reads such wander
as new levels (with lag-1 differences as its noise scale, 75% of 30-record series whose night
level is AR(1) with coefficient 0.8 showed a change where there was none; bench/README.md
§13). So the series is first
decorrelated as Chakar, Lebarbier, Levy-Leduc & Robin (2017, "A robust approach for
estimating change-points in the mean of an AR(1) process", Bernoulli 23:1408-1447) do
(:func:`decorrelate`): the AR(1) coefficient ``rho`` from robust scales of lag-1 and lag-2
differences (``Var(x[t+h] - x[t]) = 2 sd^2 (1 - rho^h)``), then ``z[t] = x[t] - rho x[t-1]``
(a change in ``x`` stays one in ``z`` at the same place, ``1 - rho`` of its size after its
first value), divided by ``z``'s robust noise scale (1.4826 x MAD of successive differences /
sqrt 2, so a step change does not inflate it). The penalty is 3 ln n per change (a BIC-like
choice: a shift must be about 1.3 noise units or more to pay for itself on 20 records).
Segments have at least :data:`MIN_SIZE` records, so one odd record is not a change.

What a change point claims: the level of the record's step time moved by more than the
night-to-night wander explains, between the two records named. It is a screen over the whole
series, not a test at a stated level; bench/history_gate_sim.py measures how often a series
without a change shows one and how often a 10% step is found (bench/README.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
from sqlalchemy import Engine, select

from afbench.history.check import software
from afbench.history.schema import experiments, records, runs

MIN_SIZE = 2
PENALTY_PER_LN_N = 3.0
#: The largest AR(1) coefficient :func:`decorrelate` removes: nearer 1 the host wanders like a
#: random walk and no change in level can be told from it.
MAX_RHO = 0.9


def _robust_scale(d: np.ndarray) -> float:
    return 1.4826 * float(np.median(np.abs(d - np.median(d))))


def decorrelate(x: np.ndarray) -> tuple[np.ndarray, float, float]:
    """``(z, rho, scale)`` of a series ``x`` (log step times, one per record, oldest first):
    ``rho`` the AR(1) coefficient from the robust variances ``v_h`` of the lag-h differences
    (``rho = v_2 / v_1 - 1``, clipped to ``[0, MAX_RHO]``; Chakar et al. 2017), ``z`` the
    decorrelated series (``x[1:] - rho x[:-1]``; ``x`` itself when ``rho`` is 0) and
    ``scale`` its robust noise scale (0 for a constant series). Needs 4+ values."""
    v1 = _robust_scale(np.diff(x)) ** 2
    v2 = _robust_scale(x[2:] - x[:-2]) ** 2
    rho = min(max(v2 / v1 - 1, 0.0), MAX_RHO) if v1 > 0 else 0.0
    z = x[1:] - rho * x[:-1] if rho > 0 else x
    return z, rho, _robust_scale(np.diff(z)) / math.sqrt(2)


def change_points(
    values: Sequence[float], min_size: int = MIN_SIZE, decorrelated: bool = True
) -> list[int]:
    """Indices ``i`` (1..n-1) where a new level starts in ``values`` (positive numbers, e.g.
    step times; compared on the log scale), by PELT as in the module docstring. Empty when
    there are fewer than ``2 * min_size`` values or no change pays its penalty.
    ``decorrelated=False``: PELT on ``x`` itself with the lag-1 scale (before issue 30; for
    bench/history_gate_sim.py)."""
    x = np.log(np.asarray(values, dtype=float))
    n = x.size
    if n < 2 * min_size or not np.all(np.isfinite(x)):
        return []
    if decorrelated:
        x, rho, scale = decorrelate(x)
    else:
        rho, scale = 0.0, _robust_scale(np.diff(x)) / math.sqrt(2)
    offset = 1 if rho > 0 else 0  # z[i] stands for record i + 1
    if x.size < 2 * min_size:
        return []
    if scale <= 0:
        scale = float(np.std(x)) or 1.0  # a constant series: any step is a change
        if np.ptp(x) == 0:
            return []
    import ruptures as rpt

    # KernelCPD with the linear kernel is PELT with the l2 cost in ruptures' C code: the same
    # change points as rpt.Pelt(model="l2", jump=1), about 1000x faster at 1,000 records
    algo = rpt.KernelCPD(kernel="linear", min_size=min_size).fit((x / scale).reshape(-1, 1))
    return [int(i) + offset for i in algo.predict(pen=PENALTY_PER_LN_N * math.log(n))[:-1]]


@dataclass
class Change:
    """A change point between ``before`` and ``after`` (records): the step time of the new
    segment against the old one (``change_pct``, percent, positive = slower), and the
    software of the two records that bracket it."""

    before: dict[str, Any]
    after: dict[str, Any]
    change_pct: float

    def line(self) -> str:
        b, a = self.before, self.after
        word = "slower" if self.change_pct > 0 else "faster"
        return (
            f"step time {self.change_pct:+.1f}% ({word}) between "
            f"{b['created_at']:%Y-%m-%d %H:%M} ({software(b)}) and "
            f"{a['created_at']:%Y-%m-%d %H:%M} ({software(a)})"
        )


@dataclass
class Series:
    """One experiment and variant: ``records`` oldest first (rows of ``records`` joined with
    their experiment, plus ``run_medians_s`` and ``n_contended``, its OK runs recorded as
    contended), and the ``changes`` found."""

    experiment: str
    variant: str
    records: list[dict[str, Any]]
    changes: list[Change] = field(default_factory=list)

    @property
    def is_baseline(self) -> bool:
        return bool(self.records and self.records[-1]["is_baseline"])


def _segments_change(part: list[dict[str, Any]], cps: list[int]) -> list[Change]:
    bounds = [0, *cps, len(part)]
    out = []
    for k, cp in enumerate(cps):
        before = [r["median_step_s"] for r in part[bounds[k] : cp]]
        after = [r["median_step_s"] for r in part[cp : bounds[k + 2]]]
        ratio = math.exp(float(np.median(np.log(after)) - np.median(np.log(before))))
        out.append(Change(part[cp - 1], part[cp], (ratio - 1) * 100))
    return out


def load_series(engine: Engine, experiment: str | None = None) -> list[Series]:
    """Every series (of ``experiment``, or all), sorted by experiment and variant, with the
    change points of each comparable part. Records without a measured run are kept (they
    show in the tables) but carry no point."""
    q = (
        select(
            records,
            experiments.c.experiment,
            experiments.c.created_at,
            experiments.c.out_dir,
            experiments.c.host_id,
            experiments.c.versions,
            experiments.c.git_commit,
            experiments.c.cann,
            experiments.c.afbench_version,
        )
        .join(experiments, records.c.experiment_id == experiments.c.id)
        .order_by(experiments.c.created_at, records.c.id)
    )
    if experiment is not None:
        q = q.where(experiments.c.experiment == experiment)
    medians: dict[int, list[float]] = {}
    contended: dict[int, int] = {}
    with engine.connect() as conn:
        rows = [dict(r._mapping) for r in conn.execute(q)]
        rq = select(runs.c.record_id, runs.c.median_step_s, runs.c.contended).where(
            runs.c.status == "OK"
        )
        if experiment is not None:
            rq = rq.where(runs.c.record_id.in_([r["id"] for r in rows]))
        for rid, med, was_contended in conn.execute(rq):
            if med is not None:
                medians.setdefault(rid, []).append(med)
            contended[rid] = contended.get(rid, 0) + bool(was_contended)
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        r["run_medians_s"] = medians.get(r["id"], [])
        r["n_contended"] = contended.get(r["id"], 0)
        groups.setdefault((r["experiment"], r["variant"]), []).append(r)
    out = []
    for (exp, var), recs in sorted(groups.items()):
        s = Series(exp, var, recs)
        parts: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
        for r in recs:
            if r["median_step_s"]:
                parts.setdefault((r["host_id"], r["config_hash"]), []).append(r)
        for part in parts.values():
            s.changes += _segments_change(part, change_points([r["median_step_s"] for r in part]))
        s.changes.sort(key=lambda c: c.after["created_at"])
        out.append(s)
    return out
