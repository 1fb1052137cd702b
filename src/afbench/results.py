"""Typed results: what afbench writes after a run and after a comparison, and reads back.

The worker writes ``result.json`` (:class:`RunResult`) and ``metrics.jsonl`` lines
(:class:`StepRecord`); :func:`afbench.compare.compare` builds a :class:`Summary`, written as
``summary.json`` and handed to the report templates and plots, which read its attributes.

Every file carries ``schema_version`` (:data:`SCHEMA_VERSION`). Directories written before
it existed have none: that is version 0, and the ``load_*`` functions read both, so resume and
offline re-render keep working on old output directories (tests/fixtures/results holds one
directory per version). A leaf module: pydantic and the standard library only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator

from afbench.errors import OutputError
# a report sentence as catalog key + values (+ its English text): afbench.messages
from afbench.messages import Message
# re-exported: the version lives in afbench.schema, which imports nothing (the worker's use)
from afbench.schema import SCHEMA_VERSION as SCHEMA_VERSION


class _Open(BaseModel):
    """A record that keeps fields it does not name (engine-specific or newer ones)."""

    model_config = ConfigDict(extra="allow")


# --- one run ------------------------------------------------------------------------------

class StepRecord(_Open):
    """One ``metrics.jsonl`` line of kind ``step``: one training step, or one inference run
    over every prompt. JSON keys as every engine writes them; an engine may add its own
    (``lr``, ``step_time_source``, ``total_time_s``, ...), which are kept.

    step_time_s: seconds per step, wall clock, device-synchronised (the engine's own timer;
      the verdict uses the strict parse of the step log instead). tokens: tokens in the step.
    """

    kind: str = "step"
    step: int
    step_time_s: float | None = None
    loss: float | None = None
    grad_norm: float | None = None
    # counts, but a command engine's regex may capture them as floats: both are kept as written
    tokens: int | float | None = None
    tokens_per_s: float | None = None
    measured: bool | None = None  # inference: False for warmup runs
    prompt_tokens: int | float | None = None
    generated_tokens: int | float | None = None
    ttft_ms: float | None = None  # time to first token, ms, mean over the run's batches
    tpot_ms_mean: float | None = None  # time per output token, ms
    tpot_ms_p50: float | None = None
    tpot_ms_p90: float | None = None
    # torchtitan under pipeline parallelism prints ``loss: -1`` on ranks that compute no
    # loss: that step's ``loss`` is then None and this True
    loss_placeholder: bool | None = None


class SwitchRecord(_Open):
    """What one switch did in one run (:class:`afbench.switches.SwitchReport` as JSON)."""

    name: str
    applied: bool | None = None
    detail: str = ""


class RankAgreement(_Open):
    """Data-parallel runs: whether every rank ended with the same parameters."""

    world_size: int
    param_checksums: list[float] = []
    params_identical: bool


class Environment(BaseModel):
    """Where the runs ran, as a run's result.json records it (the
    summary shows the first run's); params: the model's parameter count."""

    python: str | None = None
    platform: str | None = None
    backend: str | None = None
    device: str | None = None
    torch_threads: int | None = None
    versions: dict[str, Any] = {}
    params: int | None = None


class Contention(_Open):
    """``result.json``'s ``contention``: what shows that the machine was shared during the
    run's measured window (sources and method: :mod:`afbench.analysis.contention`; the
    decision: :func:`afbench.analysis.contention.judge`). ``None`` where a source is missing.

    scope: ``window`` (the measured window) or ``run`` (the whole command run: its window's
    edges were not seen). source: which span and process were sampled. wall_s: seconds of the
    span. cpu_pressure_pct: share of the span in which some runnable task waited for a CPU
    (PSI ``some``, %). steal_pct: CPU time stolen by the hypervisor (%). run_queue_wait_pct:
    share of the span in which the measured process's most-delayed thread was ready to run
    but waiting for a CPU (schedstat, %).
    cpu_s: CPU seconds of
    the measured process (tree). cpu_per_wall: cpu_s / wall_s (2.0 = two CPUs busy).
    threads: threads the process asked for (None: unknown). cpu_of_threads_pct: cpu_per_wall
    / threads (%). involuntary_switches (+ ``_per_s``): times the scheduler took a CPU from
    it. load_avg_1m, procs_running (runnable tasks, the sampler included), cpus: the host at
    the span's end.
    """

    scope: str = "window"
    source: str = ""
    wall_s: float | None = None
    cpu_pressure_pct: float | None = None
    steal_pct: float | None = None
    run_queue_wait_pct: float | None = None
    cpu_s: float | None = None
    cpu_per_wall: float | None = None
    threads: int | None = None
    cpu_of_threads_pct: float | None = None
    involuntary_switches: int | None = None
    involuntary_switches_per_s: float | None = None
    load_avg_1m: float | None = None
    procs_running: int | None = None
    cpus: int | None = None


class RunResult(Environment):
    """``result.json`` of one successful run, written by the worker. Engines add their own
    fields (argv, memory, tokens_per_step, ...), which are kept.

    first_step_s: seconds of the first step (time to first step, includes compilation).
    """

    model_config = ConfigDict(extra="allow")

    schema_version: int = SCHEMA_VERSION
    workload: str | None = None
    engine: str | None = None
    first_step_s: float | None = None
    switches: list[SwitchRecord] = []
    ranks: RankAgreement | None = None  # data-parallel runs only
    sanity: dict[str, Any] | None = None  # afbench.analysis.sanity.sanity_check's dict
    # Memory and efficiency over the measured window (field names and units:
    # afbench.analysis.efficiency); None where the engine measured nothing.
    peak_memory_allocated_gib: float | None = None
    peak_memory_reserved_gib: float | None = None
    peak_rss_gib: float | None = None
    memory_source: str | None = None
    memory_window: str | None = None
    tflops_per_device: float | None = None
    mfu_pct: float | None = None
    peak_tflops: float | None = None
    peak_tflops_source: str | None = None
    tflops_source: str | None = None
    flops_per_token: float | None = None
    # afbench's own FLOP count where the engine printed its own TFLOPs/MFU (torchtitan)
    afbench_tflops_per_device: float | None = None
    afbench_mfu_pct: float | None = None
    afbench_tflops_source: str | None = None
    kv_cache_gib: float | None = None  # inference
    kv_cache_tokens: int | None = None
    kv_cache_batch: int | None = None
    kv_cache_source: str | None = None
    contention: Contention | None = None  # None: not measured (older runs, a failed window)

    @field_validator("ranks", mode="before")
    @classmethod
    def _single_process_has_no_ranks(cls, value: Any) -> Any:
        return value or None  # a single-process SFT run writes {}


# --- one comparison -----------------------------------------------------------------------

class WindowMetrics(BaseModel):
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
MEMORY_MEASURES = (("peak_memory_reserved_gib", "reserved"),
                   ("peak_memory_allocated_gib", "allocated"), ("peak_rss_gib", "rss"))


class Memory(BaseModel):
    """Peak memory of a side over the measured window of its verdict-phase runs (the profile
    runs carry profiler overhead), GiB = 2**30 bytes, max over its repeats; ``None`` where no
    run measured it.

    peak_gib: the headline peak, of kind ``measure`` (``reserved`` | ``allocated`` | ``rss``,
    the first of :data:`MEMORY_MEASURES` measured). source/window: how and over which steps
    (the first run's ``memory_source`` / ``memory_window``). kv_cache_*: inference only, the
    largest KV cache one generation holds, from the model config (GiB, positions per
    sequence, sequences, formula).
    """

    peak_gib: float | None = None
    measure: str | None = None
    peak_reserved_gib: float | None = None
    peak_allocated_gib: float | None = None
    peak_rss_gib: float | None = None
    source: str | None = None
    window: str | None = None
    kv_cache_gib: float | None = None
    kv_cache_tokens: int | None = None
    kv_cache_batch: int | None = None
    kv_cache_source: str | None = None

    def of(self, measure: str | None) -> float | None:
        """The peak of kind ``measure`` (GiB), None when not measured."""
        return {"reserved": self.peak_reserved_gib, "allocated": self.peak_allocated_gib,
                "rss": self.peak_rss_gib}.get(measure or "")


class Efficiency(BaseModel):
    """Training throughput in FLOPs of a side's verdict-phase runs, mean over its repeats.

    tflops_per_device: achieved TFLOPs (1e12 FLOP/s) per device over the measured window, as
    the run's engine reports it (the builtin engine: afbench's count); mfu_pct: that over
    ``peak_tflops`` x 100 (None without a peak); source / peak_source: where each came from.
    afbench_*: afbench's own count beside an engine's own figures (torchtitan), else None.
    """

    tflops_per_device: float | None = None
    mfu_pct: float | None = None
    peak_tflops: float | None = None
    peak_source: str | None = None
    source: str | None = None
    flops_per_token: float | None = None
    afbench_tflops_per_device: float | None = None
    afbench_mfu_pct: float | None = None
    afbench_source: str | None = None


class Side(BaseModel):
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


class SetAsidePair(BaseModel):
    """A pair the verdict left out (:class:`afbench.verdict.SetAside`): ``pair`` 1-based round,
    ``side`` baseline | variant | both, ``reason`` contended | outlier, ``detail`` measured."""

    pair: int
    side: str
    reason: str
    detail: str = ""


class Speed(_Open):
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
    calibration_unfit | no_pairs_left | before_first_look), below_min_gain, pairs_for_min_gain,
    stop_reason (repeats=auto), n_steps_* and n_bursts_* (load bursts, counted, never dropped).
    Beside it: reference_verdict / reference_gain_pct (the reference's rule: ``<VARIANT>_FASTER``
    when the mean step time's gain is > 0, else NO_GAIN; one round), calibration (which host
    calibration a one-round verdict used: key, when, pairs). ``kind`` and ``note`` are the names
    summaries before the verdict library used (``step_level`` | ``paired`` | ``sequential``; the
    verdict line's tail), kept so that they still load and re-render.
    """

    decision: str | None = None
    gain_pct: float | None = None
    ci_low_pct: float | None = Field(None, validation_alias=AliasChoices("ci_low_pct", "ci_low"))
    ci_high_pct: float | None = Field(None,
                                      validation_alias=AliasChoices("ci_high_pct", "ci_high"))
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
    below_min_gain: bool = False
    pairs_for_min_gain: int | None = None
    stop_reason: str | None = None
    n_steps_baseline: int | None = None
    n_steps_variant: int | None = None
    n_bursts_baseline: int | None = None
    n_bursts_variant: int | None = None
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
    def ci_low(self) -> float | None:
        """``ci_low_pct`` under its schema-1 name (templates and the sweep read it)."""
        return self.ci_low_pct

    @property
    def ci_high(self) -> float | None:
        """``ci_high_pct`` under its schema-1 name."""
        return self.ci_high_pct


