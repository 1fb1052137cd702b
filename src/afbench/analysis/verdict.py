"""Quick-round verdict: is the variant faster than the baseline?

Rule (docs/reference.md §1): ``gain = (baseline - variant) / baseline * 100``; ``<VARIANT>_FASTER``
if gain > 0, ``NO_GAIN`` otherwise, ``RUN_FAILED`` if a run failed or a log is invalid.
One quick round is directional evidence, not a formal multi-round result.
"""

from __future__ import annotations

import math
import re

NO_GAIN = "NO_GAIN"
RUN_FAILED = "RUN_FAILED"
SKIPPED = "SKIPPED"

_NON_ALNUM_RE = re.compile(r"[^A-Za-z0-9]")


def gain_pct(baseline_s: float, variant_s: float) -> float:
    """Relative time saved by the variant, in percent of the baseline.

    ``(baseline_s - variant_s) / baseline_s * 100``: positive means the variant is faster.
    Both are mean step times in seconds (any common unit works).

    Raises:
        ValueError: a time is not finite, or ``baseline_s <= 0``.
    """
    if not (math.isfinite(baseline_s) and math.isfinite(variant_s)):
        raise ValueError(f"step times must be finite: baseline={baseline_s}, variant={variant_s}")
    if baseline_s <= 0:
        raise ValueError(f"baseline step time must be > 0, got {baseline_s}")
    return (baseline_s - variant_s) / baseline_s * 100.0


def verdict_label(variant: str) -> str:
    """Label of a faster variant: ``"af_on"`` -> ``"AF_ON_FASTER"``.

    The name is upper-cased and every character that is not an ASCII letter or digit becomes
    ``_``.

    Raises:
        ValueError: ``variant`` is empty.
    """
    if not variant:
        raise ValueError("variant name is empty")
    return _NON_ALNUM_RE.sub("_", variant).upper() + "_FASTER"


def _usable(seconds: float | None) -> bool:
    return seconds is not None and math.isfinite(seconds) and seconds > 0


def quick_verdict(
    variant: str,
    baseline_s: float | None,
    variant_s: float | None,
    failed: bool,
) -> str:
    """Verdict of one baseline/variant round.

    Args:
        variant: variant name, used for the ``<VARIANT>_FASTER`` label.
        baseline_s, variant_s: mean step times in seconds; ``None`` when the log was invalid.
        failed: any run of the round failed.

    Returns:
        ``RUN_FAILED`` if ``failed`` or a mean is ``None`` (or not a finite positive number,
        which no valid log produces); else ``verdict_label(variant)`` if the gain is > 0,
        else ``NO_GAIN`` (a gain of exactly 0 is no gain).
    """
    if failed or not _usable(baseline_s) or not _usable(variant_s):
        return RUN_FAILED
    assert baseline_s is not None and variant_s is not None  # narrowed by _usable
    if gain_pct(baseline_s, variant_s) > 0:
        return verdict_label(variant)
    return NO_GAIN
