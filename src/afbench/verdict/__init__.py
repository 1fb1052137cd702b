"""afbench's verdict: is the variant faster than the baseline, by how much, how sure?

The single home of the design (one round, fixed rounds, sequential), the pairing, the
estimate, the minimum detectable effect and the decision vocabulary. The experiment report,
the ``rounds=auto`` loop, the sweep report and the history check all call it; nothing else
chooses an estimator or words a decision (the sentences live in the report templates).

Pure: numpy and scipy only (scipy imported when an interval is computed); it never reads
files. Its inputs are step times (seconds) per run, each run's contention as measured by the
launcher/worker, and the host's run-to-run spread from a calibration.

Public API (stable):

* :class:`Design` and :data:`DEFAULT`: one round, fixed rounds or ``rounds=auto``, every
  default in one place (config takes its defaults from it).
* :func:`compare_runs` -> :class:`Speed`: a fixed design (one round or fixed rounds), with
  the host calibration only as a :class:`RunSpread` (a bare spread is refused).
* :func:`compare_records` -> :class:`Speed`: the history gate, the newest record against
  earlier records (the record is the unit: a prediction interval of record means).
* :func:`compare_groups` -> :class:`Speed`: unpaired runs, a new result against a group of
  runs (the gate's fallback while there are fewer than :data:`MIN_RECORDS` records).
* :func:`run_sequential` -> :class:`Speed`, and :class:`SequentialTest` (the same design as a
  stepper, for loops that launch several variants per round).
* Every design checks that the outlier runs it set aside do not change its answer
  (:mod:`afbench.verdict.screen`): :attr:`Speed.screen`.
* :class:`Speed`, :class:`SetAside`, :data:`DECISIONS` (``FASTER``, ``SLOWER``, ``NO_GAIN``,
  ``INCONCLUSIVE``), :func:`verdict_word`, :func:`decide`, :func:`sweep_level`,
  :func:`pairs_for_mde`, :func:`run_spread_from_pairs` (a calibration from paired runs),
  :func:`combine` (the spread of a pair whose runs are of two calibrated kinds),
  :func:`one_kind` (an A/A's spread as its kind's calibration), :class:`RunLocation` (what a
  kind of run took when calibrated: one round checks its runs against it).

The methods and their measured false-positive rate, coverage, power and MDE claims:
docs/statistics.md and bench/README.md (bench/verdict_sim.py).
"""

from afbench.verdict.calibration import (
    RunLocation,
    RunSpread,
    combine,
    one_kind,
    run_spread_from_pairs,
)
from afbench.verdict.design import AUTO, DEFAULT, Design
from afbench.verdict.estimate import (
    DEFAULT_MIN_GAIN_PCT,
    FIXED,
    ONE_ROUND,
    SEQUENTIAL,
    SetAside,
    Speed,
    sweep_level,
)
from afbench.verdict.fixed import compare_runs
from afbench.verdict.groups import (
    DEFAULT_NIGHT_SPREAD_PCT,
    MIN_RECORDS,
    compare_groups,
    compare_records,
)
from afbench.verdict.power import DEFAULT_MDE_POWER, pairs_for_mde
from afbench.verdict.sequential import Look, SequentialTest, run_sequential
from afbench.verdict.words import (
    DECISIONS,
    FASTER,
    INCONCLUSIVE,
    NO_GAIN,
    RUN_FAILED,
    SKIPPED,
    SLOWER,
    decide,
    gain_pct,
    quick_verdict,
    verdict_label,
    verdict_word,
)

__all__ = [
    "AUTO",
    "DECISIONS",
    "DEFAULT",
    "DEFAULT_MDE_POWER",
    "DEFAULT_MIN_GAIN_PCT",
    "Design",
    "FASTER",
    "FIXED",
    "INCONCLUSIVE",
    "DEFAULT_NIGHT_SPREAD_PCT",
    "Look",
    "MIN_RECORDS",
    "NO_GAIN",
    "compare_groups",
    "compare_records",
    "ONE_ROUND",
    "RUN_FAILED",
    "RunLocation",
    "RunSpread",
    "SEQUENTIAL",
    "SKIPPED",
    "SLOWER",
    "SequentialTest",
    "SetAside",
    "Speed",
    "combine",
    "compare_runs",
    "decide",
    "gain_pct",
    "one_kind",
    "pairs_for_mde",
    "quick_verdict",
    "run_sequential",
    "run_spread_from_pairs",
    "sweep_level",
    "verdict_label",
    "verdict_word",
]
