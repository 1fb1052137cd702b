"""``summary.json`` (:class:`Summary`): everything the report shows, machine-readable, built
by :func:`afbench.compare.compare` and handed to the report templates and plots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from afbench.messages import Message
from afbench.store.comparison import SIDE_MESSAGES, Comparison, WindowMetrics
from afbench.store.experiment import Assets
from afbench.store.names import SUMMARY
from afbench.store.result import Environment, RankAgreement, SwitchRecord
from afbench.store.versioning import (
    FileSchema,
    Record,
    StoredFile,
    as_messages,
    renamed,
    same_shape,
)


class PhaseMeans(Record):
    """Per-step mean of one step_trace_time.csv phase, µs."""

    phase: str
    baseline_us: float
    variant_us: float


class ProfilingComparison(Record):
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


class KernelRow(Record):
    """One op type of an op table: afbench.analysis.op_table.OpRow as stored (the same
    fields: tests/test_profile_formats.py checks it), built from an OpRow's attributes, so
    a column a reader adds never reaches the store. ``kernel_names``: the kernel names
    behind the type (empty where the format names none; in summaries written before it)."""

    op_type: str
    count: int
    total_us: float
    ratio_pct: float
    kernel_names: list[str] = []


class KernelDiffRow(Record):
    """One op type of :func:`afbench.analysis.kernels.diff_kernel_tables`."""

    op_type: str
    count_baseline: int
    count_variant: int
    count_delta: int
    total_us_baseline: float
    total_us_variant: float
    total_us_delta: float


class StepDeviceRow(Record):
    """Device time of one profiled step (:func:`afbench.analysis.kernels.kernel_details_per_step`):
    torch_npu's profiler step, device, kernel launches, summed kernel µs, first-to-last µs."""

    step: int
    device_id: str = ""
    kernels: int
    kernel_us: float
    span_us: float


class StepDeviceTime(Record):
    """Per-step device time of a variant's first profile run: ``rows`` from its
    ``kernel_details.csv``, or none and ``note`` saying why (``per-step breakdown
    unavailable: ...``)."""

    rows: list[StepDeviceRow] = []
    note: str = ""
    note_msg: Message | None = None  # ``note`` as a catalog message


class PieceCount(Record):
    baseline: int
    variant: int
    delta: int


class FusedCount(PieceCount):
    op_types: list[str] = []


class FusedEvidence(Record):
    """:func:`afbench.analysis.fusion.rmsnorm_evidence`: launch counts of the RMSNorm pieces
    and of the fused op, baseline vs variant."""

    pieces: dict[str, PieceCount]
    fused: FusedCount
    pieces_baseline: int | None = None
    pieces_variant: int | None = None
    fusion_evident: bool


# --- the summary --------------------------------------------------------------------------


class RunRow(WindowMetrics):
    """One row of ``results/runs`` (afbench.collect.Collected.runs), None for missing; its
    window metrics (:class:`WindowMetrics`: tokens/s, loss, TTFT, TPOT, token counts) are the
    means over the run's measured window of its metrics.jsonl step records
    (afbench.collect.MEANS)."""

    run_id: str
    variant: str
    phase: str
    repeat: int
    status: str
    exit_code: int | None = None
    reason: Message | None = None  # status.json's reason (a catalog message)
    wall_s: float | None = None
    mean_step_s: float | None = None
    log_error: str | None = ""
    first_step_s: float | None = None
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
    recompile_after_step: int | None = None  # the step after which it recompiled
    sanity: str | None = None  # inference text sanity: ok | warning | failed


class PhaseParameters(Record):
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


class Summary(StoredFile):
    """``summary.json``: everything the report shows, machine-readable."""

    experiment: str
    out_dir: str = ""
    generated_at: str = ""
    created_at: str | None = None
    baseline: str | None = None
    verdict_phase: str | None = None
    profile_phase: str | None = None
    rounds: int | str = 1  # verdict.rounds: a count, or "auto"
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
    kernel_notes: dict[str, str | Message] = {}
    # variant -> why its profile run, which succeeded, has no op table (no file of any
    # format, a file without device kernels, or one that does not parse)
    op_table_notes: dict[str, Message] = {}
    caveat: str = ""
    headline: list[str] = Field(default_factory=list)

    @property
    def workload(self) -> str | None:
        """The verdict phase's workload (``sft`` | ``infer``), from the comparisons or the
        parameters; ``None`` when neither says."""
        if self.comparisons:
            return self.comparisons[0].workload
        return next((p.workload for p in self.parameters if p.phase == self.verdict_phase), None)


