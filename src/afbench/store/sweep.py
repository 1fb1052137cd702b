"""``sweep_summary.json`` (:class:`SweepSummary`): a sweep's combinations ranked, its main
effects and the levels used (:func:`afbench.sweep.build_sweep_report`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from afbench.messages import Message
from afbench.schema import SCHEMA_VERSION
from afbench.store.comparison import Speed
from afbench.store.names import SWEEP_SUMMARY
from afbench.store.versioning import FileSchema, Record, same_shape

class SweepRow(Record):
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
    # compared with the baseline combination's runs that ran beside it in its own job
    # (experiment.sweep_pairing=beside, variant sweep_baseline), not with the baseline job's
    beside_baseline: bool = False


class MainEffect(Record):
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


class SweepSummary(Record):
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
    # how many of the comparisons used baseline runs beside the combination in its own job
    # (experiment.sweep_pairing=beside); the others used the baseline job's runs
    beside: int = 0
    # runs launched by every job (contended runs' reruns included), and how many of them ran
    # the baseline combination beside a job's own (experiment.sweep_pairing=beside)
    runs: int | None = None
    beside_runs: int | None = None
    combinations: list[SweepRow] = []
    main_effects: list[MainEffect] = []
    failed: list[str] = []
    # combinations the command line asked for that no job folder holds (``key=value,...``):
    # a sweep stopped before its last jobs, or a job folder deleted
    never_ran: list[str] = []
    untrusted: list[str] = []
    cv_threshold_pct: float = 10.0  # a run's step CV above this marks it untrusted
    generated_at: str = ""



def sweep_v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    """sweep_summary.json, version 1 -> 2 (unknown keys become an error from version 2 on).
    Version 1 wrote the untyped sweep summary's keys too: a main effect's ``combinations``
    is its ``cells``; its ``mean_gain_pct`` (the mean of the cells' gains, which the median
    ``effect_pct`` replaced) and any other key a row, an effect or the summary no longer has
    are dropped. Missing fields stay None."""
    def known(record: dict[str, Any], model: type[Record]) -> dict[str, Any]:
        return {k: v for k, v in record.items() if k in model.model_fields}

    out = known(data, SweepSummary)
    out["combinations"] = [known(r, SweepRow) for r in data.get("combinations") or []]
    effects = []
    for e in data.get("main_effects") or []:
        e = dict(e)
        if "cells" not in e and isinstance(e.get("combinations"), int):
            e["cells"] = e["combinations"]
        effects.append(known(e, MainEffect))
    out["main_effects"] = effects
    return out


#: sweep_summary.json: version 0 has the shape of version 1 (flat rows before the typed sweep
#: summary: their missing fields are None); 1 -> 2: :func:`sweep_v1_to_v2`.
SWEEP_SUMMARY_FILE = FileSchema(SWEEP_SUMMARY, SweepSummary,
                                steps=(same_shape, sweep_v1_to_v2, same_shape))


def load_sweep_summary(data: dict[str, Any] | SweepSummary,
                       where: str | None = None) -> SweepSummary:
    """A :class:`SweepSummary` from ``sweep_summary.json``'s content, of any version.

    Raises OutputError naming the file for a newer version or content that does not fit."""
    return SWEEP_SUMMARY_FILE.load(data, where)


def read_sweep_summary(path: Path) -> SweepSummary:
    """:func:`load_sweep_summary` of the file at ``path`` (OutputError naming it)."""
    return SWEEP_SUMMARY_FILE.read(path)