class CurvePoint(BaseModel):
    """One step of the parity curve; a non-finite loss is stored as ``null`` (JSON has no NaN)."""

    step: int
    baseline: float | None
    variant: float | None
    abs_diff: float | None


class Divergence(BaseModel):
    prompt_index: int
    position: int
    baseline_text: str
    variant_text: str


class Parity(BaseModel):
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
        return (self.first_diverging_step if self.first_diverging_step is not None
                else self.first_diverging_position)


class Compile(BaseModel):
    """Compile cost of the variant: overhead = time to first step - mean step time (s);
    break-even = overhead / per-step saving (steps), ``None`` when there is no saving.
    kernel_cache: the compiler caches that time to first step was measured with
    (:attr:`Side.first_step_kernel_cache`): "warm" = kernels an earlier run of the experiment
    built, so the overhead has no kernel compilation in it; "cold"; None = not recorded."""

    overhead_s: float | None = None
    break_even_steps: float | None = None
    kernel_cache: str | None = None


class MemoryChange(BaseModel):
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


class Comparison(BaseModel):
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


class PhaseMeans(BaseModel):
    """Per-step mean of one step_trace_time.csv phase, µs."""

    phase: str
    baseline_us: float
    variant_us: float


class ProfilingComparison(BaseModel):
    """Profiling status of one variant against the baseline on the profile phase:
    COMPARABLE | UNAVAILABLE | INCOMPARABLE (:func:`afbench.analysis.steptrace.profiling_status`)."""

    variant: str
    baseline: str
    phase: str
    status: str
    reason: str = ""
    reason_msg: Message | None = None  # ``reason`` as a catalog message (afbench.messages)
    phases: list[PhaseMeans] = []
    device_ids: dict[str, str] = {}
    profiler_steps: list[int] = []  # 0-based profiler step ids
    # the ProfilerStep#N labels of the baseline profile run's trace, and what they are
    # (torch.profiler counts its own steps from 0: the labels are not training steps)
    step_labels: list[int] = []
    labels_msg: Message | None = None


