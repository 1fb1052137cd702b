"""Paired comparison of step times: run statistic, burst flags, gain interval, verdict.

The design (docs/statistics.md): repeats of the baseline and the variant run in adjacent,
counterbalanced pairs (A B, B A, A B, ...), so slow drift of the machine moves both members
of a pair alike and cancels in their ratio. Each run is summarised by the **median** of its
measured steps (a load burst moves it little; a mean moves with it); steps far outside the
run's own spread are flagged as bursts and counted, never dropped. The gain's interval comes
from the per-pair log ratios ``d_i = ln(variant_i / baseline_i)``: a one-sample Student t
interval with ``n - 1`` degrees of freedom (pairs, not steps, are the independent units:
Kalibera & Jones, "Rigorous Benchmarking in Reasonable Time", ISMM 2013, §3 — the variation
between runs, not within them, bounds what repetition can resolve).

Units everywhere: step times in seconds (any common unit works), gains in percent of the
baseline, positive = variant faster: ``gain = (1 - variant_time / baseline_time) * 100``.
All results are frozen dataclasses; ``dataclasses.asdict`` turns them into plain dicts.

scipy is imported inside the functions that need it (0.8 s to import).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from afbench.analysis.verdict import NO_GAIN, verdict_label

FASTER = "FASTER"
SLOWER = "SLOWER"
INCONCLUSIVE = "INCONCLUSIVE"
DECISIONS = (FASTER, SLOWER, NO_GAIN, INCONCLUSIVE)

#: A step is a burst when ``|ln(step / median)|`` exceeds this many robust standard
#: deviations of the run (1.4826 * MAD of the log step times) ...
BURST_ROBUST_Z = 5.0
#: ... and at least this relative distance (a run with almost no spread must not call a 2%
#: wobble a burst).
BURST_MIN_LOG_DISTANCE = math.log(1.25)
#: Default smallest gain that matters, in percent: ``NO_GAIN`` means the interval excludes
#: every gain of this size or more. 2% is below the smallest published switch effect
#: (+2.7% fused Add+RMSNorm on Llama-2-7B).
DEFAULT_MIN_GAIN_PCT = 2.0
#: Fraction of pairs trimmed from each end of the per-pair log ratios (Yuen's trimmed t):
#: from 5 pairs on, the most extreme pair on each side is set aside (bench/stats_power.py).
DEFAULT_PAIR_TRIM = 0.2
#: Power at which the minimum detectable effect is stated.
DEFAULT_MDE_POWER = 0.8

PAIRED_T_METHOD = "paired log-ratio trimmed t (Yuen, 20%) of per-run medians"
STEP_LEVEL_METHOD = (
    "step-level difference of medians, SE the larger of AR(1)-corrected and half-split drift"
)
BOOTSTRAP_METHOD = "hierarchical bootstrap (pairs, then steps) of per-run medians"

_MAD_TO_SD = 1.4826  # MAD of a normal sample times this estimates its standard deviation
_MEDIAN_SE_FACTOR = math.sqrt(math.pi / 2)  # se(median) / se(mean) for a normal sample


@dataclass(frozen=True)
class RunStatistic:
    """Robust summary of one run's measured steps.

    Attributes:
        location_s: median of the measured step times, seconds.
        n_steps: measured steps.
        n_bursts: steps flagged as bursts (they stay in the median's input).
        burst_indices: 0-based positions of the flagged steps in the input list.
        spread_pct: robust spread of the steps, 1.4826 * MAD of ln(step time) * 100, i.e.
            about the step-time coefficient of variation in percent for a normal core.
        method: ``"median"``.
    """

    location_s: float
    n_steps: int
    n_bursts: int
    burst_indices: tuple[int, ...]
    spread_pct: float
    method: str = "median"


@dataclass(frozen=True)
class GainEstimate:
    """Gain of a variant over the baseline with its interval and what it lets us say.

    Attributes:
        gain_pct: point estimate, percent of baseline time, positive = variant faster.
        ci_low_pct, ci_high_pct: the interval of the gain at ``level``, percent.
        level: confidence level of the interval (already adjusted for a sweep or for
            sequential looks where that applies).
        method: how the interval was computed, in words (with the citation in docs).
        n_pairs: baseline/variant pairs used (1 for a one-round comparison).
        mde_pct: minimum detectable effect, percent: the smallest true gain this design and
            this spread would detect with ``mde_power`` probability at ``level``.
        mde_power: power at which ``mde_pct`` is stated.
        min_gain_pct: the smallest gain that matters; ``NO_GAIN`` means the interval is
            below it.
        critical_value: the t (or boundary) multiplier of the standard error.
        df: degrees of freedom of that multiplier.
        n_steps_baseline, n_steps_variant: measured steps over all runs of each side.
        n_bursts_baseline, n_bursts_variant: steps flagged as bursts on each side.
        decision: ``FASTER``, ``SLOWER``, ``NO_GAIN`` or ``INCONCLUSIVE`` (see :func:`decide`).
        pairs_for_min_gain: with 2 or more pairs, how many pairs a fixed paired design would
            need for its MDE to reach ``min_gain_pct`` at this spread
            (:func:`pairs_for_mde`); ``None`` for one round, whose spread is not a pair's.
    """

    gain_pct: float
    ci_low_pct: float
    ci_high_pct: float
    level: float
    method: str
    n_pairs: int
    mde_pct: float
    mde_power: float
    min_gain_pct: float
    critical_value: float
    df: float
    n_steps_baseline: int
    n_steps_variant: int
    n_bursts_baseline: int
    n_bursts_variant: int
    decision: str
    pairs_for_min_gain: int | None = None

    @property
    def half_width_pct(self) -> float:
        """Half the interval's width, percent."""
        return (self.ci_high_pct - self.ci_low_pct) / 2.0

    def verdict(self, variant: str) -> str:
        """The report's word: ``<VARIANT>_FASTER``, ``<VARIANT>_SLOWER``, ``NO_GAIN`` or
        ``INCONCLUSIVE`` (``"af_on"`` -> ``"AF_ON_FASTER"``)."""
        return verdict_word(self.decision, variant)


def verdict_word(decision: str, variant: str) -> str:
    """Map a decision to the report's word for ``variant``.

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


def _log_steps(step_times_s: Sequence[float], what: str) -> np.ndarray:
    array = np.asarray(list(step_times_s), dtype=float)
    if array.size == 0:
        raise ValueError(f"{what}: no measured steps")
    if not np.all(np.isfinite(array)) or np.any(array <= 0):
        raise ValueError(f"{what}: step times must be finite and > 0, got {array.tolist()}")
    return np.log(array)


def _robust_sd(log_times: np.ndarray) -> float:
    return _MAD_TO_SD * float(np.median(np.abs(log_times - np.median(log_times))))


def run_statistic(step_times_s: Sequence[float], what: str = "run") -> RunStatistic:
    """Median of one run's measured step times, with load bursts flagged.

    A step is flagged when ``|ln(t / median)| > max(5 * 1.4826 * MAD(ln t), ln 1.25)``: five
    robust standard deviations of the run's own log step times and at least 25% away from
    the median. Flagged steps stay in the median's input (the median already resists them)
    and are counted for the report.

    Args:
        step_times_s: the run's measured step times, seconds (any unit), in step order.
        what: name of the run for error messages.

    Raises:
        ValueError: no steps, or a step time that is not finite and > 0 (names ``what``).
    """
    logs = _log_steps(step_times_s, what)
    center = float(np.median(logs))
    sd = _robust_sd(logs)
    threshold = max(BURST_ROBUST_Z * sd, BURST_MIN_LOG_DISTANCE)
    bursts = tuple(int(i) for i in np.flatnonzero(np.abs(logs - center) > threshold))
    return RunStatistic(
        location_s=float(math.exp(center)),
        n_steps=int(logs.size),
        n_bursts=len(bursts),
        burst_indices=bursts,
        spread_pct=sd * 100.0,
    )


def _check_level(level: float) -> None:
    if not 0 < level < 1:
        raise ValueError(f"confidence level must be within (0, 1), got {level}")


def _gain_from_log(d: float) -> float:
    return (1.0 - math.exp(d)) * 100.0


def decide(ci_low_pct: float, ci_high_pct: float, min_gain_pct: float) -> str:
    """What an interval of the gain lets us say.

    ``FASTER`` when the whole interval is above 0; ``SLOWER`` when it is wholly below 0;
    ``NO_GAIN`` when it holds 0 but excludes every gain of ``min_gain_pct`` or more
    (``ci_high_pct < min_gain_pct``); otherwise ``INCONCLUSIVE`` (too wide to tell).

    Raises:
        ValueError: ``ci_low_pct > ci_high_pct`` or ``min_gain_pct <= 0``.
    """
    if ci_low_pct > ci_high_pct:
        raise ValueError(f"interval bounds reversed: [{ci_low_pct}, {ci_high_pct}]")
    if min_gain_pct <= 0:
        raise ValueError(f"min_gain_pct must be > 0, got {min_gain_pct}")
    if ci_low_pct > 0:
        return FASTER
    if ci_high_pct < 0:
        return SLOWER
    if ci_high_pct < min_gain_pct:
        return NO_GAIN
    return INCONCLUSIVE


def _estimate(
    mean_log: float,
    se_log: float,
    critical: float,
    df: float,
    *,
    level: float,
    method: str,
    n_pairs: int,
    min_gain_pct: float,
    mde_power: float,
    baseline: Sequence[RunStatistic],
    variant: Sequence[RunStatistic],
) -> GainEstimate:
    from scipy import stats  # lazily: 0.8 s to import

    # ln(variant / baseline) > 0 means slower, so the gain's low bound comes from the high
    # log bound; exp keeps the interval exact under the percent transformation.
    low = _gain_from_log(mean_log + critical * se_log)
    high = _gain_from_log(mean_log - critical * se_log)
    mde_log = _mde_log(critical, df, se_log, mde_power)
    return GainEstimate(
        gain_pct=_gain_from_log(mean_log),
        ci_low_pct=low,
        ci_high_pct=high,
        level=level,
        method=method,
        n_pairs=n_pairs,
        mde_pct=_gain_from_log(-mde_log),
        mde_power=mde_power,
        min_gain_pct=min_gain_pct,
        critical_value=critical,
        df=df,
        n_steps_baseline=sum(r.n_steps for r in baseline),
        n_steps_variant=sum(r.n_steps for r in variant),
        n_bursts_baseline=sum(r.n_bursts for r in baseline),
        n_bursts_variant=sum(r.n_bursts for r in variant),
        decision=decide(low, high, min_gain_pct),
        pairs_for_min_gain=(
            pairs_for_mde(se_log * math.sqrt(n_pairs), min_gain_pct, level, mde_power)
            if n_pairs >= 2 and 0 < min_gain_pct < 100 and math.isfinite(se_log) else None
        ),
    )


def _mde_log(critical: float, df: float, se_log: float, power: float) -> float:
    """Minimum detectable effect on the log scale: ``(c + t_{power, df}) * se``."""
    from scipy import stats  # lazily: 0.8 s to import

    return (critical + float(stats.t.ppf(power, df))) * se_log


#: pairs_for_mde gives up above this many pairs (and returns it): beyond it, the spread, not
#: the number of pairs, is what to change.
MAX_PAIRS_FOR_MDE = 10_000


def pairs_for_mde(sd_pair_log: float, target_pct: float, level: float = 0.95,
                  power: float = DEFAULT_MDE_POWER) -> int:
    """Fewest pairs ``n`` of a fixed paired t design whose minimum detectable effect is at most
    ``target_pct``: ``(t_{(1+level)/2, n-1} + t_{power, n-1}) * sd_pair_log / sqrt(n) <=
    ln(1 / (1 - target_pct / 100))``, the usual power calculation of the paired t with the
    noncentral t replaced by central quantiles (J. Cohen, *Statistical Power Analysis for the
    Behavioral Sciences*, 1988, ch. 2), the same rule as this module's MDE.

    Args:
        sd_pair_log: standard deviation of one pair's log ratio (``se * sqrt(n)`` of a paired
            estimate).
        target_pct: the MDE wanted, percent of baseline time, ``0 < target_pct < 100``.

    Returns:
        ``n >= 2``, at most :data:`MAX_PAIRS_FOR_MDE`.

    Raises:
        ValueError: ``sd_pair_log < 0`` or not finite, ``target_pct`` outside (0, 100).
    """
    if not (math.isfinite(sd_pair_log) and sd_pair_log >= 0):
        raise ValueError(f"sd_pair_log must be finite and >= 0, got {sd_pair_log}")
    if not 0 < target_pct < 100:
        raise ValueError(f"target_pct must be within (0, 100), got {target_pct}")
    _check_level(level)
    from scipy import stats  # lazily: 0.8 s to import

    effect = math.log(1.0 / (1.0 - target_pct / 100.0))

    def mde_log(n: int) -> float:  # the module's MDE rule at the fixed-n t quantile
        return _mde_log(float(stats.t.ppf(0.5 + level / 2.0, n - 1)), n - 1,
                        sd_pair_log / math.sqrt(n), power)

    lo, hi = 2, 2
    while mde_log(hi) > effect:  # the MDE falls with n: bracket, then bisect
        if hi >= MAX_PAIRS_FOR_MDE:
            return MAX_PAIRS_FOR_MDE
        lo, hi = hi, min(hi * 2, MAX_PAIRS_FOR_MDE)
    while lo < hi:
        mid = (lo + hi) // 2
        if mde_log(mid) <= effect:
            hi = mid
        else:
            lo = mid + 1
    return hi


def _pair_statistics(
    baseline_runs: Sequence[Sequence[float]], variant_runs: Sequence[Sequence[float]]
) -> tuple[list[RunStatistic], list[RunStatistic]]:
    if len(baseline_runs) != len(variant_runs):
        raise ValueError(
            f"paired design needs as many baseline as variant runs (paired by repeat index), "
            f"got {len(baseline_runs)} and {len(variant_runs)}"
        )
    base = [run_statistic(r, f"baseline repeat {i + 1}") for i, r in enumerate(baseline_runs)]
    var = [run_statistic(r, f"variant repeat {i + 1}") for i, r in enumerate(variant_runs)]
    return base, var


def log_ratios(baseline: Sequence[RunStatistic], variant: Sequence[RunStatistic]) -> np.ndarray:
    """Per-pair ``ln(variant median / baseline median)``; > 0 means the variant was slower."""
    return np.log([v.location_s for v in variant]) - np.log([b.location_s for b in baseline])


def paired_gain(
    baseline_runs: Sequence[Sequence[float]],
    variant_runs: Sequence[Sequence[float]],
    level: float = 0.95,
    *,
    min_gain_pct: float = DEFAULT_MIN_GAIN_PCT,
    mde_power: float = DEFAULT_MDE_POWER,
    critical_value: float | None = None,
    trim: float = DEFAULT_PAIR_TRIM,
    method: str = PAIRED_T_METHOD,
) -> GainEstimate:
    """Gain of the variant from paired repeats (a fixed number of pairs).

    Each run is reduced to its median step time (:func:`run_statistic`); pair ``i`` gives
    ``d_i = ln(variant_i / baseline_i)``. The interval is Yuen's trimmed t
    (:func:`trimmed_t_parts`): ``center -+ c * se`` with ``c`` Student's t quantile at
    ``(1 + level) / 2`` and ``h - 1`` degrees of freedom (``h`` pairs left after trimming
    ``floor(trim * n)`` from each end; with fewer than 5 pairs nothing is trimmed and this
    is the plain paired t with ``n - 1`` df), mapped to percent by
    ``gain = (1 - exp(d)) * 100``. Trimming keeps one loaded repeat (a whole run slowed by
    another process) from widening the interval until nothing is decided. The minimum
    detectable effect is ``(c + t_{mde_power, h-1}) * se`` on the log scale.

    Args:
        baseline_runs, variant_runs: per-repeat lists of measured step times (seconds),
            paired by repeat index (the pairs ran adjacently); at least 2 pairs.
        level: confidence level, ``0 < level < 1`` (use :func:`sweep_level` for a sweep).
        min_gain_pct: smallest gain that matters (``NO_GAIN`` threshold), percent, > 0.
        mde_power: power at which the minimum detectable effect is stated.
        critical_value: a multiplier that replaces the t quantile (the sequential rule passes
            its repeated-confidence-interval boundary here); ``level`` is then reported as is.
        trim: fraction of pairs trimmed from each end, ``0 <= trim < 0.5`` (0: plain t).
        method: the method's name recorded in the estimate.

    Raises:
        ValueError: unequal numbers of runs, fewer than 2 pairs, a run without steps or with
            a step time not finite and > 0, ``level`` outside (0, 1).
    """
    _check_level(level)
    base, var = _pair_statistics(baseline_runs, variant_runs)
    n = len(base)
    if n < 2:
        raise ValueError(
            f"a paired interval needs at least 2 pairs, got {n}; use step_level_gain for one round"
        )
    parts = trimmed_t_parts(log_ratios(base, var)[None, :], trim)
    center, se, df = (float(x[0]) for x in parts)
    if method == PAIRED_T_METHOD and math.floor(trim * n + 1e-9) == 0:
        # say what was computed: below 5 pairs the 20% trimming removes no pair
        method = "paired log-ratio t of per-run medians (Yuen's 20% trimming starts at 5 pairs)"
    if critical_value is None:
        # scipy costs ~0.8 s to import: only when a quantile is needed
        from scipy import stats

        critical_value = float(stats.t.ppf(0.5 + level / 2.0, df))
    return _estimate(
        center,
        se,
        critical_value,
        df,
        level=level,
        method=method,
        n_pairs=n,
        min_gain_pct=min_gain_pct,
        mde_power=mde_power,
        baseline=base,
        variant=var,
    )


def trimmed_t_parts(d: np.ndarray, trim: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Yuen's trimmed-mean t for one sample, row-wise (Yuen, "The two-sample trimmed t for
    unequal population variances", Biometrika 61, 1974; one-sample form in Wilcox,
    "Introduction to Robust Estimation and Hypothesis Testing", ch. 4).

    Args:
        d: shape ``(rows, n)``, one sample per row (e.g. log ratios of ``n`` pairs).
        trim: fraction trimmed from each end; ``g = floor(trim * n)`` values per end.

    Returns:
        ``(center, se, df)`` per row: the trimmed mean, its standard error
        ``s_w / ((1 - 2g/n) sqrt(n))`` with ``s_w`` the winsorized standard deviation, and
        ``h - 1`` degrees of freedom, ``h = n - 2g``. ``g = 0`` gives the ordinary mean,
        ``s / sqrt(n)`` and ``n - 1``.

    Raises:
        ValueError: ``trim`` outside [0, 0.5) or fewer than 2 values left after trimming.
    """
    if not 0 <= trim < 0.5:
        raise ValueError(f"trim must be within [0, 0.5), got {trim}")
    n = d.shape[1]
    g = int(math.floor(trim * n + 1e-9))
    h = n - 2 * g
    if h < 2:
        raise ValueError(f"trimming {g} of {n} values per end leaves {h}; need >= 2")
    s = np.sort(d, axis=1)
    winsorized = np.clip(s, s[:, [g]], s[:, [n - g - 1]])
    se = winsorized.std(axis=1, ddof=1) / ((h / n) * math.sqrt(n))
    return s[:, g : n - g].mean(axis=1), se, np.full(d.shape[0], float(h - 1))


