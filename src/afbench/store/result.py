"""``result.json`` (:class:`RunResult`: what an engine returns and the worker writes) and
``metrics.jsonl`` lines (:class:`StepRecord`): what one run measured.

An engine builds its result with :meth:`RunResult.from_fields` from the flat field names of
:mod:`afbench.analysis.efficiency` and its own keys; the memory and efficiency figures become
the nested :class:`RunMemory` and :class:`Efficiency` records (:func:`nest_figures`, also the
upgrade step from version 1, whose result.json held them flat). A key no model names is an
error, in the engine (the run fails, naming it) and in a stored file (OutputError naming the
file and the key)."""

from __future__ import annotations

from typing import Any

from pydantic import field_validator

from afbench.messages import Message
from afbench.store.names import RESULT
from afbench.store.versioning import (
    FileSchema,
    OpenRecord,
    Record,
    StoredFile,
    as_messages,
    same_shape,
)


class StepRecord(OpenRecord):
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


class SwitchRecord(Record):
    """What one switch did in one run (:class:`afbench.switches.SwitchReport` as JSON):
    ``detail`` what it did, a catalog message (None: the engine said nothing); ``evidence``
    is the switch's own proof (op names found in a profile, graph counts)."""

    name: str
    applied: bool | None = None
    detail: Message | None = None
    evidence: dict[str, Any] = {}


class RankAgreement(Record):
    """Data-parallel runs (:func:`afbench.engines.distributed.agreement`): whether every rank
    ended with the same parameters (float64 checksums), and each rank's local loss of the
    last step."""

    world_size: int
    param_checksums: list[float] = []
    params_identical: bool
    last_step_local_losses: list[float | None] = []


class Environment(Record):
    """Where the runs ran, as a run's result.json records it (the
    summary shows the first run's); params: the model's parameter count."""

    python: str | None = None
    platform: str | None = None
    backend: str | None = None
    device: str | None = None
    torch_threads: int | None = None
    versions: dict[str, Any] = {}
    params: int | None = None


class Contention(Record):
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


class RankMemory(Record):
    """One rank's peaks over the measured window (GiB) and how they were measured (a catalog
    message)."""

    rank: int
    peak_allocated_gib: float | None = None
    peak_reserved_gib: float | None = None
    peak_rss_gib: float | None = None
    source: Message | None = None


class RunMemory(Record):
    """A run's peak memory over its measured window, GiB = 2**30 bytes; None where the engine
    measured nothing (the command engine: ``source`` says ``not reported``).

    peak_allocated_gib: live tensors (device); peak_reserved_gib: the caching allocator
    (device; ``peak_reserved_pct`` of the device's memory, torchtitan); peak_rss_gib: the
    process's resident set (CPU). Each the max over ranks; ``per_rank`` the ranks' own.
    source, window: how, and over which steps (catalog messages: ``src_*``,
    ``memory_window_*``). kv_cache_*: inference only, the largest KV cache one generation
    holds, from the model config (GiB, positions per sequence, sequences, formula)."""

    peak_allocated_gib: float | None = None
    peak_reserved_gib: float | None = None
    peak_reserved_pct: float | None = None
    peak_rss_gib: float | None = None
    source: Message | None = None
    window: Message | None = None
    per_rank: list[RankMemory] = []
    kv_cache_gib: float | None = None
    kv_cache_tokens: int | None = None
    kv_cache_batch: int | None = None
    kv_cache_source: Message | None = None


class Efficiency(Record):
    """Training throughput in FLOPs: of one run (result.json), or of a side's verdict-phase
    runs (summary.json: means over its repeats).

    tflops_per_device: achieved TFLOPs (1e12 FLOP/s) per device over the measured window, as
    the run's engine reports it (the builtin engine: afbench's count); mfu_pct: that over
    ``peak_tflops`` x 100 (None without a peak); source / peak_source: where each came from
    (catalog messages: ``src_tflops``, ``peak_unknown_device``, ...).
    flops_per_token: FLOPs per trained token; flops_params: the N of 6N.
    afbench_*: afbench's own count beside an engine's own figures (torchtitan), else None.
    """

    tflops_per_device: float | None = None
    mfu_pct: float | None = None
    peak_tflops: float | None = None
    peak_source: Message | None = None
    source: Message | None = None
    flops_per_token: float | None = None
    flops_params: float | None = None
    afbench_tflops_per_device: float | None = None
    afbench_mfu_pct: float | None = None
    afbench_source: Message | None = None


#: The flat names of :mod:`afbench.analysis.efficiency` (result.json version 1) -> the nested
#: record and its field.
FLAT_FIGURES: dict[str, tuple[str, str]] = {
    "peak_memory_allocated_gib": ("memory", "peak_allocated_gib"),
    "peak_memory_reserved_gib": ("memory", "peak_reserved_gib"),
    "peak_memory_reserved_pct": ("memory", "peak_reserved_pct"),
    "peak_rss_gib": ("memory", "peak_rss_gib"),
    "memory_source": ("memory", "source"),
    "memory_window": ("memory", "window"),
    "memory_per_rank": ("memory", "per_rank"),
    **{
        k: ("memory", k)
        for k in ("kv_cache_gib", "kv_cache_tokens", "kv_cache_batch", "kv_cache_source")
    },
    **{
        k: ("efficiency", k)
        for k in (
            "tflops_per_device",
            "mfu_pct",
            "peak_tflops",
            "flops_per_token",
            "flops_params",
            "afbench_tflops_per_device",
            "afbench_mfu_pct",
        )
    },
    "peak_tflops_source": ("efficiency", "peak_source"),
    "tflops_source": ("efficiency", "source"),
    "afbench_tflops_source": ("efficiency", "afbench_source"),
}
_RANK_FIGURES = {
    "peak_memory_allocated_gib": "peak_allocated_gib",
    "peak_memory_reserved_gib": "peak_reserved_gib",
    "memory_source": "source",
}


