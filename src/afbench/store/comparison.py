"""One comparison of ``summary.json``: a variant against the baseline on the verdict phase
(:class:`Comparison`: two :class:`Side` s, the :class:`Speed` verdict, parity, compile cost,
memory)."""

from __future__ import annotations

from typing import Any

from pydantic import AliasChoices, Field

from afbench.messages import Message
from afbench.store.result import Efficiency
from afbench.store.versioning import Record


class WindowMetrics(Record):
    """Means over the measured window of a side's runs (repeats averaged); ``None`` where the
    workload does not log the field. ms for TTFT/TPOT, tokens/s, token counts per step."""

    tokens_per_s: float | None = None
    loss: float | None = None
    ttft_ms: float | None = None
    tpot_ms_mean: float | None = None
    tpot_ms_p50: float | None = None
    tpot_ms_p90: float | None = None
    generated_tokens: float | None = None
    prompt_tokens: float | None = None


#: Which peak stands for a side's memory, in this order: what the device's caching allocator
#: held (decides an out-of-memory), what live tensors held, the process's resident set (CPU).
MEMORY_MEASURES = (
    ("peak_reserved_gib", "reserved"),
    ("peak_allocated_gib", "allocated"),
    ("peak_rss_gib", "rss"),
)


class Memory(Record):
    """Peak memory of a side over the measured window of its verdict-phase runs (the profile
    runs carry profiler overhead), GiB = 2**30 bytes, max over its repeats; ``None`` where no
    run measured it.

    peak_gib: the headline peak, of kind ``measure`` (``reserved`` | ``allocated`` | ``rss``,
    the first of :data:`MEMORY_MEASURES` measured). source/window: how and over which steps
    (the first run's ``memory.source`` / ``memory.window``, catalog messages). kv_cache_*: inference only, the
    largest KV cache one generation holds, from the model config (GiB, positions per
    sequence, sequences, formula).
    """

    peak_gib: float | None = None
    measure: str | None = None
    peak_reserved_gib: float | None = None
    peak_allocated_gib: float | None = None
    peak_rss_gib: float | None = None
    source: Message | None = None
    window: Message | None = None
    kv_cache_gib: float | None = None
    kv_cache_tokens: int | None = None
    kv_cache_batch: int | None = None
    kv_cache_source: Message | None = None

    def of(self, measure: str | None) -> float | None:
        """The peak of kind ``measure`` (GiB), None when not measured."""
        return {
            "reserved": self.peak_reserved_gib,
            "allocated": self.peak_allocated_gib,
            "rss": self.peak_rss_gib,
        }.get(measure or "")


#: The recorded sentences of a :class:`Side` (summary.json's comparisons, sweep_summary.json's
#: rows) that are messages since version 5, as paths relative to the side
#: (:func:`afbench.store.versioning.as_messages`).
SIDE_MESSAGES = (
    "memory.source",
    "memory.window",
    "memory.kv_cache_source",
    "efficiency.source",
    "efficiency.peak_source",
    "efficiency.afbench_source",
)


class Side(Record):
    """One variant's numbers on the verdict phase, over its repeats.

    mean_step_s: mean of the per-repeat mean step times (seconds, strict log parse of the
      measured window); ``None`` unless every run is OK. repeats_s: those per-repeat means.
    first_step_s: mean time to first step (s) over the runs that started with cold compiler
      caches, over all runs when none did (``first_step_kernel_cache``: "cold", "warm" =
      every run found kernels an earlier run of the experiment built, None = not recorded).
    step_cv_pct: the worst repeat's coefficient of
    variation of its window's step times, in percent. tokens_per_s: mean over the repeats.
    """

    name: str
    statuses: list[str] = []
    ok: bool = False
    skipped: bool = False
    mean_step_s: float | None = None
    repeats_s: list[float] = []
    first_step_s: float | None = None
    first_step_kernel_cache: str | None = None
    step_cv_pct: float | None = None
    tokens_per_s: float | None = None
    log_errors: list[str] = []
    metrics: WindowMetrics = WindowMetrics()
    sanity: str | None = None  # inference text sanity of the first run: ok | warning | failed
    memory: Memory = Memory()
    efficiency: Efficiency = Efficiency()
    # afbench.analysis.recompiles.recompile_caveat of the first run that recompiled inside
    # its measured window, else None
    recompile: str | None = None
    # the step after which that run recompiled (the caveat's number), else None
    recompile_after_step: int | None = None
    # the runs its step times, tokens/s, window metrics, memory and TFLOPs/MFU rest on, and
    # why those (afbench.compare.sides.RUNS_BASIS): "verdict" the runs of the pairs its
    # verdict decided on; "quiet" no pair decided, its runs not measured as contended (not a
    # verdict); "all" every OK run (none quiet, or no verdict: a failed or single side)
    runs_used: list[str] = []
    runs_basis: str | None = None
    # runs its first_step_s rests on that its other numbers do not (a contended run a rerun
    # replaced: a first compile is one however busy the machine; the report says so beside it)
    first_step_set_aside: list[str] = []


