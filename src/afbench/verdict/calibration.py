"""The host's run-to-run spread, estimated from paired runs (the calibration's statistics).

One round cannot see how much a whole run moves from one process to the next; a calibration
measured on the same host, for the same kind of run, can, as long as the host still runs that
kind as it did then. So a calibration also keeps what its runs took (:class:`RunLocation`: the
geometric mean of their median step times), and a one-round verdict first checks that its runs
fit it (:meth:`RunSpread.fit_of`); one that does not (the machine, or the workload, changed
since) is not decided with it. The quantity is ``sigma_run``: the
standard deviation of a run's log statistic (median step time) between processes, so that one
adjacent pair's log ratio has variance ``2 sigma_run^2``. From ``n`` pairs of any experiment
(A/A or not: the mean log ratio, the effect, is removed) ``sigma_run^2 = s_d^2 / 2`` on ``n - 1``
degrees of freedom; several experiments pool their sums of squares (the pooled variance of a
one-way layout). Contended and outlier pairs are left out by the one pairing rule.

Storage (per host, keyed by the kind of run) is the caller's: this module never reads files.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from afbench.verdict.estimate import OUTLIER, pair_up, side_locations

#: A calibration decides one round only when it rests on at least this many pairs with no
#: outlier run among them: an unmeasured 2x outlier run in a one-round pair cannot be told from
#: a 2x effect, so one round is only for hosts that were seen not to produce them (with 5% of
#: runs outliers, 24 clean runs in a row happen 29% of the time: bench/verdict_sim.py).
MIN_CALIBRATION_PAIRS = 12
#: Level of the check that a one-round verdict's runs fit their calibration
#: (:meth:`RunSpread.fit_of`): about 10% of the one-round verdicts on a host that still fits
#: are given up (INCONCLUSIVE, calibration_stale). At 95% a host 1.5-2x as spread as when
#: calibrated still read an A/A different 8% of the time; at 90%, 2.5-3.5% (unchecked: 24%;
#: bench/verdict_sim.py, bench/README.md section 8).
FIT_LEVEL = 0.90


@dataclass(frozen=True)
class RunLocation:
    """What one kind of run took on this host when its calibration was measured:
    ``step_s`` the geometric mean of the calibration runs' median step times (seconds) over
    ``n_runs`` runs, ``spread_pct`` / ``df`` that kind's run-to-run spread (``100 * sigma_run``)
    and its degrees of freedom. Raises ValueError naming a field out of range or of the wrong
    type (a boolean is not a number here: ``n_runs: true`` is not 1 run)."""

    step_s: float
    n_runs: int
    spread_pct: float
    df: float

    def __post_init__(self) -> None:
        for name in ("step_s", "spread_pct", "df"):
            value = getattr(self, name)
            if not (
                isinstance(value, (int, float))
                and not isinstance(value, bool)
                and math.isfinite(value)
                and value > 0
            ):
                raise ValueError(f"run location: {name} must be finite and > 0, got {value!r}")
        if not (
            isinstance(self.n_runs, int) and not isinstance(self.n_runs, bool) and self.n_runs >= 1
        ):
            raise ValueError(f"run location: n_runs must be an integer >= 1, got {self.n_runs!r}")

    @classmethod
    def of(cls, record: Mapping[str, Any] | None) -> "RunLocation | None":
        """From a stored record (``None`` stays ``None``). Raises ValueError naming a field
        that is out of range (a hand-edited file or database row)."""
        if not record:
            return None
        return cls(**{k: record[k] for k in ("step_s", "n_runs", "spread_pct", "df")})


@dataclass(frozen=True)
class Fit:
    """The check of a one-round verdict's runs against their calibration
    (:meth:`RunSpread.fit_of`): ``statistic`` the sum of the runs' squared standardised
    prediction errors, ``threshold`` its critical value at :data:`FIT_LEVEL`, ``fits``
    ``statistic <= threshold``, ``shift_pct`` the run farthest from its calibration, percent of
    the calibration's step time (positive: slower than calibrated), ``n_runs`` runs checked."""

    statistic: float
    threshold: float
    fits: bool
    shift_pct: float
    n_runs: int