class KernelRow(_Open):
    """One op type of a normalised kernel table (afbench.analysis.kernels.KERNEL_COLUMNS)."""

    op_type: str
    count: int
    total_us: float
    ratio_pct: float


class KernelDiffRow(_Open):
    """One op type of :func:`afbench.analysis.kernels.diff_kernel_tables`."""

    op_type: str
    count_baseline: int
    count_variant: int
    count_delta: int
    total_us_baseline: float
    total_us_variant: float
    total_us_delta: float


class StepDeviceRow(BaseModel):
    """Device time of one profiled step (:func:`afbench.analysis.kernels.kernel_details_per_step`):
    torch_npu's profiler step, device, kernel launches, summed kernel µs, first-to-last µs."""

    step: int
    device_id: str = ""
    kernels: int
    kernel_us: float
    span_us: float


class StepDeviceTime(BaseModel):
    """Per-step device time of a variant's first profile run: ``rows`` from its
    ``kernel_details.csv``, or none and ``note`` saying why (``per-step breakdown
    unavailable: ...``)."""

    rows: list[StepDeviceRow] = []
    note: str = ""
    note_msg: Message | None = None  # ``note`` as a catalog message


class PieceCount(BaseModel):
    baseline: int
    variant: int
    delta: int


class FusedCount(PieceCount):
    op_types: list[str] = []


