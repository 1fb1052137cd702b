"""``result.json`` (:class:`RunResult`, written by the worker) and ``metrics.jsonl`` lines
(:class:`StepRecord`): what one run measured."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

from afbench.schema import SCHEMA_VERSION
from afbench.store.names import RESULT
from afbench.store.versioning import FileSchema, OpenRecord, same_shape

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


class SwitchRecord(OpenRecord):
    """What one switch did in one run (:class:`afbench.switches.SwitchReport` as JSON)."""

    name: str
    applied: bool | None = None
    detail: str = ""


class RankAgreement(OpenRecord):
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


class Contention(OpenRecord):
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



#: result.json: version 0 and 1 hold the same fields as version 2.
RESULT_FILE = FileSchema(RESULT, RunResult, steps=(same_shape, same_shape))


def load_result(data: dict[str, Any] | RunResult, where: str | None = None) -> RunResult:
    """A :class:`RunResult` from ``result.json``'s content, of any version.

    Raises OutputError naming the file for a newer version or a malformed result."""
    return RESULT_FILE.load(data, where)
