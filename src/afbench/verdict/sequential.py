"""``rounds=auto``: add paired rounds until the interval decides.

:class:`SequentialTest` is the design as a stepper: ``add()`` one pair (with its runs'
contention), get a :class:`Look` (stop or continue, the :class:`~afbench.verdict.Speed` so far,
a progress line). :func:`run_sequential` is the same design as a loop over a ``next_pair``
callback; the experiment's adaptive loop drives one stepper per variant, because one round of
an experiment runs every undecided variant beside the same baseline run.

Pairs set aside (contended, or holding an outlier run: :func:`afbench.verdict.estimate.pair_up`)
do not count as looks: another pair is run in their place, up to ``max_set_aside`` of them.
Boundaries and the repeated intervals are :mod:`afbench.verdict.boundaries`'. The loop stops,
in this order, when the repeated interval excludes 0 (``excludes_zero``), lies within
``+-min_gain_pct`` (``equivalent``: NO_GAIN; the repeated intervals are simultaneous, so this
stop keeps their level), is at most ``precision_pct`` wide on each side
(``precision_reached``), at ``max_pairs`` (``max_pairs``), when set-aside pairs reach
``max_set_aside`` (``set_aside_limit``), or when another pair would overrun the time budget
(``time_budget``: that look is the final analysis, which spends the error left).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from afbench.verdict.design import AUTO, DEFAULT, Design
from afbench.verdict.estimate import (
    NO_PAIRS_LEFT,
    SEQUENTIAL,
    Pairs,
    Speed,
    interval_speed,
    no_interval,
    pair_up,
)
from afbench.verdict.screen import screen_check
from afbench.verdict.words import FASTER, NO_GAIN, SLOWER

CONTINUE = "continue"
EXCLUDES_ZERO = "excludes_zero"
EQUIVALENT = "equivalent"
PRECISION_REACHED = "precision_reached"
MAX_PAIRS = "max_pairs"
SET_ASIDE_LIMIT = "set_aside_limit"
TIME_BUDGET = "time_budget"
INTERRUPTED_STOP = "interrupted"
RUN_FAILED_STOP = "run_failed"
STOP_REASONS = (
    EXCLUDES_ZERO,
    EQUIVALENT,
    PRECISION_REACHED,
    MAX_PAIRS,
    SET_ASIDE_LIMIT,
    TIME_BUDGET,
    INTERRUPTED_STOP,
    RUN_FAILED_STOP,
)

SEQUENTIAL_T = (
    "group-sequential paired t of per-run median log ratios, O'Brien-Fleming alpha "
    "spending (Lan-DeMets), repeated CI (Jennison-Turnbull)"
)


@dataclass(frozen=True)
class Look:
    """The rule's answer after a pair: ``stop``, ``reason`` (a stop reason or ``continue``),
    ``speed`` (``None`` before ``min_pairs`` deciding pairs), ``n_pairs`` deciding pairs and
    ``n_pairs_run`` measured, ``message``: one progress line."""

    stop: bool
    reason: str
    speed: Speed | None
    n_pairs: int
    n_pairs_run: int
    message: str


@dataclass
class SequentialTest:
    """The sequential design as a stepper over pairs (module docstring)."""

    design: Design = field(default_factory=lambda: Design(rounds=AUTO))
    baseline: list[Sequence[float]] = field(default_factory=list)
    variant: list[Sequence[float]] = field(default_factory=list)
    contended: list[tuple[bool, bool]] = field(default_factory=list)
    detail: list[Any] = field(default_factory=list)
    # verdict.contention=keep: a pair contended on both sides decides; one contended on one
    # side is set aside as in set_aside (the loop replaces it), never deciding
    keep_contended: bool = False

    def add(
        self,
        baseline_run: Sequence[float],
        variant_run: Sequence[float],
        contended: tuple[bool, bool] = (False, False),
        detail: Any = "",
        elapsed_s: float | None = None,
    ) -> Look:
        """Add the next pair (step times in seconds; its runs' contention) and look.
        ``elapsed_s``: wall seconds since the first pair started (for the time budget).

        Raises:
            ValueError: a run with no steps or a step time not finite and > 0.
        """
        self.baseline.append(list(baseline_run))
        self.variant.append(list(variant_run))
        self.contended.append((bool(contended[0]), bool(contended[1])))
        self.detail.append(detail)
        return self.look(elapsed_s)

    def speed(self, reason: str = CONTINUE) -> Speed:
        """The verdict at the current pairs: the repeated interval at this look's boundary (the
        final analysis for ``time_budget``), or no interval before ``min_pairs``."""
        d = self.design
        pairs = pair_up(
            self.baseline, self.variant, self.contended, self.detail, self.keep_contended
        )
        n = int(pairs.d.size)
        stop = None if reason == CONTINUE else reason
        common = {
            "level": d.level,
            "min_gain_pct": d.min_gain_pct,
            "mde_power": d.mde_power,
            "design": SEQUENTIAL,
            "stop_reason": stop,
        }
        if n < d.min_pairs:
            why = NO_PAIRS_LEFT if reason == SET_ASIDE_LIMIT else "before_first_look"
            return no_interval(pairs, why, **common)
        n_look = min(n, d.max_pairs)
        c = d.boundary(n_look, final=reason == TIME_BUDGET and n_look < d.max_pairs)
        method = SEQUENTIAL_T + f", looks at {d.min_pairs}..{d.max_pairs} rounds"
        if reason == TIME_BUDGET and n_look < d.max_pairs:
            method += (
                f"; time budget ended it at {n_look} rounds: final analysis spends the error left"
            )

        def judge(p: Pairs) -> Speed:  # this look's boundary, with outlier runs put back too
            se = float(p.d.std(ddof=1)) / math.sqrt(p.d.size)
            return interval_speed(
                p,
                float(p.d.mean()),
                se,
                c,
                float(p.d.size - 1),
                method=method,
                spread_source="pairs",
                run_spread_pct=None,
                pairs_hint=reason != CONTINUE,
                **common,
            )

        return screen_check(judge(pairs), pairs, judge)

    def look(self, elapsed_s: float | None = None) -> Look:
        """Stop or continue at the pairs added so far (module docstring for the order)."""
        d = self.design
        n_run = len(self.baseline)
        speed = self.speed()
        n = speed.n_pairs
        over_budget = (
            d.time_budget_s is not None
            and elapsed_s is not None
            and n_run
            and elapsed_s * (n_run + 1) / n_run > d.time_budget_s
        )
        n_aside = len(speed.set_aside)
        if speed.ci_low_pct is not None and speed.decision in (FASTER, SLOWER):
            reason = EXCLUDES_ZERO
        elif speed.ci_low_pct is not None and speed.decision == NO_GAIN:
            reason = EQUIVALENT
        elif (
            speed.half_width_pct is not None
            and d.precision_pct is not None
            and speed.half_width_pct <= d.precision_pct
        ):
            reason = PRECISION_REACHED
        elif n >= d.max_pairs:
            reason = MAX_PAIRS
        elif n_aside > d.max_set_aside:
            reason = SET_ASIDE_LIMIT
        elif over_budget:
            reason = TIME_BUDGET
        else:
            reason = CONTINUE
        if reason != CONTINUE:
            speed = self.speed(reason)
        return Look(
            stop=reason != CONTINUE,
            reason=reason,
            speed=speed,
            n_pairs=n,
            n_pairs_run=n_run,
            message=_progress(self.design, speed, n, n_run, reason),
        )


def _progress(design: Design, speed: Speed, n: int, n_run: int, reason: str) -> str:
    head = f"round {n}/{design.max_pairs}" + (f" ({n_run - n} set aside)" if n_run > n else "")
    if speed.ci_low_pct is None:
        tail = "continue" if reason == CONTINUE else "stop: " + _STOP_WORDS.get(reason, reason)
        return head + f": no interval before {design.min_pairs} rounds, {tail}"
    kind = "CI, final analysis" if reason == TIME_BUDGET else "repeated CI"
    body = (
        f": gain {speed.gain_pct:+.2f}% [{speed.ci_low_pct:+.2f}%, {speed.ci_high_pct:+.2f}%]"
        f" ({speed.level * 100:g}% {kind}), "
    )
    return (
        head
        + body
        + (
            "continue"
            if reason == CONTINUE
            else "stop: " + _STOP_WORDS.get(reason, reason).format(decision=speed.decision)
        )
    )


#: The progress line's words for a stop (a log line; the report words stops in labels.yaml).
_STOP_WORDS = {
    EXCLUDES_ZERO: "interval excludes 0 ({decision})",
    EQUIVALENT: "interval within the margin (NO_GAIN)",
    PRECISION_REACHED: "half-width at the precision target",
    MAX_PAIRS: "max rounds reached",
    SET_ASIDE_LIMIT: "too many rounds set aside",
    TIME_BUDGET: "time budget would be exceeded by another round (the error left is spent here)",
}


def run_sequential(
    next_pair: Callable[[], tuple],
    *,
    confidence: float = DEFAULT.level,
    min_gain_pct: float = DEFAULT.min_gain_pct,
    min_pairs: int = DEFAULT.min_pairs,
    max_pairs: int = DEFAULT.max_pairs,
    precision_pct: float | None = DEFAULT.precision_pct,
    max_set_aside: int = DEFAULT.max_set_aside,
) -> Speed:
    """The sequential design as a loop: ``next_pair()`` returns the next ``(baseline_run,
    variant_run)`` (each a sequence of step times, seconds), or ``(baseline_run, variant_run,
    (baseline_contended, variant_contended))``; it is called until the design stops.

    No calibration is taken: the looks start at 3 pairs, where the pairs' own spread decides.

    Raises:
        ValueError: settings out of range, or a run :func:`afbench.verdict.runs.run_statistic`
            rejects.
    """
    test = SequentialTest(
        Design(
            rounds=AUTO,
            level=confidence,
            min_gain_pct=min_gain_pct,
            min_pairs=min_pairs,
            max_pairs=max_pairs,
            precision_pct=precision_pct,
            max_set_aside=max_set_aside,
        )
    )
    while True:
        pair = next_pair()
        look = test.add(pair[0], pair[1], pair[2] if len(pair) > 2 else (False, False))
        if look.stop:
            assert look.speed is not None
            return look.speed