class SetAsidePair(Record):
    """A pair the verdict left out (:class:`afbench.verdict.SetAside`): ``pair`` 1-based round,
    ``side`` baseline | variant | both, ``reason`` contended | outlier, ``detail`` measured:
    per contended run a ``run_reason`` message (its reasons ``cont_reason_*`` messages with
    their numbers), or the English text a summary written before them holds."""

    pair: int
    side: str
    reason: str
    detail: str | list[Message] = ""


class Speed(Record):
    """The verdict on speed as stored in ``summary.json``: the fields of
    :class:`afbench.verdict.Speed` (computed there and only there; docs/statistics.md), plus the
    reference's quick verdict shown beside a one-round verdict. Percent of the baseline's step
    time, positive = variant faster.

    From afbench.verdict: decision (FASTER | SLOWER | NO_GAIN | INCONCLUSIVE), gain_pct,
    ci_low_pct / ci_high_pct (``ci_low`` / ``ci_high`` in older summaries, still readable as
    properties), level, mde_pct, mde_power, min_gain_pct, n_pairs (deciding), n_pairs_run,
    method, design (one_round | fixed | sequential), df, critical_value, spread_pct (sd of one
    pair's log ratio, percent), spread_source (pairs | calibration | pairs+calibration),
    run_spread_pct (the host calibration's), set_aside, no_interval_reason (uncalibrated |
    calibration_unfit | calibration_stale | no_pairs_left | one_pair_left | before_first_look),
    below_min_gain, pairs_for_min_gain,
    stop_reason (rounds=auto), n_steps_* and n_bursts_* (steps flagged as bursts: counted, left
    out of their run's median), n_leading_* (flagged steps opening a window), screen,
    n_outliers_* and with_outliers_*_pct (the outlier runs set aside and whether they change
    the answer: afbench.verdict.screen),
    baseline_location_s / variant_location_s (geometric mean of the deciding runs' median step
    times, s; schema 3), calibration_shift_pct (the run farthest from its calibration, percent,
    + = slower; schema 3).
    Beside it: reference_verdict / reference_gain_pct (the reference's rule: ``<VARIANT>_FASTER``
    when the mean step time's gain is > 0, else NO_GAIN; one round), calibration (which host
    calibration a one-round verdict used: key, when, pairs). ``kind`` and ``note`` are the names
    summaries before the verdict library used (``step_level`` | ``paired`` | ``sequential``; the
    verdict line's tail), kept so that they still load and re-render.
    """

    decision: str | None = None
    gain_pct: float | None = None
    ci_low_pct: float | None = Field(None, validation_alias=AliasChoices("ci_low_pct", "ci_low"))
    ci_high_pct: float | None = Field(None, validation_alias=AliasChoices("ci_high_pct", "ci_high"))
    level: float | None = None
    mde_pct: float | None = None
    mde_power: float | None = None
    min_gain_pct: float | None = None
    n_pairs: int | None = None
    n_pairs_run: int | None = None
    method: str | None = None
    design: str | None = None
    df: float | None = None
    critical_value: float | None = None
    spread_pct: float | None = None
    spread_source: str | None = None
    run_spread_pct: float | None = None
    set_aside: list[SetAsidePair] = []
    no_interval_reason: str | None = None
    # what the advice names to calibrate this comparison (afbench.compare.speed
    # .calibration_advice): the recipe of its workload, the variant's overrides (None: none)
    calibrate_recipe: str | None = None
    calibrate_switch: str | None = None
    below_min_gain: bool = False
    pairs_for_min_gain: int | None = None
    pairs_for_gain: int | None = None  # pairs to decide an effect of the size seen (undecided)
    stop_reason: str | None = None
    n_steps_baseline: int | None = None
    n_steps_variant: int | None = None
    n_bursts_baseline: int | None = None
    n_bursts_variant: int | None = None
    baseline_location_s: float | None = None
    variant_location_s: float | None = None
    calibration_shift_pct: float | None = None
    n_leading_baseline: int = 0  # flagged steps opening a window (it started too early)
    n_leading_variant: int = 0
    screen: str | None = None  # holds | all_runs | changes_answer (verdict.screen)
    n_outliers_baseline: int = 0
    n_outliers_variant: int = 0
    with_outliers_low_pct: float | None = None
    with_outliers_high_pct: float | None = None
    reference_verdict: str | None = None
    reference_gain_pct: float | None = None
    calibration: dict[str, Any] | None = None
    kind: str = "none"
    note: str = ""

    @classmethod
    def of(cls, speed: Any, **beside: Any) -> "Speed":
        """The stored form of an :class:`afbench.verdict.Speed` (a dataclass), with the
        reference's verdict or the calibration ``beside`` it; an infinite ``df`` is stored as
        ``None`` (JSON has no infinity)."""
        from dataclasses import asdict

        data = asdict(speed)
        if data.get("df") is not None and data["df"] == float("inf"):
            data["df"] = None
        return cls.model_validate({**data, "kind": data["design"], **beside})

    @property
    def shows_pairs_hint(self) -> bool:
        """Whether the verdict line says roughly how many pairs would resolve
        ``min_gain_pct`` (``v_pairs_hint``): a fixed or one-round verdict (FASTER, SLOWER or
        INCONCLUSIVE) whose interval rests on 3+ pairs or a calibration, with an MDE still
        above the margin and ``pairs_for_min_gain`` more pairs than it ran."""
        n = self.n_pairs or 0
        return bool(
            self.decision in ("INCONCLUSIVE", "FASTER", "SLOWER")
            and self.design in ("fixed", "one_round")
            and (n >= 3 or (self.spread_source or "").startswith("calibration"))
            and self.pairs_for_min_gain
            and self.pairs_for_min_gain > n
            and self.mde_pct is not None
            and self.min_gain_pct is not None
            and self.mde_pct > self.min_gain_pct
        )

    @property
    def ci_low(self) -> float | None:
        """``ci_low_pct`` under its schema-1 name (templates and the sweep read it)."""
        return self.ci_low_pct

    @property
    def ci_high(self) -> float | None:
        """``ci_high_pct`` under its schema-1 name."""
        return self.ci_high_pct