def _side_v0(c: dict[str, Any], prefix: str) -> dict[str, Any]:
    return {
        "name": c.get(prefix, ""),
        "mean_step_s": c.get(f"{prefix}_mean_s"),
        "repeats_s": c.get(f"{prefix}_repeats_s") or [],
        "first_step_s": c.get(f"{prefix}_first_step_s"),
        "step_cv_pct": c.get(f"{prefix}_step_cv_pct"),
        "tokens_per_s": c.get(f"{prefix}_tokens_per_s"),
        "metrics": c.get(f"{prefix}_metrics") or {},
        "sanity": c.get(f"{prefix}_sanity"),
    }


def _comparison_v0(c: dict[str, Any]) -> dict[str, Any]:
    """A version-0 comparison (one dict, ``baseline_*``/``variant_*`` keys) as version 1."""
    return {
        "baseline": _side_v0(c, "baseline"),
        "variant": _side_v0(c, "variant"),
        "phase": c["phase"],
        "workload": c.get("workload", "sft"),
        "verdict": c["verdict"],
        "verdict_line": c.get("verdict_line", c["verdict"]),
        "speed": {
            "gain_pct": c.get("gain_pct"),
            "ci_low": c.get("gain_ci_low"),
            "ci_high": c.get("gain_ci_high"),
            "level": c.get("confidence"),
            "kind": c.get("verdict_kind", "none"),
        },
        "parity": c.get("parity") or {"status": "N/A"},
        "compile": {
            "overhead_s": c.get("compile_overhead_s"),
            "break_even_steps": c.get("break_even_steps"),
        },
        "aa": c.get("aa", False),
        "reasons": c.get("reasons") or [],
    }


def summary_v0_to_v1(data: dict[str, Any]) -> dict[str, Any]:
    """Version 0 -> 1: each comparison's ``baseline_*`` / ``variant_*`` keys become two sides
    (:func:`_comparison_v0`); an environment's null fields are dropped."""
    return {
        **data,
        "comparisons": [_comparison_v0(c) for c in data.get("comparisons", [])],
        "environment": {k: v for k, v in (data.get("environment") or {}).items() if v is not None},
    }


def summary_v4_to_v5(data: dict[str, Any]) -> dict[str, Any]:
    """Version 4 -> 5: the sentences runs recorded in English (sides' memory and TFLOPs
    sources, switch details, run reasons) become messages shown as written
    (:func:`afbench.store.versioning.as_messages`)."""
    return as_messages(
        data,
        *(
            f"comparisons.*.{side}.{path}"
            for side in ("baseline", "variant")
            for path in SIDE_MESSAGES
        ),
        "switches.*.*.detail",
        "runs.*.reason",
    )


#: summary.json: version 0 -> 1 splits the comparisons into sides; 1 -> 2 the same shape;
#: 2 -> 3 the same shape (the verdict's run locations and calibration shift are new, optional);
#: 4 -> 5 its recorded sentences as messages (:func:`summary_v4_to_v5`); 5 -> 6: ``repeats`` is
#: ``rounds`` (verdict.rounds).
SUMMARY_FILE = FileSchema(
    SUMMARY,
    Summary,
    steps=(
        summary_v0_to_v1,
        same_shape,
        same_shape,
        same_shape,
        summary_v4_to_v5,
        renamed("repeats", "rounds"),
    ),
)


def load_summary(data: dict[str, Any] | Summary, where: str | None = None) -> Summary:
    """A :class:`Summary` from ``summary.json``'s content, of any version.

    Raises OutputError naming the file for a newer version or a summary that does not fit."""
    return SUMMARY_FILE.load(data, where)


def read_summary(path: Path) -> Summary:
    """:func:`load_summary` of the ``summary.json`` at ``path``.

    Raises OutputError naming the file when it is not JSON or does not fit the schema."""
    return SUMMARY_FILE.read(path)