class FusedEvidence(_Open):
    """:func:`afbench.analysis.kernels.rmsnorm_evidence`: launch counts of the RMSNorm pieces
    and of the fused op, baseline vs variant."""

    pieces: dict[str, PieceCount]
    fused: FusedCount
    pieces_baseline: int | None = None
    pieces_variant: int | None = None
    fusion_evident: bool


# --- the summary --------------------------------------------------------------------------

class RunRow(_Open):
    """One row of ``results/runs`` (afbench.collect.Collected.runs), None for missing."""

    run_id: str
    variant: str
    phase: str
    repeat: int
    status: str
    exit_code: int | None = None
    reason: str | None = None
    wall_s: float | None = None
    mean_step_s: float | None = None
    log_error: str | None = ""
    first_step_s: float | None = None
    tokens_per_s: float | None = None
    workload: str | None = None
    step_cv_pct: float | None = None
    # afbench.analysis.recompiles.recompile_caveat when a compiled run recompiled inside its
    # measured window, else "" (None in summaries written before the field)
    recompile: str | None = None
    # afbench.analysis.contention.judge of the run's result.json contention: None = not
    # measured; contention_reasons: the thresholds crossed, "; "-joined; the measures shown
    contended: bool | None = None
    contention_reasons: str | None = None
    cpu_pressure_pct: float | None = None
    steal_pct: float | None = None
    run_queue_wait_pct: float | None = None
    cpu_per_wall: float | None = None
    threads: int | None = None
    contention_scope: str | None = None
    # a contended verdict-phase run that was run again (experiment.rerun_contended): the
    # run_id that replaced it (this row stays in the table, out of the verdict); on the
    # rerun, the run_id it replaced
    replaced_by: str | None = None
    rerun_of: str | None = None
    lock_wait_s: float | None = None  # seconds the launcher waited for the device lock
    # a compiled run's compiler caches when it started (RunStatus.kernel_cache): "warm" =
    # kernels an earlier run of the experiment built; "cold"; None = not recorded / no compile
    kernel_cache: str | None = None
    recompile_msg: Message | None = None  # ``recompile`` as a catalog message