@dataclass(frozen=True)
class RunSpread:
    """A run-to-run spread: ``spread_pct`` = ``100 * sigma_run``, on ``df`` degrees of freedom,
    from ``n_pairs`` deciding pairs of ``n_experiments`` experiments; ``n_outlier_pairs``: pairs
    the one pairing rule set aside as holding an outlier run (contended ones are not counted:
    they were measured).

    ``baseline_runs`` / ``variant_runs``: what the baseline's / variant's kind of run took
    when calibrated (:class:`RunLocation`), ``None`` where not known (a calibration recorded
    before afbench kept them; an experiment's calibration when its variants are of several
    kinds).

    ``usable_for_one_round``: at least :data:`MIN_CALIBRATION_PAIRS` pairs and no outlier.
    """

    spread_pct: float
    df: float
    n_pairs: int
    n_experiments: int = 1
    n_outlier_pairs: int = 0
    baseline_runs: RunLocation | None = None
    variant_runs: RunLocation | None = None

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> "RunSpread":
        """From a stored record holding at least this class's fields (others are ignored)."""
        return cls(
            **{k: record[k] for k in ("spread_pct", "df", "n_pairs")},
            **{k: record[k] for k in ("n_experiments", "n_outlier_pairs") if k in record},
            baseline_runs=RunLocation.of(record.get("baseline_runs")),
            variant_runs=RunLocation.of(record.get("variant_runs")),
        )

    @property
    def usable_for_one_round(self) -> bool:
        return self.n_pairs >= MIN_CALIBRATION_PAIRS and self.n_outlier_pairs == 0

    def fit_of(
        self, baseline_s: Sequence[float], variant_s: Sequence[float], level: float = FIT_LEVEL
    ) -> Fit | None:
        """Whether runs of a one-round (or two-round) verdict fit this calibration: each run's
        median step time (seconds; ``baseline_s`` / ``variant_s`` by side) against its kind's
        :class:`RunLocation`. A run's standardised prediction error is
        ``z = ln(t / step_s) / (sigma_run sqrt(1 + 1/n_runs))``, about Student's t on the
        kind's df when the host still runs that kind as calibrated; the sum of the ``k`` runs'
        ``z^2`` is referred to ``k F(k, df)`` at ``level`` (the prediction-interval form of
        Hotelling's T^2 for independent coordinates: H. Hotelling, Ann. Math. Statist. 2,
        1931; ``df`` the smallest of the kinds'). A host that became noisier, slower or faster
        since its calibration, or a workload that changed under the same kind, fails it;
        bench/verdict_sim.py measures both what it catches and what it costs.

        Returns ``None`` when neither side's location is known (nothing to check).
        """
        checked = [
            (t, loc)
            for runs, loc in ((baseline_s, self.baseline_runs), (variant_s, self.variant_runs))
            if loc
            for t in runs
        ]
        if not checked:
            return None
        from scipy import stats  # ~0.8 s to import: only when a calibration decides

        z2, shifts = 0.0, []
        for t, loc in checked:
            log_shift = math.log(t / loc.step_s)
            z2 += (log_shift / (loc.spread_pct / 100.0 * math.sqrt(1 + 1 / loc.n_runs))) ** 2
            shifts.append((math.exp(log_shift) - 1.0) * 100.0)
        k, df = len(checked), min(loc.df for _, loc in checked)
        threshold = k * float(stats.f.ppf(level, k, df))
        return Fit(
            statistic=z2,
            threshold=threshold,
            fits=z2 <= threshold,
            shift_pct=max(shifts, key=abs),
            n_runs=k,
        )


def run_spread_from_pairs(
    baseline: Sequence[Sequence[float]],
    variant: Sequence[Sequence[float]],
    contended: Sequence[tuple[bool, bool]] | None = None,
) -> RunSpread | None:
    """``sigma_run`` from one experiment's paired runs (step times, seconds, paired by round);
    ``None`` with fewer than 2 deciding pairs.

    Raises:
        ValueError: as :func:`afbench.verdict.estimate.pair_up`.
    """
    pairs = pair_up(baseline, variant, contended)
    n = int(pairs.d.size)
    if n < 2:
        return None
    outliers = sum(1 for a in pairs.set_aside if a.reason == OUTLIER)
    spread = math.sqrt(float(pairs.d.var(ddof=1)) / 2.0) * 100.0
    where = [
        RunLocation(step_s=t, n_runs=n, spread_pct=spread, df=n - 1) for t in side_locations(pairs)
    ]
    return RunSpread(
        spread_pct=spread,
        df=n - 1,
        n_pairs=n,
        n_outlier_pairs=outliers,
        baseline_runs=where[0],
        variant_runs=where[1],
    )


def one_kind(spread: RunSpread) -> RunSpread:
    """An A/A's spread as its kind's calibration: both sides ran the kind, so its location rests
    on the runs of both (the geometric mean over ``2n`` runs) and describes either side."""
    b, v = spread.baseline_runs, spread.variant_runs
    if b is None or v is None:
        return spread
    n = b.n_runs + v.n_runs
    both = replace(
        b,
        n_runs=n,
        step_s=math.exp((b.n_runs * math.log(b.step_s) + v.n_runs * math.log(v.step_s)) / n),
    )
    return replace(spread, baseline_runs=both, variant_runs=both)


