"""The design of a comparison, with every default in one place.

One :class:`Design` for the three designs afbench offers: one round (``rounds=1``), fixed
rounds (``rounds=n``) and ``rounds=auto`` (the group-sequential design of
:mod:`afbench.verdict.sequential`: add rounds until the interval decides). A round is one run
of the baseline and one of the variant; the statistics call it a pair. The settings a user
writes (``verdict.*``: :class:`afbench.config.verdict.VerdictConfig`) take their defaults from
:data:`DEFAULT` (``rounds``, ``min_rounds`` = ``min_pairs``, ``max_rounds`` = ``max_pairs``,
``precision_pct``, ``time_budget_s``, ``confidence`` = ``level``, ``min_gain_pct``); the plan stores an auto design's
settings (``plan.json``) and the report and the adaptive loop rebuild this object from them.
"""

from __future__ import annotations

from dataclasses import dataclass

from afbench.verdict.boundaries import (
    OBRIEN_FLEMING,
    SPENDING_FUNCTIONS,
    stopped_boundary,
    t_boundaries,
)
from afbench.verdict.estimate import (
    DEFAULT_MIN_GAIN_PCT,
    FIXED,
    ONE_ROUND,
    SEQUENTIAL,
    check_settings,
)
from afbench.verdict.power import DEFAULT_MDE_POWER

#: ``rounds`` of the sequential design.
AUTO = "auto"


@dataclass(frozen=True)
class Design:
    """How a comparison is run and judged.

    Attributes:
        rounds: rounds, a positive integer (1: one round; more: fixed rounds), or
            ``"auto"`` (sequential: rounds are added until the interval decides).
        level: confidence of every interval (the repeated intervals' under ``auto``).
        min_gain_pct: the smallest gain that matters, percent (the NO_GAIN margin).
        mde_power: power at which the MDE is stated.
        min_pairs, max_pairs: ``auto``: first look (>= 3) and last (>= ``min_pairs``).
        precision_pct: ``auto``: stop when the interval's half-width is at most this (percent),
            ``None``: never.
        time_budget_s: ``auto``: stop before a round would end past this many seconds from the
            first run (``None``: no budget).
        spending: ``auto``: alpha spending function, ``obrien_fleming`` | ``pocock``.
        max_set_aside: ``auto``: stop when more pairs than this were set aside.

    Raises:
        ValueError: on construction, naming the setting out of range.
    """

    rounds: int | str = 1
    level: float = 0.95
    min_gain_pct: float = DEFAULT_MIN_GAIN_PCT
    mde_power: float = DEFAULT_MDE_POWER
    min_pairs: int = 3
    max_pairs: int = 8
    precision_pct: float | None = 1.0
    time_budget_s: float | None = None
    spending: str = OBRIEN_FLEMING
    max_set_aside: int = 2

    def __post_init__(self) -> None:
        if not (
            self.rounds == AUTO
            or (
                isinstance(self.rounds, int)
                and not isinstance(self.rounds, bool)
                and self.rounds >= 1
            )
        ):
            raise ValueError(f"rounds must be a positive integer or 'auto', got {self.rounds!r}")
        if not 0 < self.level < 1:
            raise ValueError(f"level must be within (0, 1), got {self.level}")
        check_settings(self.level, self.min_gain_pct, None, None)
        if not 0 < self.mde_power < 1:
            raise ValueError(f"mde_power must be within (0, 1), got {self.mde_power}")
        if self.min_pairs < 3:
            raise ValueError(f"min_pairs must be >= 3, got {self.min_pairs}")
        if self.max_pairs < self.min_pairs:
            raise ValueError(
                f"max_pairs ({self.max_pairs}) must be >= min_pairs ({self.min_pairs})"
            )
        if self.precision_pct is not None and not self.precision_pct > 0:
            raise ValueError(f"precision_pct must be > 0, got {self.precision_pct}")
        if self.time_budget_s is not None and not self.time_budget_s > 0:
            raise ValueError(f"time_budget_s must be > 0, got {self.time_budget_s}")
        if self.spending not in SPENDING_FUNCTIONS:
            raise ValueError(f"spending must be one of {SPENDING_FUNCTIONS}, got {self.spending!r}")
        if self.max_set_aside < 0:
            raise ValueError(f"max_set_aside must be >= 0, got {self.max_set_aside}")

    @property
    def kind(self) -> str:
        """``one_round`` | ``fixed`` | ``sequential`` (:attr:`afbench.verdict.Speed.design`)."""
        return SEQUENTIAL if self.rounds == AUTO else ONE_ROUND if self.rounds == 1 else FIXED

    def boundary(self, n_pairs: int, final: bool = False) -> float:
        """``auto``: critical ``|t|`` at the look with ``n_pairs`` deciding pairs; ``final``: the
        final analysis of a time-budget stop. Raises ValueError outside
        ``min_pairs..max_pairs``."""
        alpha = 1.0 - self.level
        if final:
            return stopped_boundary(self.min_pairs, self.max_pairs, n_pairs, alpha, self.spending)
        if not self.min_pairs <= n_pairs <= self.max_pairs:
            raise ValueError(
                f"no look at {n_pairs} pairs: the design looks at "
                f"{self.min_pairs}..{self.max_pairs}"
            )
        return t_boundaries(self.min_pairs, self.max_pairs, alpha, self.spending)[
            n_pairs - self.min_pairs
        ]


#: Every default of every design (config takes its defaults from here).
DEFAULT = Design()
