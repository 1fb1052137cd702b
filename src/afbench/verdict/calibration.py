"""The host's run-to-run spread, estimated from paired runs (the calibration's statistics).

One round cannot see how much a whole run moves from one process to the next; a calibration
measured on the same host, for the same kind of run, can. The quantity is ``sigma_run``: the
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
from typing import Any
from dataclasses import dataclass

from afbench.verdict.estimate import OUTLIER, pair_up


#: A calibration decides one round only when it rests on at least this many pairs with no
#: outlier run among them: an unmeasured 2x outlier run in a one-round pair cannot be told from
#: a 2x effect, so one round is only for hosts that were seen not to produce them (with 5% of
#: runs outliers, 24 clean runs in a row happen 29% of the time: bench/verdict_sim.py).
MIN_CALIBRATION_PAIRS = 12


@dataclass(frozen=True)
class RunSpread:
    """A run-to-run spread: ``spread_pct`` = ``100 * sigma_run``, on ``df`` degrees of freedom,
    from ``n_pairs`` deciding pairs of ``n_experiments`` experiments; ``n_outlier_pairs``: pairs
    the one pairing rule set aside as holding an outlier run (contended ones are not counted:
    they were measured).

    ``usable_for_one_round``: at least :data:`MIN_CALIBRATION_PAIRS` pairs and no outlier.
    """

    spread_pct: float
    df: float
    n_pairs: int
    n_experiments: int = 1
    n_outlier_pairs: int = 0

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> "RunSpread":
        """From a stored record holding at least this class's fields (others are ignored)."""
        return cls(**{k: record[k] for k in ("spread_pct", "df", "n_pairs") },
                   **{k: record[k] for k in ("n_experiments", "n_outlier_pairs") if k in record})

    @property
    def usable_for_one_round(self) -> bool:
        return self.n_pairs >= MIN_CALIBRATION_PAIRS and self.n_outlier_pairs == 0


def run_spread_from_pairs(baseline: Sequence[Sequence[float]], variant: Sequence[Sequence[float]],
                          contended: Sequence[tuple[bool, bool]] | None = None
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
    return RunSpread(spread_pct=math.sqrt(float(pairs.d.var(ddof=1)) / 2.0) * 100.0, df=n - 1,
                     n_pairs=n, n_outlier_pairs=outliers)


def pool(spreads: Iterable[RunSpread]) -> RunSpread | None:
    """Pooled spread of several estimates: ``sum(df_i s_i^2) / sum(df_i)`` on ``sum(df_i)`` df;
    ``None`` for none."""
    items = [s for s in spreads if s.df > 0]
    if not items:
        return None
    df = sum(s.df for s in items)
    var = sum(s.df * s.spread_pct ** 2 for s in items) / df
    return RunSpread(spread_pct=math.sqrt(var), df=df, n_pairs=sum(s.n_pairs for s in items),
                     n_experiments=sum(s.n_experiments for s in items),
                     n_outlier_pairs=sum(s.n_outlier_pairs for s in items))


def combine(baseline: RunSpread, variant: RunSpread) -> RunSpread:
    """The run spread of a pair whose two runs are of different kinds (e.g. eager against
    compiled), from each kind's own calibration: one pair's log ratio has variance
    ``s_b^2 + s_v^2``, so the pair's ``sigma_run`` (as :func:`afbench.verdict.compare_runs`
    takes it, ``2 sigma_run^2`` per pair) is ``sqrt((s_b^2 + s_v^2) / 2)``, on the
    Welch-Satterthwaite degrees of freedom ``(s_b^2 + s_v^2)^2 / (s_b^4 / df_b + s_v^4 / df_v)``
    (F. E. Satterthwaite, Biometrics Bulletin 2, 1946; B. L. Welch, Biometrika 34, 1947).
    ``n_pairs`` is the smaller of the two (one round needs both to rest on
    :data:`MIN_CALIBRATION_PAIRS`), outlier pairs add up. Equal spreads of equal df give the
    one spread on ``df_b + df_v`` df, as pooling would.
    """
    vb, vv = baseline.spread_pct ** 2, variant.spread_pct ** 2
    df = (vb + vv) ** 2 / (vb ** 2 / baseline.df + vv ** 2 / variant.df)
    return RunSpread(spread_pct=math.sqrt((vb + vv) / 2.0), df=df,
                     n_pairs=min(baseline.n_pairs, variant.n_pairs),
                     n_experiments=min(baseline.n_experiments, variant.n_experiments),
                     n_outlier_pairs=baseline.n_outlier_pairs + variant.n_outlier_pairs)


def combined_record(baseline: Mapping[str, Any], variant: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`combine` on two stored calibration records (``spread_pct``, ``df``, ``n_pairs``
    and optional ``n_outlier_pairs``, ``n_experiments``, ``kind``, ``updated_at``, ...): the
    baseline's record with the combined figures, ``kind`` ``"<baseline kind> + <variant
    kind>"`` and the older ``updated_at``; the baseline's own when both are of one kind."""
    if baseline.get("kind") == variant.get("kind"):
        return dict(baseline)
    both = combine(RunSpread.of(baseline), RunSpread.of(variant))
    stamps = [s for s in (baseline.get("updated_at"), variant.get("updated_at")) if s]
    return {**baseline, "kind": f"{baseline.get('kind')} + {variant.get('kind')}",
            "spread_pct": both.spread_pct, "df": both.df, "n_pairs": both.n_pairs,
            "n_outlier_pairs": both.n_outlier_pairs, "n_experiments": both.n_experiments,
            "updated_at": min(stamps) if stamps else None}
