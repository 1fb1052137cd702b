"""The decision vocabulary of every verdict afbench prints, and the reference's quick rule.

One home for the words: :data:`DECISIONS` are what :func:`afbench.verdict.compare_runs` and
:func:`afbench.verdict.run_sequential` decide; the report turns a decision into
``<VARIANT>_FASTER`` / ``<VARIANT>_SLOWER`` with :func:`verdict_word`; the sentences around
them live in the report templates and ``labels.yaml`` (en, zh), never here.

The reference's quick rule (docs/reference.md §1, the AutoFuse OFF/ON script):
``gain = (baseline - variant) / baseline * 100`` of the mean step times, ``<VARIANT>_FASTER`` if
gain > 0, ``NO_GAIN`` otherwise, ``RUN_FAILED`` if a run failed or a log is invalid. It has no
interval; afbench shows it beside its own verdict, labelled as the reference's.
"""

from __future__ import annotations

import math
import re

FASTER = "FASTER"
SLOWER = "SLOWER"
NO_GAIN = "NO_GAIN"
INCONCLUSIVE = "INCONCLUSIVE"
#: What an interval of the gain can decide (:func:`decide`).
DECISIONS = (FASTER, SLOWER, NO_GAIN, INCONCLUSIVE)
#: Outcomes of a comparison that has no interval at all.
RUN_FAILED = "RUN_FAILED"
SKIPPED = "SKIPPED"

_NON_ALNUM_RE = re.compile(r"[^A-Za-z0-9]")


def decide(ci_low_pct: float, ci_high_pct: float, min_gain_pct: float) -> str:
    """What an interval of the gain (percent, positive = variant faster) lets us say.

    ``FASTER`` when the whole interval is above 0, ``SLOWER`` when it is wholly below 0,
    ``NO_GAIN`` when it lies wholly within ``(-min_gain_pct, +min_gain_pct)`` (equivalence: the
    two one-sided tests of Schuirmann, J. Pharmacokin. Biopharm. 15, 1987, read off a
    two-sided interval at the verdict's level, which is conservative), otherwise
    ``INCONCLUSIVE``. A slowdown is therefore never ``NO_GAIN``: an interval that reaches below
    ``-min_gain_pct`` is SLOWER or INCONCLUSIVE.

    Raises:
        ValueError: ``ci_low_pct > ci_high_pct`` or ``min_gain_pct`` not in (0, 100).
    """
    if ci_low_pct > ci_high_pct:
        raise ValueError(f"interval bounds reversed: [{ci_low_pct}, {ci_high_pct}]")
    if not 0 < min_gain_pct < 100:
        raise ValueError(f"min_gain_pct must be within (0, 100), got {min_gain_pct}")
    if ci_low_pct > 0:
        return FASTER
    if ci_high_pct < 0:
        return SLOWER
    if -min_gain_pct < ci_low_pct and ci_high_pct < min_gain_pct:
        return NO_GAIN
    return INCONCLUSIVE


def verdict_label(variant: str) -> str:
    """Label of a faster variant: ``"af_on"`` -> ``"AF_ON_FASTER"`` (upper-cased; every character
    that is not an ASCII letter or digit becomes ``_``).

    Raises:
        ValueError: ``variant`` is empty.
    """
    if not variant:
        raise ValueError("variant name is empty")
    return _NON_ALNUM_RE.sub("_", variant).upper() + "_FASTER"


def verdict_word(decision: str, variant: str) -> str:
    """The report's word for ``decision`` about ``variant``: ``AF_ON_FASTER``, ``AF_ON_SLOWER``,
    ``NO_GAIN`` or ``INCONCLUSIVE``.

    Raises:
        ValueError: ``decision`` is not one of :data:`DECISIONS`, or ``variant`` is empty.
    """
    if decision not in DECISIONS:
        raise ValueError(f"unknown decision {decision!r}; expected one of {DECISIONS}")
    label = verdict_label(variant)
    if decision == FASTER:
        return label
    if decision == SLOWER:
        return label.removesuffix("_FASTER") + "_SLOWER"
    return decision


def gain_pct(baseline_s: float, variant_s: float) -> float:
    """Relative time saved by the variant, percent of the baseline:
    ``(baseline_s - variant_s) / baseline_s * 100`` (positive = variant faster).

    Raises:
        ValueError: a time is not finite, or ``baseline_s <= 0``.
    """
    if not (math.isfinite(baseline_s) and math.isfinite(variant_s)):
        raise ValueError(f"step times must be finite: baseline={baseline_s}, variant={variant_s}")
    if baseline_s <= 0:
        raise ValueError(f"baseline step time must be > 0, got {baseline_s}")
    return (baseline_s - variant_s) / baseline_s * 100.0


def _usable(seconds: float | None) -> bool:
    return seconds is not None and math.isfinite(seconds) and seconds > 0


def quick_verdict(
    variant: str, baseline_s: float | None, variant_s: float | None, failed: bool
) -> str:
    """The reference's verdict of one baseline/variant round (no interval).

    Args:
        variant: variant name, for the ``<VARIANT>_FASTER`` label.
        baseline_s, variant_s: mean step times, seconds; ``None`` when the log was invalid.
        failed: any run of the round failed.

    Returns:
        ``RUN_FAILED`` if ``failed`` or a mean is unusable; ``<VARIANT>_FASTER`` if the gain is
        > 0; else ``NO_GAIN`` (a gain of exactly 0 is no gain).
    """
    if failed or not _usable(baseline_s) or not _usable(variant_s):
        return RUN_FAILED
    assert baseline_s is not None and variant_s is not None  # narrowed by _usable
    return verdict_label(variant) if gain_pct(baseline_s, variant_s) > 0 else NO_GAIN
