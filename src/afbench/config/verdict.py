"""The ``verdict`` section of the config: the settings that decide a verdict, and the keys that
moved there.

A round is one run of every variant of the verdict phase, the baseline's among them; a verdict
compares each variant's run with the baseline's run of the same round (the statistics call the
two a pair: docs/statistics.md §2). How the rounds are ordered and run (``experiment.order``,
``skip_policy``, ``rerun_contended``, ``wait_for_quiet_s``, ``sweep_pairing``) stays in
:class:`afbench.config.models.ExperimentConfig`: it decides what runs when, not how the runs are
judged.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, PositiveFloat, PositiveInt, field_validator, model_validator

from afbench.config.base import Section
from afbench.verdict.design import DEFAULT as DESIGN  # every design default's one home


class VerdictConfig(Section):
    """The settings that decide a verdict (``verdict.*``; docs/statistics.md). A round is one
    run of every variant of the verdict phase, the baseline's among them; a verdict compares
    the variant's run with the baseline's of the same round. Defaults: the design's
    (:data:`afbench.verdict.design.DEFAULT`), their one home."""

    # Rounds of the verdict phase (a positive integer; other phases run once), or "auto": the
    # verdict phase adds rounds until the gain's interval is decided (docs/statistics.md §5).
    rounds: PositiveInt | Literal["auto"] = DESIGN.rounds
    # rounds=auto: stop when the interval's half-width is at most this many percent ...
    precision_pct: PositiveFloat = DESIGN.precision_pct
    # ... after at least min_rounds and at most max_rounds rounds ...
    min_rounds: Annotated[int, Field(ge=3)] = DESIGN.min_pairs
    max_rounds: PositiveInt = DESIGN.max_pairs
    # ... or when another round would end past this many seconds from the first run (null: none).
    time_budget_s: PositiveFloat | None = DESIGN.time_budget_s
    # Confidence level of every gain interval (one round, fixed rounds and rounds=auto).
    confidence: float = Field(DESIGN.level, gt=0.5, lt=1.0)
    # The smallest gain that matters, percent: NO_GAIN means the whole interval lies within
    # +-this (docs/statistics.md §7).
    min_gain_pct: float = Field(DESIGN.min_gain_pct, gt=0, lt=100)  # 100% would be zero time
    # What the verdict does with a run measured as contended (afbench.analysis.contention):
    # set_aside (its round never decides, and is named) or keep (it decides like any run: for
    # a machine that is always shared, e.g. a CI runner, or step times that are not wall
    # times; the runs table still shows the measures).
    contention: Literal["set_aside", "keep"] = "set_aside"

    @field_validator("rounds", mode="before")
    @classmethod
    def _rounds(cls, v: Any) -> Any:
        # one message for every bad value instead of pydantic's two union branches
        ok = v == "auto" or (isinstance(v, int) and not isinstance(v, bool) and v >= 1)
        if not ok:
            raise ValueError("expected a positive integer or 'auto'")  # the input is appended
        return v

    @model_validator(mode="after")
    def _bounds(self) -> "VerdictConfig":
        # the adaptive loop's bounds matter (and are checked) only under rounds=auto
        if self.rounds == "auto" and self.max_rounds < self.min_rounds:
            raise ValueError(
                f"max_rounds {self.max_rounds} is below min_rounds {self.min_rounds}: "
                "raise verdict.max_rounds or lower verdict.min_rounds"
            )
        return self


#: Keys that moved to another section: old dotted key -> new one. validate_config and the
#: command line refuse the old key in one line naming the new (afbench.config.validate.moved);
#: experiment.json files written before the move are upgraded (afbench.store.experiment).
MOVED = {
    "experiment.repeats": "verdict.rounds",
    "experiment.min_repeats": "verdict.min_rounds",
    "experiment.max_repeats": "verdict.max_rounds",
    "experiment.precision_pct": "verdict.precision_pct",
    "experiment.time_budget_s": "verdict.time_budget_s",
    "report.confidence": "verdict.confidence",
    "report.min_gain_pct": "verdict.min_gain_pct",
    "report.contention": "verdict.contention",
}