def lag1_autocorrelation(values: Sequence[float]) -> float:
    """Lag-1 autocorrelation of a series (0 for fewer than 3 values or no spread)."""
    x = np.asarray(values, dtype=float)
    if x.size < 3:
        return 0.0
    x = x - x.mean()
    denominator = float(np.dot(x, x))
    return float(np.dot(x[:-1], x[1:]) / denominator) if denominator > 0 else 0.0


def _half_split_drift_variance(base_logs: np.ndarray, var_logs: np.ndarray) -> float:
    """``(delta_b^2 + delta_v^2) / 2``, each ``delta`` the median of a run's second half of
    log step times less that of its first half (the middle step of an odd run is left out);
    the caller guarantees at least 4 steps per run (2 per half)."""
    deltas = [float(np.median(logs[-(logs.size // 2):]) - np.median(logs[: logs.size // 2]))
              for logs in (base_logs, var_logs)]
    return (deltas[0] ** 2 + deltas[1] ** 2) / 2.0


def _median_se_and_df(logs: np.ndarray) -> tuple[float, float]:
    """Standard error of the median of log step times and its degrees of freedom, with the
    effective sample size of an AR(1) series, ``n (1 - rho) / (1 + rho)``."""
    n = logs.size
    # The autocorrelation of ranks resists bursts; negative values are not credited
    # (they would shrink the interval on a hunch), and 0.9 caps a runaway estimate.
    ranks = np.argsort(np.argsort(logs)).astype(float)
    rho = min(max(lag1_autocorrelation(ranks), 0.0), 0.9)
    n_eff = max(n * (1.0 - rho) / (1.0 + rho), 2.0)
    return _MEDIAN_SE_FACTOR * _robust_sd(logs) / math.sqrt(n_eff), n_eff - 1.0


def step_level_gain(
    baseline_steps_s: Sequence[float],
    variant_steps_s: Sequence[float],
    level: float = 0.95,
    *,
    min_gain_pct: float = DEFAULT_MIN_GAIN_PCT,
    mde_power: float = DEFAULT_MDE_POWER,
) -> GainEstimate:
    """Gain of the variant from one round (one run per side), from the measured steps.

    The point estimate is the difference of the two runs' median log step times. Each
    median's standard error is ``sqrt(pi/2) * 1.4826 * MAD(ln t) / sqrt(n_eff)`` (the normal-
    core asymptotic variance of a median, with a MAD that bursts do not inflate), where
    ``n_eff = n (1 - rho) / (1 + rho)`` and ``rho`` is the lag-1 autocorrelation of the step
    ranks (floored at 0): consecutive steps are not independent draws. The multiplier is
    Student's t with Welch-Satterthwaite degrees of freedom from ``n_eff - 1`` per side.

    Machine noise is not only short-range: the speed of a shared or virtualised CPU drifts
    over seconds (flicker-like noise, whose variance barely shrinks as a window grows: the
    Allan-variance picture, D. W. Allan, Proc. IEEE 54, 1966), and an AR(1) correction then
    leaves the interval far too narrow (on bench/noise_floor.py's recorded trace, A/A pairs
    of one round were called different 40% of the time). So the variance is the larger of
    that AR(1) figure and a **half-split drift estimate**: the method of batch means with two
    batches per run (B. Schmeiser, "Batch size effects in the analysis of simulation output",
    Operations Research 30, 1982), read at the run's own time scale. Each run's
    ``delta = median(second half) - median(first half)`` of log step times measures how far
    the level moves within one run; with both runs' level variance pooled,
    ``var(d) = (delta_b^2 + delta_v^2) / 2`` with 2 degrees of freedom. Under white noise
    this is about twice the true variance (conservative); under flicker noise, about right.
    It needs at least 2 steps per half, so a run needs at least 4 measured steps: with fewer,
    the AR(1) figure alone would be the overconfident interval this term exists to correct,
    and no interval is given.

    The interval still sees only the noise within the two runs: it cannot see how much a
    whole run moves between repeats beyond what its halves show, which is why one round is
    directional evidence and a report should say so.

    Args:
        baseline_steps_s, variant_steps_s: measured step times of one run each, seconds, in
            step order; at least 4 each.

    Raises:
        ValueError: fewer than 4 steps on a side, a step time not finite and > 0, ``level``
            outside (0, 1).
    """
    _check_level(level)
    # scipy costs ~0.8 s to import: only when a quantile is needed
    from scipy import stats

    base_logs = _log_steps(baseline_steps_s, "baseline run")
    var_logs = _log_steps(variant_steps_s, "variant run")
    if base_logs.size < 4 or var_logs.size < 4:
        raise ValueError(
            f"a step-level interval needs at least 4 measured steps per run (2 per half for "
            f"the drift estimate), got {base_logs.size} and {var_logs.size}"
        )
    se_b, df_b = _median_se_and_df(base_logs)
    se_v, df_v = _median_se_and_df(var_logs)
    variance = se_b**2 + se_v**2
    if variance > 0:
        df = variance**2 / (se_b**4 / df_b + se_v**4 / df_v)
    else:
        df = df_b + df_v
    drift = _half_split_drift_variance(base_logs, var_logs)
    if drift > variance:
        variance, df = drift, 2.0
    critical = float(stats.t.ppf(0.5 + level / 2.0, df))
    stats_b = run_statistic(baseline_steps_s, "baseline run")
    stats_v = run_statistic(variant_steps_s, "variant run")
    return _estimate(
        float(np.median(var_logs) - np.median(base_logs)),
        math.sqrt(variance),
        critical,
        df,
        level=level,
        method=STEP_LEVEL_METHOD,
        n_pairs=1,
        min_gain_pct=min_gain_pct,
        mde_power=mde_power,
        baseline=[stats_b],
        variant=[stats_v],
    )


def hierarchical_bootstrap_gain(
    baseline_runs: Sequence[Sequence[float]],
    variant_runs: Sequence[Sequence[float]],
    level: float = 0.95,
    *,
    n_boot: int = 2000,
    seed: int = 0,
    min_gain_pct: float = DEFAULT_MIN_GAIN_PCT,
    mde_power: float = DEFAULT_MDE_POWER,
) -> GainEstimate:
    """Gain from a two-level bootstrap (Kalibera & Jones 2013, §6): resample pairs with
    replacement, then each chosen run's steps with replacement, take the per-run medians and
    the mean log ratio; the interval is the percentile interval of ``n_boot`` resamples
    (seeded, so deterministic). Kept as the alternative that bench/stats_power.py measures
    against :func:`paired_gain`: with 3-8 pairs a percentile bootstrap undercovers, because
    it cannot know the t distribution's heavier tails at so few units.

    ``critical_value`` in the result is the half-width over the bootstrap standard error.

    Raises:
        ValueError: as :func:`paired_gain`, or ``n_boot < 100``.
    """
    _check_level(level)
    if n_boot < 100:
        raise ValueError(f"n_boot must be >= 100, got {n_boot}")
    base, var = _pair_statistics(baseline_runs, variant_runs)
    n = len(base)
    if n < 2:
        raise ValueError(f"a paired interval needs at least 2 pairs, got {n}")
    rng = np.random.default_rng(seed)
    # diffs[i, k, j]: median log-ratio of pair i under step resample k for draw slot j, so a
    # pair drawn twice into one resample gets two independent step resamples.
    diffs = np.empty((n, n_boot, n))
    for i, (steps_b, steps_v) in enumerate(zip(baseline_runs, variant_runs)):
        diffs[i] = _resampled_medians(np.log(np.asarray(steps_v, float)), rng, (n_boot, n))
        diffs[i] -= _resampled_medians(np.log(np.asarray(steps_b, float)), rng, (n_boot, n))
    pairs = rng.integers(0, n, size=(n_boot, n))
    boot = diffs[pairs, np.arange(n_boot)[:, None], np.arange(n)[None, :]].mean(axis=1)
    alpha = 1.0 - level
    lo_log, hi_log = np.quantile(boot, [alpha / 2, 1 - alpha / 2])
    mean_log = float(log_ratios(base, var).mean())
    se = float(boot.std(ddof=1))
    half = (hi_log - lo_log) / 2.0
    estimate = _estimate(
        mean_log,
        se,
        half / se if se > 0 else 0.0,
        float(n - 1),
        level=level,
        method=BOOTSTRAP_METHOD,
        n_pairs=n,
        min_gain_pct=min_gain_pct,
        mde_power=mde_power,
        baseline=base,
        variant=var,
    )
    # The percentile interval need not be symmetric about the mean: report it as is.
    low, high = _gain_from_log(float(hi_log)), _gain_from_log(float(lo_log))
    return _replace_interval(estimate, low, high)


def _resampled_medians(logs: np.ndarray, rng: np.random.Generator, shape: tuple[int, int]):
    draws = rng.integers(0, logs.size, size=(*shape, logs.size))
    return np.median(logs[draws], axis=-1)


def _replace_interval(estimate: GainEstimate, low: float, high: float) -> GainEstimate:
    return replace(
        estimate,
        ci_low_pct=low,
        ci_high_pct=high,
        decision=decide(low, high, estimate.min_gain_pct),
    )


def sweep_level(level: float, m: int) -> float:
    """Per-comparison confidence level for ``m`` comparisons of one sweep (Bonferroni).

    ``1 - (1 - level) / m``: the ``m`` intervals then hold their true gains all at once with
    probability at least ``level``, whatever their dependence (they share a baseline), so
    every FASTER/SLOWER verdict of the sweep is covered by one family-wise error rate.
    Bonferroni rather than Holm because the verdicts are read off intervals, and Holm's
    step-down has no matching simultaneous intervals.

    Raises:
        ValueError: ``level`` outside (0, 1) or ``m < 1``.
    """
    _check_level(level)
    if m < 1:
        raise ValueError(f"number of comparisons must be >= 1, got {m}")
    return 1.0 - (1.0 - level) / m


def counterbalanced_order(n_pairs: int, seed: int | None = None) -> list[tuple[str, str]]:
    """Run order of ``n_pairs`` adjacent baseline/variant pairs: ``("baseline", "variant")``
    then ``("variant", "baseline")``, alternating (A B, B A, A B, ...), so a linear drift
    cancels over every two pairs; with ``seed`` each pair's order is a seeded coin flip
    instead (record the seed with the results).

    Raises:
        ValueError: ``n_pairs < 1``.
    """
    if n_pairs < 1:
        raise ValueError(f"n_pairs must be >= 1, got {n_pairs}")
    ab, ba = ("baseline", "variant"), ("variant", "baseline")
    if seed is None:
        return [ab if i % 2 == 0 else ba for i in range(n_pairs)]
    flips = np.random.default_rng(seed).integers(0, 2, size=n_pairs)
    return [ab if f == 0 else ba for f in flips]
