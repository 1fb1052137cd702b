"""A sweep's main effects as factorial contrasts of time-paired gains, Holm-adjusted across keys.

Each combination ``c`` of a sweep has a verdict against the baseline combination: its paired
gain, i.e. the mean ``D_c`` of ``d = ln(combination run / baseline run)`` over the pairs that
decided, with the standard error ``se_c`` on ``df_c`` degrees of freedom (a :class:`Speed`). With
``experiment.sweep_pairing=beside`` the two runs of a pair ran adjacently in the same job, so a
machine that drifts or steps between jobs moves both and ``D_c`` does not see it.

The main effect of setting key ``K`` to value ``v`` instead of the reference value ``r`` (the
baseline combination's) is the factorial contrast of those gains (Montgomery, *Design and
Analysis of Experiments*, ch. 6): the mean, over the ``k`` cells of the other keys, of
``D(K=v, cell) - D(K=r, cell)``, where ``D`` of the baseline combination itself is 0 exactly.
The ``D_c`` rest on different runs, so the contrast's variance is ``sum w_c^2 se_c^2``
(``w_c = +-1/k``) and its degrees of freedom Satterthwaite's (Biometrics Bulletin 2, 1946).
Medians of different jobs are never compared: what drifted between jobs cancels in each ``D_c``.

Several main effects are one family: their two-sided p-values are adjusted by Holm's step-down
procedure (S. Holm, "A simple sequentially rejective multiple test procedure", Scand. J.
Statist. 6, 1979), which keeps the chance that an unchanged sweep shows any main effect at or
below ``1 - confidence``. Each effect's interval is printed at the level Holm tested it at (the
effect ranked ``i`` by p-value: ``1 - alpha / (m - i + 1)``, and from the first effect Holm
does not reject on, that effect's level for all the rest), so that an interval excludes 0
exactly when Holm rejects. Those intervals are not simultaneous confidence intervals for the
effects that Holm rejects (Strassburger & Bretz, Stat. Med. 27, 2008); bench/sweep_pairing_sim.py
measures their coverage with a real effect.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from afbench.verdict.estimate import DEFAULT_MIN_GAIN_PCT, gain_from_log
from afbench.verdict.power import t_quantile
from afbench.verdict.words import decide

CONTRAST_METHOD = (
    "factorial contrast of the combinations' paired log ratios (Satterthwaite df), "
    "Holm-adjusted across main effects"
)


@dataclass(frozen=True)
class PairedGain:
    """One combination's verdict against the baseline combination as a contrast term:
    ``log_ratio`` the mean ``ln(combination / baseline)`` of its deciding pairs, ``se`` its
    standard error, ``df`` its degrees of freedom (``inf`` for a calibration taken as known),
    ``n_pairs`` the pairs it rests on, ``name`` the combination."""

    name: str
    log_ratio: float
    se: float
    df: float
    n_pairs: int

    @classmethod
    def of(cls, name: str, speed: Any) -> "PairedGain | None":
        """The term of a :class:`afbench.verdict.Speed` (or its stored form: any object with
        ``gain_pct``, ``spread_pct`` (sd of one pair's log ratio, percent), ``n_pairs`` and
        ``df``; ``None`` df is infinite); ``None`` when it has no interval (no spread)."""
        gain, spread, n = (getattr(speed, k, None) for k in ("gain_pct", "spread_pct", "n_pairs"))
        if gain is None or spread is None or not n or gain >= 100:
            return None
        df = getattr(speed, "df", None)
        return cls(
            name=name,
            log_ratio=math.log(1.0 - gain / 100.0),
            se=spread / 100.0 / math.sqrt(n),
            df=math.inf if df is None else float(df),
            n_pairs=int(n),
        )


@dataclass(frozen=True)
class Contrast:
    """``sum weight * log_ratio`` of independent :class:`PairedGain` s (the baseline
    combination's own gain, 0 exactly, is no term)."""

    terms: tuple[tuple[float, PairedGain], ...]

    @property
    def estimate(self) -> float:
        return sum(w * g.log_ratio for w, g in self.terms)

    @property
    def se(self) -> float:
        return math.sqrt(sum((w * g.se) ** 2 for w, g in self.terms))

    @property
    def df(self) -> float:
        """Satterthwaite's degrees of freedom of :attr:`se` (``inf`` when every term's is)."""
        parts = [(w * g.se) ** 2 for w, g in self.terms]
        den = sum(p * p / g.df for p, (_, g) in zip(parts, self.terms) if math.isfinite(g.df))
        return math.inf if den == 0 else sum(parts) ** 2 / den

    def p_value(self) -> float:
        """Two-sided p-value of "the contrast is 0" (Welch-Satterthwaite t)."""
        from scipy import stats  # only when a p-value is computed

        se, est = self.se, self.estimate
        if se == 0:
            return 1.0 if est == 0 else 0.0
        t = abs(est) / se
        return float(2 * (stats.norm.sf(t) if math.isinf(self.df) else stats.t.sf(t, self.df)))


@dataclass(frozen=True)
class MainEffect:
    """One main effect: ``gain_pct`` (percent of the reference's step time, positive = the
    value is faster), its interval ``ci_low_pct`` / ``ci_high_pct`` at ``level`` (Holm's level
    for this effect), ``decision`` (:func:`afbench.verdict.decide` of that interval: FASTER /
    SLOWER exactly when Holm rejects "no effect"), ``p_value`` and ``p_holm`` (Holm-adjusted),
    ``df``, ``family`` (main effects adjusted together) and the :class:`PairedGain` s it rests
    on with their weights."""

    gain_pct: float
    ci_low_pct: float
    ci_high_pct: float
    level: float
    decision: str
    p_value: float
    p_holm: float
    df: float
    family: int
    terms: tuple[tuple[float, PairedGain], ...]
    method: str = CONTRAST_METHOD


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's adjusted p-values (Holm 1979): ``max_{j <= i} min(1, (m - j + 1) p_(j))`` in the
    input's order; reject at level ``alpha`` where the adjusted p-value is ``<= alpha``.

    Raises:
        ValueError: a p-value outside [0, 1].
    """
    if any(not 0 <= p <= 1 for p in p_values):
        raise ValueError(f"p-values must be within [0, 1], got {list(p_values)}")
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    out, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        out[i] = running
    return out


def main_effects(
    contrasts: Sequence[Contrast],
    confidence: float = 0.95,
    min_gain_pct: float = DEFAULT_MIN_GAIN_PCT,
) -> list[MainEffect]:
    """Each contrast (one main effect of a key's value, module docstring) as a
    :class:`MainEffect`, the family adjusted by Holm at family-wise ``1 - confidence``.

    Args:
        contrasts: one :class:`Contrast` per main effect, each with at least one term.
        confidence: the family's level, ``0 < confidence < 1``.
        min_gain_pct: the NO_GAIN margin, percent.

    Returns:
        One :class:`MainEffect` per contrast, in the input's order.

    Raises:
        ValueError: ``confidence`` outside (0, 1), or a contrast without terms.
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be within (0, 1), got {confidence}")
    if any(not c.terms for c in contrasts):
        raise ValueError("a main effect needs at least one combination's paired gain")
    alpha, m = 1.0 - confidence, len(contrasts)
    p = [c.p_value() for c in contrasts]
    adjusted = holm(p)
    order = sorted(range(m), key=lambda i: p[i])
    levels, stopped = [0.0] * m, None
    for rank, i in enumerate(order):
        if stopped is None and adjusted[i] > alpha:
            stopped = rank  # Holm stops here: this and every later effect at this level
        levels[i] = 1.0 - alpha / (m - (rank if stopped is None else stopped))
    out = []
    for c, level, p_i, p_adj in zip(contrasts, levels, p, adjusted):
        est, se, df = c.estimate, c.se, c.df
        crit = t_quantile(0.5 + level / 2, df)
        low, high = gain_from_log(est + crit * se), gain_from_log(est - crit * se)
        out.append(
            MainEffect(
                gain_pct=gain_from_log(est),
                ci_low_pct=low,
                ci_high_pct=high,
                level=level,
                decision=decide(low, high, min_gain_pct),
                p_value=p_i,
                p_holm=p_adj,
                df=df,
                family=m,
                terms=c.terms,
            )
        )
    return out


def factorial_contrasts(
    settings: Sequence[Mapping[str, str]],
    gains: Sequence[PairedGain | None],
    keys: Sequence[str],
    reference: Mapping[str, str],
) -> list[tuple[str, str, Contrast | None, int]]:
    """The contrast of each swept key's value against its reference value, over the cells of
    the other keys (module docstring).

    Args:
        settings: per combination, its value of every swept key (and of anything else that
            tells combinations apart within a job, such as a recipe's variant: it defines the
            cells too), as comparable text.
        gains: per combination, its :class:`PairedGain` against the baseline combination;
            ``None`` where it has none (no result, no interval). The baseline combination (the
            one whose ``keys`` values are all ``reference``'s) is no term: its gain is 0.
        keys: the swept keys, in the order the effects are listed.
        reference: the baseline combination's value of each key (and of each other entry of
            its setting: the one combination that matches it all is the baseline).

    Returns:
        Per key and each of its values other than the reference (first-seen order):
        ``(key, value, contrast, dropped)``; ``contrast`` is ``None`` when no cell has both
        sides; ``dropped`` counts cells left out because a side has no gain.

    Raises:
        ValueError: ``settings`` and ``gains`` of different lengths.
    """
    if len(settings) != len(gains):
        raise ValueError(f"{len(settings)} settings for {len(gains)} gains")
    base = [all(s.get(k) == v for k, v in reference.items()) for s in settings]
    out = []
    for key in keys:
        ref = reference.get(key)

        def cell(s: Mapping[str, str]) -> tuple:
            return tuple(sorted((k, v) for k, v in s.items() if k != key))

        at_ref = {cell(s): i for i, s in enumerate(settings) if s.get(key) == ref}
        for value in dict.fromkeys(s.get(key) for s in settings if s.get(key) != ref):
            pairs, dropped = [], 0
            for i, s in enumerate(settings):
                j = at_ref.get(cell(s)) if s.get(key) == value else None
                if j is None:
                    continue
                sides = [(w, gains[x]) for w, x in ((1.0, i), (-1.0, j)) if not base[x]]
                if any(g is None for _, g in sides):
                    dropped += 1
                else:
                    pairs.append(sides)
            k = len(pairs)
            terms = tuple((w / k, g) for sides in pairs for w, g in sides)
            out.append((key, value, Contrast(terms) if terms else None, dropped))
    return out
