"""No screen hides a cost: whether the outlier runs set aside change a verdict.

The outlier screen (:func:`afbench.verdict.runs.outlier_runs`) sets aside pairs holding a run
far slower than the other runs of its side, so that one process that lost half its CPU neither
drowns a real effect nor fakes one. But a user pays for every run, stalled or not: a variant
that stalls 2x in a fifth of its runs costs 20% more time on average, and screened alone it was
NO_GAIN in 9 / 19 / 59% of experiments at 8 / 12 / 20 pairs, and a variant 10% faster in typical
runs with those stalls (8% more time on average) was FASTER in 95-98% (issue 30; bench/README.md,
"Stalls and stragglers"). So a screened decision stands only when putting back the outlier runs
that count against it leaves it standing (:func:`screen_check`). A sensitivity analysis of the
screen in the sense of Kalibera & Jones, "Rigorous Benchmarking in Reasonable Time" (ISMM 2013):
the estimand is the time of the runs the user would run, the screen only a way to see it sooner.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from afbench.verdict.estimate import Pairs, Speed
from afbench.verdict.words import FASTER, INCONCLUSIVE, NO_GAIN, SLOWER

#: :attr:`Speed.screen`: the screened decision holds with the outlier runs put back ...
SCREEN_HOLDS = "holds"
#: ... every uncontended pair decided (the outlier runs changed the screened answer) ...
SCREEN_ALL_RUNS = "all_runs"
#: ... or they change the answer and no interval decides: INCONCLUSIVE.
SCREEN_CHANGES = "changes_answer"


def screen_check(speed: Speed, pairs: Pairs, judge: Callable[[Pairs], Speed]) -> Speed:
    """Whether the outlier runs set aside change the answer (module docstring): ``speed`` is
    the verdict of ``pairs`` (screened), ``judge`` the same design's verdict of other pairs.

    * FASTER stands when it holds with the variant's outlier runs put back, SLOWER with the
      baseline's, NO_GAIN with every one (``screen`` ``holds``);
    * else, when every uncontended pair's interval is FASTER or SLOWER, that is the verdict
      (``all_runs``: a variant whose stalls make it slower is SLOWER);
    * else INCONCLUSIVE (``changes_answer``), the screened interval kept.

    Outlier runs per side are counted in the returned :class:`Speed` either way.
    """
    if not pairs.outliers or speed.ci_low_pct is None:
        return speed
    n_b, n_v = pairs.outlier_counts()
    against = {FASTER: "variant", SLOWER: "baseline", NO_GAIN: "both"}.get(speed.decision)
    every = judge(pairs.with_back("both"))
    check = every if against in (None, "both") else judge(pairs.with_back(against))
    if against and check.decision == speed.decision:
        chosen, screen = speed, SCREEN_HOLDS
    elif every.decision in (FASTER, SLOWER):
        chosen, screen, check = every, SCREEN_ALL_RUNS, every
    else:
        chosen = replace(speed, decision=INCONCLUSIVE, below_min_gain=False)
        screen = SCREEN_CHANGES
    return replace(
        chosen,
        screen=screen,
        n_outliers_baseline=n_b,
        n_outliers_variant=n_v,
        with_outliers_low_pct=check.ci_low_pct,
        with_outliers_high_pct=check.ci_high_pct,
    )