def pool(spreads: Iterable[RunSpread]) -> RunSpread | None:
    """Pooled spread of several estimates (in the order recorded): ``sum(df_i s_i^2) /
    sum(df_i)`` on ``sum(df_i)`` df; the run locations are the newest estimate's that has them
    (what the host does now), with the pooled spread; ``None`` for none."""
    items = [s for s in spreads if s.df > 0]
    if not items:
        return None
    df = sum(s.df for s in items)
    spread = math.sqrt(sum(s.df * s.spread_pct**2 for s in items) / df)
    newest = next((s for s in reversed(items) if s.baseline_runs or s.variant_runs), None)
    where = [
        replace(loc, spread_pct=spread, df=df) if loc else None
        for loc in ((newest.baseline_runs, newest.variant_runs) if newest else (None, None))
    ]
    return RunSpread(
        spread_pct=spread,
        df=df,
        n_pairs=sum(s.n_pairs for s in items),
        n_experiments=sum(s.n_experiments for s in items),
        n_outlier_pairs=sum(s.n_outlier_pairs for s in items),
        baseline_runs=where[0],
        variant_runs=where[1],
    )


def combine(baseline: RunSpread, variant: RunSpread) -> RunSpread:
    """The run spread of a pair whose two runs are of different kinds (e.g. eager against
    compiled), from each kind's own calibration: one pair's log ratio has variance
    ``s_b^2 + s_v^2``, so the pair's ``sigma_run`` (as :func:`afbench.verdict.compare_runs`
    takes it, ``2 sigma_run^2`` per pair) is ``sqrt((s_b^2 + s_v^2) / 2)``, on the
    Welch-Satterthwaite degrees of freedom ``(s_b^2 + s_v^2)^2 / (s_b^4 / df_b + s_v^4 / df_v)``
    (F. E. Satterthwaite, Biometrics Bulletin 2, 1946; B. L. Welch, Biometrika 34, 1947).
    ``n_pairs`` is the smaller of the two (one round needs both to rest on
    :data:`MIN_CALIBRATION_PAIRS`), outlier pairs add up. Equal spreads of equal df give the
    one spread on ``df_b + df_v`` df, as pooling would. Each side's run location is its own
    kind's (the ``baseline_runs`` of each calibration: a kind's calibration describes its runs
    there).
    """
    vb, vv = baseline.spread_pct**2, variant.spread_pct**2
    df = (vb + vv) ** 2 / (vb**2 / baseline.df + vv**2 / variant.df)
    return RunSpread(
        spread_pct=math.sqrt((vb + vv) / 2.0),
        df=df,
        n_pairs=min(baseline.n_pairs, variant.n_pairs),
        n_experiments=min(baseline.n_experiments, variant.n_experiments),
        n_outlier_pairs=baseline.n_outlier_pairs + variant.n_outlier_pairs,
        baseline_runs=baseline.baseline_runs,
        variant_runs=variant.baseline_runs,
    )


def location_record(loc: RunLocation | None) -> dict[str, Any] | None:
    """A :class:`RunLocation` as stored (a plain dict), ``None`` for none."""
    return asdict(loc) if loc is not None else None


def combined_record(baseline: Mapping[str, Any], variant: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`combine` on two stored calibration records (``spread_pct``, ``df``, ``n_pairs``
    and optional ``n_outlier_pairs``, ``n_experiments``, ``kind``, ``updated_at``, ...): the
    baseline's record with the combined figures, ``kind`` ``"<baseline kind> + <variant
    kind>"`` and the older ``updated_at``. Both of one kind: the baseline's own, its location
    checking both sides' runs (one kind is one program: the kind names every setting that
    changes what a step computes, so two variants of one kind differ in nothing that moves
    their step time, and an A/A on a host noisier since its calibration read FASTER or SLOWER
    6.6-9.6% of the time with its variant unchecked, 1.0-3.8% with both checked:
    bench/verdict_sim.py, "twins")."""
    if baseline.get("kind") == variant.get("kind"):
        return {**baseline, "variant_runs": baseline.get("baseline_runs")}
    both = combine(RunSpread.of(baseline), RunSpread.of(variant))
    stamps = [s for s in (baseline.get("updated_at"), variant.get("updated_at")) if s]
    return {
        **baseline,
        "kind": f"{baseline.get('kind')} + {variant.get('kind')}",
        "spread_pct": both.spread_pct,
        "df": both.df,
        "n_pairs": both.n_pairs,
        "n_outlier_pairs": both.n_outlier_pairs,
        "n_experiments": both.n_experiments,
        "updated_at": min(stamps) if stamps else None,
        "baseline_runs": location_record(both.baseline_runs),
        "variant_runs": location_record(both.variant_runs),
    }