class Asset(BaseModel):
    path: str | None = None
    sha256: str | None = None


class Assets(BaseModel):
    """Content SHA-256 of the model folder and data file (experiment.json ``assets``)."""

    model: Asset = Asset()
    data: Asset = Asset()


class PhaseParameters(BaseModel):
    """A phase's run parameters, from its baseline run's config."""

    phase: str
    workload: str
    model: str
    dtype: str
    data: str
    world_size: int
    backend: str
    scheduler: dict[str, Any] = {}
    profiler: dict[str, Any] | None = None


class Summary(BaseModel):
    """``summary.json``: everything the report shows, machine-readable."""

    schema_version: int = SCHEMA_VERSION
    experiment: str
    out_dir: str = ""
    generated_at: str = ""
    created_at: str | None = None
    baseline: str | None = None
    verdict_phase: str | None = None
    profile_phase: str | None = None
    repeats: int | str = 1  # a count, or "auto"
    skip_policy: str = ""
    variants: dict[str, dict[str, Any]] = {}  # variant -> dotted overrides
    assets: Assets = Assets()
    environment: Environment = Environment()
    parameters: list[PhaseParameters] = []
    runs: list[RunRow] = []
    switches: dict[str, list[SwitchRecord]] = {}
    ranks: dict[str, RankAgreement] = {}
    comparisons: list[Comparison] = []
    profiling: list[ProfilingComparison] = []
    kernels: dict[str, list[KernelRow]] = {}
    kernel_diffs: dict[str, list[KernelDiffRow]] = {}
    fused_evidence: dict[str, FusedEvidence] = {}
    step_device_time: dict[str, StepDeviceTime] = {}  # variant -> its profile run's
    # variant -> afbench.analysis.contention.uniform_slowdown_note of its op diff, when the
    # change is the same ratio across the ops the switch did not touch (a contended run)
    kernel_notes: dict[str, str] = {}
    caveat: str = ""
    headline: list[str] = Field(default_factory=list)

    @property
    def workload(self) -> str | None:
        """The verdict phase's workload (``sft`` | ``infer``), from the comparisons or the
        parameters; ``None`` when neither says."""
        if self.comparisons:
            return self.comparisons[0].workload
        return next((p.workload for p in self.parameters if p.phase == self.verdict_phase), None)


# --- a sweep ------------------------------------------------------------------------------

