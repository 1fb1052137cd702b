"""No screen hides a cost: whether the outlier runs set aside change a verdict.

The outlier screen (:func:`afbench.verdict.runs.outlier_runs`) sets aside pairs holding a run
far slower than the other runs of its side, so that one process that lost half its CPU neither
drowns a real effect nor fakes one. But a user pays for every run, stalled or not: a variant
that stalls 2x in a fifth of its runs costs 20% more time on average, and screened alone it was
NO_GAIN in 9 / 19 / 59% of experiments at 8 / 12 / 20 pairs, and a variant 10% faster in typical
runs with those stalls (8% more time on average) was FASTER in 95-98% (issue 30; bench/README.md,
"Stalls and stragglers"). So a screened decision stands only when the cost of the outlier runs
that count against it, added back, leaves it standing (:func:`screen_check`); otherwise every
run decides, or nothing does. A sensitivity analysis of the
screen in the sense of Kalibera & Jones, "Rigorous Benchmarking in Reasonable Time" (ISMM 2013):
the estimand is the time of the runs the user would run, the screen only a way to see it sooner.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from afbench.verdict.estimate import Pairs, Speed
from afbench.verdict.words import FASTER, INCONCLUSIVE, NO_GAIN, SLOWER, decide

#: :attr:`Speed.screen`: the screened decision holds with the outlier runs put back ...
SCREEN_HOLDS = "holds"
#: ... every uncontended pair decided (the outlier runs changed the screened answer) ...
SCREEN_ALL_RUNS = "all_runs"
#: ... or they change the answer and no interval decides: INCONCLUSIVE.
SCREEN_CHANGES = "changes_answer"


def with_cost(speed: Speed, pairs: Pairs, side: str) -> tuple[float, float]:
    """``speed``'s interval (percent) moved by what the outlier runs of ``side`` (``baseline``,
    ``variant`` or ``both``) cost: the mean log ratio with their pairs put back minus the
    screened one. The width stays the screened pairs' (their spread is the run-to-run noise);
    the stalls seen are counted as the cost they were, not as noise."""
    back = pairs.with_back(side).d
    shift = math.exp(float(back.mean()) - float(pairs.d.mean()))
    assert speed.ci_low_pct is not None and speed.ci_high_pct is not None
    return (100.0 - (100.0 - speed.ci_low_pct) * shift,
            100.0 - (100.0 - speed.ci_high_pct) * shift)


def screen_check(speed: Speed, pairs: Pairs, judge: Callable[[Pairs], Speed]) -> Speed:
    """Whether the outlier runs set aside change the answer (module docstring): ``speed`` is
    the verdict of ``pairs`` (screened), ``judge`` the same design's verdict of other pairs.

    * FASTER stands when its interval, moved by the cost of the variant's outlier runs
      (:func:`with_cost`), is still FASTER; SLOWER with the baseline's; NO_GAIN with every one
      (``screen`` ``holds``);
    * else, when the interval of every uncontended pair (``judge``: the stalls as noise) is
      FASTER or SLOWER, that is the verdict (``all_runs``: a variant whose stalls make it
      slower is SLOWER);
    * else INCONCLUSIVE (``changes_answer``), the screened interval kept.

    Outlier runs per side are counted in the returned :class:`Speed` either way; its
    ``with_outliers_*_pct`` is the interval the check judged.
    """
    if not pairs.outliers or speed.ci_low_pct is None:
        return speed
    n_b, n_v = pairs.outlier_counts()
    against = {FASTER: "variant", SLOWER: "baseline", NO_GAIN: "both"}.get(speed.decision)
    low = high = None
    if against:
        low, high = with_cost(speed, pairs, against)
        if decide(low, high, speed.min_gain_pct) == speed.decision:
            return replace(speed, screen=SCREEN_HOLDS, n_outliers_baseline=n_b,
                           n_outliers_variant=n_v, with_outliers_low_pct=low,
                           with_outliers_high_pct=high)
    every = judge(pairs.with_back("both"))
    if every.decision in (FASTER, SLOWER):
        chosen, screen = every, SCREEN_ALL_RUNS
        low, high = every.ci_low_pct, every.ci_high_pct
    else:
        chosen = replace(speed, decision=INCONCLUSIVE, below_min_gain=False)
        screen = SCREEN_CHANGES
        if low is None:
            low, high = with_cost(speed, pairs, "both")
    return replace(chosen, screen=screen, n_outliers_baseline=n_b, n_outliers_variant=n_v,
                   with_outliers_low_pct=low, with_outliers_high_pct=high)