def nest_figures(fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` with the flat memory and efficiency names (:data:`FLAT_FIGURES`) moved into
    ``memory`` and ``efficiency`` records (a ``memory_per_rank`` entry's names too); other
    keys unchanged. The upgrade step of result.json from version 1 to 2, and what
    :meth:`RunResult.from_fields` does with an engine's fields."""
    out = {k: v for k, v in fields.items() if k not in FLAT_FIGURES}
    nested: dict[str, dict[str, Any]] = {
        "memory": dict(out.pop("memory", None) or {}),
        "efficiency": dict(out.pop("efficiency", None) or {}),
    }
    for key, (record, name) in FLAT_FIGURES.items():
        if key in fields:
            nested[record][name] = fields[key]
    per_rank = nested["memory"].get("per_rank")
    if per_rank:
        nested["memory"]["per_rank"] = [
            {_RANK_FIGURES.get(k, k): v for k, v in r.items()} for r in per_rank
        ]
    return {**out, **{k: v for k, v in nested.items() if v}}


class RunResult(StoredFile, Environment):
    """``result.json`` of one successful run: what its engine returned (``Engine.run``),
    written by the worker.

    workload: sft | infer. first_step_s: seconds of the first step (time to first step,
    includes compilation). memory, efficiency: over the measured window. contention: None
    where not measured (older runs, a failed window). Engine details, None where the engine
    has none: world_size, tokens_per_step, grad_accum_steps, num_blocks (packed sequences),
    optimizer (name and settings), num_prompts, sanity (inference text check:
    :func:`afbench.analysis.sanity.sanity_check`); the command engine's argv, steps_logged
    and command_wall_s (s); torchtitan's flavor, argv, env (the variables it added),
    step_time_source, dump_folder, profile_traces (rank -> trace files) and not_translated
    (settings torchtitan has no option for).
    """

    workload: str | None = None
    engine: str | None = None
    first_step_s: float | None = None
    switches: list[SwitchRecord] = []
    ranks: RankAgreement | None = None  # data-parallel runs only
    memory: RunMemory = RunMemory()
    efficiency: Efficiency = Efficiency()
    contention: Contention | None = None
    world_size: int | None = None
    tokens_per_step: int | None = None
    grad_accum_steps: int | None = None
    num_blocks: int | None = None
    optimizer: dict[str, Any] | None = None
    num_prompts: int | None = None
    sanity: dict[str, Any] | None = None
    argv: list[str] | None = None
    steps_logged: int | None = None
    command_wall_s: float | None = None
    flavor: str | None = None
    env: dict[str, str] | None = None
    step_time_source: str | None = None
    dump_folder: str | None = None
    profile_traces: dict[str, list[str]] | None = None
    not_translated: list[str] | None = None

    @field_validator("ranks", mode="before")
    @classmethod
    def _single_process_has_no_ranks(cls, value: Any) -> Any:
        return value or None  # a single-process SFT run writes {}

    @classmethod
    def from_fields(cls, fields: dict[str, Any]) -> "RunResult":
        """An engine's result from its flat fields (:func:`nest_figures`).

        Raises pydantic's ValidationError naming a key no field of result.json has."""
        return cls.model_validate(nest_figures(fields))

    # The version-1 flat names, read-only: a sweep row keeps them as its columns.
    @property
    def peak_memory_allocated_gib(self) -> float | None:
        return self.memory.peak_allocated_gib

    @property
    def peak_memory_reserved_gib(self) -> float | None:
        return self.memory.peak_reserved_gib

    @property
    def peak_rss_gib(self) -> float | None:
        return self.memory.peak_rss_gib

    @property
    def memory_source(self) -> Message | None:
        return self.memory.source

    @property
    def tflops_per_device(self) -> float | None:
        return self.efficiency.tflops_per_device

    @property
    def mfu_pct(self) -> float | None:
        return self.efficiency.mfu_pct


#: The plain strings of a version-4 result.json that are messages since version 5.
RESULT_MESSAGES = (
    "memory.source",
    "memory.window",
    "memory.kv_cache_source",
    "memory.per_rank.*.source",
    "efficiency.source",
    "efficiency.peak_source",
    "efficiency.afbench_source",
    "switches.*.detail",
)


def result_v4_to_v5(data: dict[str, Any]) -> dict[str, Any]:
    """Version 4 -> 5: the recorded English sentences (:data:`RESULT_MESSAGES`) become
    messages shown as written (:func:`afbench.store.versioning.as_messages`)."""
    return as_messages(data, *RESULT_MESSAGES)


#: result.json: version 0 -> 1 the same shape; 1 -> 2 nests the memory and efficiency
#: figures (:func:`nest_figures`); 4 -> 5 its sentences as messages (:func:`result_v4_to_v5`).
RESULT_FILE = FileSchema(
    RESULT,
    RunResult,
    steps=(same_shape, nest_figures, same_shape, same_shape, result_v4_to_v5, same_shape),
)


def load_result(data: dict[str, Any] | RunResult, where: str | None = None) -> RunResult:
    """A :class:`RunResult` from ``result.json``'s content, of any version.

    Raises OutputError naming the file for a newer version or a malformed result."""
    return RESULT_FILE.load(data, where)