class CurvePoint(Record):
    """One step of the parity curve; a non-finite loss is stored as ``null`` (JSON has no NaN)."""

    step: int
    baseline: float | None
    variant: float | None
    abs_diff: float | None


class Divergence(Record):
    prompt_index: int
    position: int
    baseline_text: str
    variant_text: str


class Parity(Record):
    """Result parity of the pair: MATCH | DIVERGED | N/A (with ``reason``).

    Training fills the loss fields (per-step loss, relative tolerance ``rtol``); inference the
    generation fields (greedy tokens, then logits against ``logit_tolerance`` = rtol x max
    |baseline logit|).
    """

    status: str
    reason: str | None = None
    reason_msg: Message | None = None  # ``reason`` as a catalog message (afbench.messages)
    rtol: float | None = None
    steps_compared: int | None = None
    max_abs_diff: float | None = None
    max_rel_diff: float | None = None
    first_diverging_step: int | None = None
    curve: list[CurvePoint] | None = None
    prompts_compared: int | None = None
    logits_positions: int | None = None
    max_abs_logit_diff: float | None = None
    logit_tolerance: float | None = None
    logits_match: bool | None = None
    first_diverging_position: int | None = None
    first_divergence: Divergence | None = None

    @property
    def diverged_at(self) -> int | None:
        """The first diverging step (training) or token position (inference)."""
        return (
            self.first_diverging_step
            if self.first_diverging_step is not None
            else self.first_diverging_position
        )


class Compile(Record):
    """Compile cost of the variant: overhead = time to first step - mean step time (s);
    break-even = overhead / per-step saving (steps), ``None`` when there is no saving.
    kernel_cache: the compiler caches that time to first step was measured with
    (:attr:`Side.first_step_kernel_cache`): "warm" = kernels an earlier run of the experiment
    built, so the overhead has no kernel compilation in it; "cold"; None = not recorded."""

    overhead_s: float | None = None
    break_even_steps: float | None = None
    kernel_cache: str | None = None


class MemoryChange(Record):
    """The variant's peak memory against the baseline's, same ``measure`` on both sides
    (:attr:`Memory.measure`): delta_gib = variant - baseline (GiB), delta_pct = delta /
    baseline x 100; ``warn`` when delta_pct > ``warn_pct`` (``report.memory_warn_pct``)."""

    measure: str | None = None
    baseline_gib: float | None = None
    variant_gib: float | None = None
    delta_gib: float | None = None
    delta_pct: float | None = None
    warn_pct: float | None = None
    warn: bool = False


class Comparison(Record):
    """One non-baseline variant against the baseline on the verdict phase.

    caveats: what the verdict line carries beside the verdict (a memory rise above
    ``report.memory_warn_pct``, a recompile inside the measured window)."""

    baseline: Side
    variant: Side
    phase: str
    workload: str
    verdict: str  # <VARIANT>_FASTER | NO_GAIN | RUN_FAILED | SKIPPED
    verdict_line: str
    speed: Speed = Speed()
    parity: Parity = Parity(status="N/A")
    compile: Compile = Compile()
    memory: MemoryChange = MemoryChange()
    caveats: list[str] = []
    caveat_msgs: list[Message] = []  # ``caveats`` as catalog messages (afbench.messages)
    aa: bool = False  # same settings as the baseline: an A/A pair
    reasons: list[str] = []  # why a side has no number (``run_id: recorded reason``)
    reason_msgs: list[Message] = []  # ``reasons`` as catalog messages (afbench.messages)
