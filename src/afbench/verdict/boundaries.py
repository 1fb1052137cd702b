"""Group-sequential boundaries for the paired t: when ``rounds=auto`` may stop.

A Lan-DeMets alpha-spending design (Lan & DeMets, "Discrete sequential boundaries for clinical
trials", Biometrika 70, 1983), looked at after every deciding pair from ``min_pairs`` to
``max_pairs``. At look ``k`` (``n_k`` pairs, information fraction ``t_k = n_k / max_pairs``) the
two-sided error spent so far is O'Brien-Fleming type, ``alpha(t) = 2 - 2 Phi(z_{1-alpha/2} /
sqrt(t))`` (the default: almost nothing is spent early, so the last boundary stays close to the
fixed-n t quantile), or Pocock type, ``alpha(t) = alpha ln(1 + (e - 1) t)``.

The statistic is the paired t of the log ratios, whose variance is estimated from the pairs
themselves, so the normal boundaries do not apply at 3-8 pairs: the boundaries ``c_k`` for
``|T_k|`` come from a seeded Monte Carlo of the same statistic's path under H0 with normal log
ratios (its law does not depend on the variance, so one simulation serves every machine).
``c_1`` is Student's t quantile at ``1 - alpha(t_1)/2``; each later ``c_k`` makes the
probability of first crossing at look ``k`` equal ``alpha(t_k) - alpha(t_{k-1})``.

The interval at every look is the repeated confidence interval ``mean(d) -+ c_k se`` (Jennison &
Turnbull, JRSS B 51, 1989; "Group Sequential Methods with Applications to Clinical Trials",
2000, ch. 9): all of them hold the true gain at once with probability ``level``, so the
interval is valid whenever the loop stops. A stop that does not look at the log ratios (the time
budget) makes that look the final analysis, spending the error left (:func:`stopped_boundary`;
Jennison & Turnbull 2000, §7.2).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

OBRIEN_FLEMING = "obrien_fleming"
POCOCK = "pocock"
SPENDING_FUNCTIONS = (OBRIEN_FLEMING, POCOCK)
_N_SIMULATIONS = 400_000
_SEED = 20131  # fixed: boundaries must not change between calls or machines


def spent_alpha(t: float, alpha: float, spending: str) -> float:
    """Two-sided error spent by information fraction ``t`` (0 < t <= 1), Lan & DeMets 1983.

    Raises:
        ValueError: ``t`` outside (0, 1], ``alpha`` outside (0, 1) or an unknown spending.
    """
    if not 0 < t <= 1:
        raise ValueError(f"information fraction must be within (0, 1], got {t}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be within (0, 1), got {alpha}")
    if spending == OBRIEN_FLEMING:
        from scipy import stats  # ~0.8 s to import: only when a quantile is needed

        return float(2.0 - 2.0 * stats.norm.cdf(stats.norm.ppf(1 - alpha / 2) / math.sqrt(t)))
    if spending == POCOCK:
        return alpha * math.log(1.0 + (math.e - 1.0) * t)
    raise ValueError(f"spending must be one of {SPENDING_FUNCTIONS}, got {spending!r}")


@lru_cache(maxsize=4)
def _h0_t_paths(min_pairs: int, max_pairs: int) -> tuple[np.ndarray, ...]:
    """``|T_k|`` at looks ``min_pairs..max_pairs`` of the seeded H0 paths (normal log ratios)."""
    d = np.random.default_rng(_SEED).standard_normal((_N_SIMULATIONS, max_pairs))
    out = []
    for n in range(min_pairs, max_pairs + 1):
        x = d[:, :n]
        se = x.std(axis=1, ddof=1) / math.sqrt(n)
        out.append(np.abs(x.mean(axis=1)) / np.maximum(se, 1e-300))
    return tuple(out)


@lru_cache(maxsize=32)
def t_boundaries(
    min_pairs: int, max_pairs: int, alpha: float, spending: str = OBRIEN_FLEMING
) -> tuple[float, ...]:
    """Critical values of ``|T_k|`` at looks ``n_k = min_pairs..max_pairs`` for a two-sided
    error ``alpha`` spent by ``spending`` (seeded Monte Carlo, 400,000 paths; cached). Never
    below the fixed-n t quantile at ``alpha``.

    Raises:
        ValueError: ``min_pairs < 2``, ``max_pairs < min_pairs``, ``alpha`` outside (0, 1).
    """
    if min_pairs < 2 or max_pairs < min_pairs:
        raise ValueError(f"need 2 <= min_pairs <= max_pairs, got {min_pairs}, {max_pairs}")
    from scipy import stats

    looks = list(range(min_pairs, max_pairs + 1))
    spent = [spent_alpha(n / max_pairs, alpha, spending) for n in looks]
    if len(looks) == 1:
        return (float(stats.t.ppf(1 - spent[0] / 2, min_pairs - 1)),)
    alive = np.ones(_N_SIMULATIONS, dtype=bool)
    bounds: list[float] = []
    for k, (n, t_abs) in enumerate(zip(looks, _h0_t_paths(min_pairs, max_pairs))):
        floor = float(stats.t.ppf(1 - alpha / 2, n - 1))
        if k == 0:
            c = float(stats.t.ppf(1 - spent[0] / 2, n - 1))
        else:  # first crossings allowed at this look: the newly spent error, as paths
            n_cross = int(round((spent[k] - spent[k - 1]) * _N_SIMULATIONS))
            survivors = np.sort(t_abs[alive])[::-1]
            c = float(survivors[n_cross]) if 0 <= n_cross < survivors.size else floor
        c = max(c, floor)
        bounds.append(c)
        alive &= t_abs <= c
    return tuple(bounds)


@lru_cache(maxsize=64)
def stopped_boundary(
    min_pairs: int, max_pairs: int, n_pairs: int, alpha: float, spending: str = OBRIEN_FLEMING
) -> float:
    """Critical ``|T_k|`` when a data-independent stop (a time budget) makes the look at
    ``n_pairs`` the final analysis: earlier looks keep :func:`t_boundaries`, and this one spends
    ``alpha - alpha(t_{k-1})`` (Jennison & Turnbull 2000, §7.2). Student's t quantile at
    ``1 - alpha/2`` at the first look; the planned last boundary at ``max_pairs``.

    Raises:
        ValueError: as :func:`t_boundaries`, or ``n_pairs`` outside ``min_pairs..max_pairs``.
    """
    bounds = t_boundaries(min_pairs, max_pairs, alpha, spending)
    if not min_pairs <= n_pairs <= max_pairs:
        raise ValueError(
            f"no look at {n_pairs} pairs: the design looks at {min_pairs}..{max_pairs}"
        )
    if n_pairs == max_pairs:
        return bounds[-1]
    from scipy import stats

    if n_pairs == min_pairs:
        return float(stats.t.ppf(1 - alpha / 2, min_pairs - 1))
    paths = _h0_t_paths(min_pairs, max_pairs)
    alive = np.ones(_N_SIMULATIONS, dtype=bool)
    for earlier, c in zip(paths[: n_pairs - min_pairs], bounds):
        alive &= earlier <= c
    left = alpha - spent_alpha((n_pairs - 1) / max_pairs, alpha, spending)
    n_cross = int(round(left * _N_SIMULATIONS))
    survivors = np.sort(paths[n_pairs - min_pairs][alive])[::-1]
    floor = float(stats.t.ppf(1 - alpha / 2, n_pairs - 1))
    c = float(survivors[n_cross]) if 0 <= n_cross < survivors.size else floor
    return max(c, floor)