class SweepRow(_Open):
    """One combination of a sweep (one variant of one Hydra job) on the verdict phase, as
    ``sweep_summary.json`` lists it (:func:`afbench.sweep.build_sweep_report`).

    per_repeat_s: per-run mean step times (s, strict log parse), in repeat order.
    run_medians_s: per-run median step times (s, :func:`afbench.verdict.runs.run_statistic`).
    mean_step_s / median_step_s: their mean / median (the ranking uses the median).
    gain_pct, ci_low, ci_high: gain over the baseline combination (percent, positive = faster)
      and its interval at ``level`` (the Bonferroni level of the sweep); ``method``,
      ``n_pairs`` (pairs by repeat index), ``mde_pct`` (minimum detectable effect, percent).
    verdict: BASELINE | FASTER | SLOWER | NO_GAIN | INCONCLUSIVE | RUN_FAILED | SKIPPED.
    step_cv_pct: the worst run's step-time coefficient of variation (percent); n_bursts:
      burst steps over its runs; outlier_runs: run ids whose median does not fit their
      repeats; untrusted: an outlier run or a step CV above the threshold
      (:mod:`afbench.analysis.factorial`).
    report: the job's report.html, relative to the sweep folder (``None`` if absent).
    window: (first, last) measured step. Memory (GiB) and efficiency: means over the runs'
      result.json (``None`` where no run recorded them).
    speed: the verdict against the baseline combination (:class:`Speed`, from
      :func:`afbench.verdict.compare_runs`); verdict / gain_pct / ci_low / ci_high / method /
      n_pairs / mde_pct repeat its numbers for the ranking table and older templates.
    contended_runs: run ids measured as contended (``result.json``'s ``contention``): they
      never decide, and the trust column names them.
    """

    name: str
    job: str
    variant: str = ""
    setting: dict[str, str] = {}
    ok: bool = False
    statuses: list[str] = []
    per_repeat_s: list[float] = []
    run_medians_s: list[float] = []
    mean_step_s: float | None = None
    median_step_s: float | None = None
    tokens_per_s: float | None = None
    reasons: list[str] = []
    # afbench's own reasons as catalog messages (a job stopped before it planned); the report
    # shows these where present, else ``reasons`` (recorded error texts)
    reason_msgs: list[Message] = []
    is_plan_baseline: bool = False
    verdict: str = "RUN_FAILED"
    gain_pct: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    level: float | None = None
    method: str | None = None
    n_pairs: int | None = None
    mde_pct: float | None = None
    note: str = ""
    step_cv_pct: float | None = None
    n_bursts: int = 0
    n_steps: int = 0
    outlier_runs: list[str] = []
    untrusted: bool = False
    report: str | None = None
    window: list[int] | None = None
    peak_rss_gib: float | None = None
    peak_memory_allocated_gib: float | None = None
    peak_memory_reserved_gib: float | None = None
    memory_source: str | None = None
    tflops_per_device: float | None = None
    mfu_pct: float | None = None
    speed: Speed | None = None
    contended_runs: list[str] = []


class MainEffect(_Open):
    """One swept key's main effect: ``value`` against ``reference`` (the baseline
    combination's value), ``effect_pct`` (percent, positive = faster), the median over
    ``cells`` cells of the other keys (``dropped``: cells left out, a side has no result), with its sign-test interval ``ci_low``/``ci_high`` at ``coverage``."""

    key: str
    value: str
    reference: str | None = None
    effect_pct: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    coverage: float | None = None
    cells: int | None = None
    dropped: int = 0
    method: str | None = None


class SweepSummary(_Open):
    """``sweep_summary.json``: every combination ranked (fastest median step first, those
    without a result last), the main effects, and the levels used.

    confidence: the family-wise level; level: the per-comparison (Bonferroni) level for
    ``comparisons`` comparisons against the baseline combination."""

    schema_version: int = SCHEMA_VERSION
    sweep_dir: str
    jobs: int
    swept_keys: list[str] = []
    baseline: str | None = None
    sweep_baseline: str | None = None
    confidence: float = 0.95
    level: float | None = None
    comparisons: int = 0
    combinations: list[SweepRow] = []
    main_effects: list[MainEffect] = []
    failed: list[str] = []
    untrusted: list[str] = []
    cv_threshold_pct: float = 10.0  # a run's step CV above this marks it untrusted
    generated_at: str = ""


def load_sweep_summary(data: dict[str, Any] | SweepSummary) -> SweepSummary:
    """A :class:`SweepSummary` from ``sweep_summary.json``'s content: version 0 (no
    schema_version) and the flat rows written before the typed sweep summary both load
    (their missing fields are ``None``).

    Raises ValueError for a newer schema_version or content that does not fit."""
    if isinstance(data, SweepSummary):
        return data
    _version(data, "sweep_summary.json")
    return SweepSummary.model_validate({**data, "schema_version": SCHEMA_VERSION})


# --- reading ------------------------------------------------------------------------------

def _version(data: dict[str, Any], what: str) -> int:
    version = data.get("schema_version", 0)
    if not isinstance(version, int) or not 0 <= version <= SCHEMA_VERSION:
        raise ValueError(f"{what}: schema_version {version!r} is not one this afbench reads "
                         f"(0..{SCHEMA_VERSION}); re-render with a newer afbench")
    return version


def _side_v0(c: dict[str, Any], prefix: str) -> dict[str, Any]:
    return {"name": c.get(prefix, ""), "mean_step_s": c.get(f"{prefix}_mean_s"),
            "repeats_s": c.get(f"{prefix}_repeats_s") or [],
            "first_step_s": c.get(f"{prefix}_first_step_s"),
            "step_cv_pct": c.get(f"{prefix}_step_cv_pct"),
            "tokens_per_s": c.get(f"{prefix}_tokens_per_s"),
            "metrics": c.get(f"{prefix}_metrics") or {}, "sanity": c.get(f"{prefix}_sanity")}


def _comparison_v0(c: dict[str, Any]) -> dict[str, Any]:
    """A version-0 comparison (one dict, ``baseline_*``/``variant_*`` keys) as version 1."""
    return {
        "baseline": _side_v0(c, "baseline"), "variant": _side_v0(c, "variant"),
        "phase": c["phase"], "workload": c.get("workload", "sft"), "verdict": c["verdict"],
        "verdict_line": c.get("verdict_line", c["verdict"]),
        "speed": {"gain_pct": c.get("gain_pct"), "ci_low": c.get("gain_ci_low"),
                  "ci_high": c.get("gain_ci_high"), "level": c.get("confidence"),
                  "kind": c.get("verdict_kind", "none")},
        "parity": c.get("parity") or {"status": "N/A"},
        "compile": {"overhead_s": c.get("compile_overhead_s"),
                    "break_even_steps": c.get("break_even_steps")},
        "aa": c.get("aa", False), "reasons": c.get("reasons") or [],
    }


def load_summary(data: dict[str, Any] | Summary) -> Summary:
    """A :class:`Summary` from ``summary.json``'s content, version 0 or 1.

    Raises ValueError (pydantic's ValidationError is one) for a newer schema_version or a
    summary that does not fit the schema.
    """
    if isinstance(data, Summary):
        return data
    if _version(data, "summary.json") == 0:
        data = {**data, "schema_version": SCHEMA_VERSION,
                "comparisons": [_comparison_v0(c) for c in data.get("comparisons", [])],
                "environment": {k: v for k, v in (data.get("environment") or {}).items()
                                if v is not None}}
    return Summary.model_validate(data)


def read_summary(path: Path) -> Summary:
    """:func:`load_summary` of the ``summary.json`` at ``path``.

    Raises OutputError naming the file when it is not JSON or does not fit the schema."""
    try:
        return load_summary(json.loads(Path(path).read_text(encoding="utf-8")))
    except ValueError as exc:  # JSONDecodeError and pydantic's ValidationError are ValueErrors
        raise OutputError(f"{path}: {_first_line(exc)}") from exc


def _first_line(exc: Exception) -> str:
    return " ".join(str(exc).split("\n")[:2])


def load_result(data: dict[str, Any]) -> RunResult:
    """A :class:`RunResult` from ``result.json``'s content; no ``schema_version`` = version 0
    (the same fields). Raises ValueError for a newer version or a malformed result."""
    return RunResult.model_validate({**data, "schema_version": _version(data, "result.json")})
