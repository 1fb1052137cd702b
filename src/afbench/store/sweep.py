"""``sweep_summary.json`` (:class:`SweepSummary`): a sweep's combinations ranked, its main
effects and the levels used (:func:`afbench.sweep.build_sweep_report`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from afbench.messages import Message
from afbench.schema import SCHEMA_VERSION
from afbench.store.comparison import SIDE_MESSAGES, Memory, Side, Speed
from afbench.store.names import SWEEP_SUMMARY
from afbench.store.result import Efficiency
from afbench.store.versioning import FileSchema, Record, as_messages, same_shape

#: ``SweepRow.status`` of the rows that have no verdict of their own.
BASELINE = "BASELINE"


class SweepRow(Record):
    """One combination of a sweep (one variant of one Hydra job) on the verdict phase, as
    ``sweep_summary.json`` lists it (:func:`afbench.sweep.build_sweep_report`).

    side: the combination's numbers (mean step time, tokens/s, step CV, memory: max over its
      runs, efficiency) as its job's report has them (:class:`Side`, summary.json's, or
      :func:`afbench.compare.side` of the job's runs where the job compared nothing).
    speed: its verdict against the baseline combination (:class:`Speed`). ``from_job``: the
      job's own comparison in its summary.json, stored as it is (a job paired beside the
      baseline, or a variant of the baseline job); otherwise the sweep's comparison of the
      baseline job's runs with this job's, paired by round, across jobs.
    status: BASELINE | RUN_FAILED | SKIPPED, or ``None`` when ``speed`` decides (:attr:`verdict`).
    run_medians_s: per-run median step times (s, :func:`afbench.verdict.runs.run_statistic`)
      of the runs its side counts; median_step_s: their median (the ranking's tie-break).
    n_bursts / n_steps: burst steps / measured steps over those runs; outlier_runs: run ids
      whose median does not fit their repeats; untrusted: an outlier run, a contended run
      (verdict.contention=set_aside) or a step CV above the threshold
      (:mod:`afbench.analysis.factorial`); contended_runs: run ids measured as contended.
    report: the job's report.html, relative to the sweep folder (``None`` if absent).
    window: (first, last) measured step. beside_baseline: judged against the baseline
      combination's runs beside it in its own job (experiment.sweep_pairing=beside).
    """

    name: str
    job: str
    variant: str = ""
    setting: dict[str, str] = {}
    status: str | None = None
    side: Side | None = None
    speed: Speed | None = None
    from_job: bool = False
    run_medians_s: list[float] = []
    median_step_s: float | None = None
    reasons: list[str] = []
    # afbench's own reasons as catalog messages (a job stopped before it planned); the report
    # shows these where present, else ``reasons`` (recorded error texts)
    reason_msgs: list[Message] = []
    is_plan_baseline: bool = False
    note: str = ""
    n_bursts: int = 0
    n_steps: int = 0
    outlier_runs: list[str] = []
    untrusted: bool = False
    report: str | None = None
    window: list[int] | None = None
    contended_runs: list[str] = []
    beside_baseline: bool = False

    @property
    def verdict(self) -> str:
        """``status``, else the speed's decision (RUN_FAILED without either)."""
        return self.status or (
            self.speed.decision if self.speed and self.speed.decision else "RUN_FAILED"
        )

    @property
    def gain_pct(self) -> float | None:
        """The speed's gain (percent, positive = faster); 0 for the baseline combination."""
        return 0.0 if self.status == BASELINE else self.speed.gain_pct if self.speed else None

    @property
    def ci_low(self) -> float | None:
        return self.speed.ci_low_pct if self.speed else None

    @property
    def ci_high(self) -> float | None:
        return self.speed.ci_high_pct if self.speed else None

    @property
    def level(self) -> float | None:
        return self.speed.level if self.speed else None

    @property
    def n_pairs(self) -> int | None:
        return self.speed.n_pairs if self.speed else None

    @property
    def statuses(self) -> list[str]:
        """Its runs' statuses (empty for a job that never planned)."""
        return self.side.statuses if self.side else []

    @property
    def ok(self) -> bool:
        return bool(self.side and self.side.ok)

    @property
    def mean_step_s(self) -> float | None:
        return self.side.mean_step_s if self.side else None

    @property
    def tokens_per_s(self) -> float | None:
        return self.side.tokens_per_s if self.side else None

    @property
    def step_cv_pct(self) -> float | None:
        return self.side.step_cv_pct if self.side else None

    @property
    def memory(self) -> Memory:
        """The side's peak memory (GiB, max over its runs); empty without a side."""
        return self.side.memory if self.side else Memory()

    @property
    def efficiency(self) -> Efficiency:
        return self.side.efficiency if self.side else Efficiency()


class EffectPair(Record):
    """One combination a main effect rests on: its paired gain against the baseline
    combination enters the contrast with ``weight`` (``+-1/cells``); ``n_pairs`` its deciding
    pairs; ``beside``: time-paired in its own job (else paired across jobs)."""

    combination: str
    job: str
    weight: float
    n_pairs: int
    beside: bool = False


class MainEffect(Record):
    """One swept key's main effect: ``value`` against ``reference`` (the baseline
    combination's value), ``effect_pct`` (percent, positive = faster), over ``cells`` cells of
    the other keys (``dropped``: cells left out, a side without an interval), from the paired
    gains of ``pairs`` (:mod:`afbench.verdict.effects`): its interval ``ci_low``/``ci_high`` at
    ``level`` (Holm's level for this effect among ``family``), ``decision``, the p-value and
    Holm's adjusted one, ``df`` (Satterthwaite; ``None``: infinite). Version 3 stored a median
    over cells with the min-max range of cells (``level``: that range's sign-test coverage)."""

    key: str
    value: str
    reference: str | None = None
    effect_pct: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    level: float | None = None
    decision: str | None = None
    p_value: float | None = None
    p_holm: float | None = None
    df: float | None = None
    family: int | None = None
    cells: int | None = None
    dropped: int = 0
    method: str | None = None
    pairs: list[EffectPair] = []


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

    # What the sweep report shows, decided here (its templates only place the words).
    @property
    def has_memory(self) -> bool:
        """Whether a combination measured peak RSS or allocated memory (the memory columns)."""
        return any(c.memory.peak_rss_gib or c.memory.peak_allocated_gib for c in self.combinations)

    @property
    def has_efficiency(self) -> bool:
        """Whether a combination measured TFLOPs (the efficiency columns)."""
        return any(c.efficiency.tflops_per_device for c in self.combinations)

    @property
    def one_round(self) -> bool:
        """Whether a ranked combination (one with a median step time) rests on fewer than two
        runs: the report's one-round caveat."""
        counts = [len(c.run_medians_s) for c in self.combinations if c.median_step_s]
        return bool(self.combinations) and min(counts, default=2) < 2

    @property
    def calibrate_recipe(self) -> str:
        """The recipe the one-round caveat names: the first verdict's ``calibrate_recipe``
        (its workload's), else ``calibrate_host``."""
        recipes = (c.speed.calibrate_recipe for c in self.combinations if c.speed)
        return next((r for r in recipes if r), "calibrate_host")


#: The fields of a row and of a main effect in versions 2 and 3 (flat copies of the verdict and
#: the side; a main effect's sign-test ``coverage``): what :func:`sweep_v1_to_v2` keeps.
V3_ROW_FIELDS = frozenset(
    (
        "name",
        "job",
        "variant",
        "setting",
        "ok",
        "statuses",
        "per_repeat_s",
        "run_medians_s",
        "mean_step_s",
        "median_step_s",
        "tokens_per_s",
        "reasons",
        "reason_msgs",
        "is_plan_baseline",
        "verdict",
        "gain_pct",
        "ci_low",
        "ci_high",
        "level",
        "method",
        "n_pairs",
        "mde_pct",
        "note",
        "step_cv_pct",
        "n_bursts",
        "n_steps",
        "outlier_runs",
        "untrusted",
        "report",
        "window",
        "peak_rss_gib",
        "peak_memory_allocated_gib",
        "peak_memory_reserved_gib",
        "memory_source",
        "tflops_per_device",
        "mfu_pct",
        "speed",
        "contended_runs",
        "beside_baseline",
    )
)
V3_EFFECT_FIELDS = frozenset(
    (
        "key",
        "value",
        "reference",
        "effect_pct",
        "ci_low",
        "ci_high",
        "coverage",
        "cells",
        "dropped",
        "method",
    )
)


def sweep_v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    """sweep_summary.json, version 1 -> 2 (unknown keys become an error from version 2 on).
    Version 1 wrote the untyped sweep summary's keys too: a main effect's ``combinations``
    is its ``cells``; its ``mean_gain_pct`` (the mean of the cells' gains, which the median
    ``effect_pct`` replaced) and any other key a row, an effect or the summary no longer has
    are dropped. Missing fields stay None."""
    out = {k: v for k, v in data.items() if k in SweepSummary.model_fields}
    out["combinations"] = [
        {k: v for k, v in r.items() if k in V3_ROW_FIELDS} for r in data.get("combinations") or []
    ]
    effects = []
    for e in data.get("main_effects") or []:
        e = dict(e)
        if "cells" not in e and isinstance(e.get("combinations"), int):
            e["cells"] = e["combinations"]
        effects.append({k: v for k, v in e.items() if k in V3_EFFECT_FIELDS})
    out["main_effects"] = effects
    return out


#: A version-3 row's flat copies of its verdict, by the :class:`Speed` field they copied.
_V3_SPEED = {
    "gain_pct": "gain_pct",
    "ci_low": "ci_low_pct",
    "ci_high": "ci_high_pct",
    "level": "level",
    "method": "method",
    "n_pairs": "n_pairs",
    "mde_pct": "mde_pct",
}
_NO_SPEED = (BASELINE, "RUN_FAILED", "SKIPPED")


def sweep_v3_to_v4(data: dict[str, Any]) -> dict[str, Any]:
    """sweep_summary.json, version 3 -> 4: a row holds its verdict as one :class:`Speed` and its
    numbers as one :class:`Side` instead of flat copies. ``verdict`` BASELINE / RUN_FAILED /
    SKIPPED becomes ``status``; a row without ``speed`` (version 1) gets one from its flat
    fields; ``per_repeat_s``, ``mean_step_s``, ``tokens_per_s``, ``step_cv_pct``, the memory
    and efficiency fields become its ``side`` (version 3 stored the mean of the runs' peaks
    there, not the max); a main effect's ``coverage`` (the sign-test coverage of its range of
    cells) becomes ``level``."""
    out = dict(data)
    rows = []
    for r in data.get("combinations") or []:
        r = dict(r)
        verdict = r.pop("verdict", None)
        flat = {new: r.pop(old, None) for old, new in _V3_SPEED.items()}
        if verdict in _NO_SPEED:
            r["status"] = verdict
        elif r.get("speed") is None and verdict:
            r["speed"] = {"decision": verdict, **flat}
        side = {
            "name": r.get("variant") or r["name"],
            "statuses": r.pop("statuses", None) or [],
            "ok": bool(r.pop("ok", False)),
            "repeats_s": r.pop("per_repeat_s", None) or [],
            **{k: r.pop(k, None) for k in ("mean_step_s", "tokens_per_s", "step_cv_pct")},
            "memory": {
                "peak_rss_gib": r.pop("peak_rss_gib", None),
                "peak_allocated_gib": r.pop("peak_memory_allocated_gib", None),
                "peak_reserved_gib": r.pop("peak_memory_reserved_gib", None),
                "source": r.pop("memory_source", None),
            },
            "efficiency": {k: r.pop(k, None) for k in ("tflops_per_device", "mfu_pct")},
        }
        r["side"] = side if side["statuses"] else None  # a job that never planned: none
        r["from_job"] = False
        rows.append(r)
    out["combinations"] = rows
    out["main_effects"] = [
        {**{k: v for k, v in e.items() if k != "coverage"}, "level": e.get("coverage")}
        for e in data.get("main_effects") or []
    ]
    return out


def sweep_v4_to_v5(data: dict[str, Any]) -> dict[str, Any]:
    """sweep_summary.json, version 4 -> 5: a row's side's recorded sentences (memory and TFLOPs
    sources) become messages shown as written (:func:`afbench.store.versioning.as_messages`)."""
    return as_messages(data, *(f"combinations.*.side.{path}" for path in SIDE_MESSAGES))


#: sweep_summary.json: version 0 has the shape of version 1 (flat rows before the typed sweep
#: summary: their missing fields are None); 1 -> 2: :func:`sweep_v1_to_v2`; 3 -> 4:
#: :func:`sweep_v3_to_v4`; 4 -> 5: :func:`sweep_v4_to_v5`.
SWEEP_SUMMARY_FILE = FileSchema(
    SWEEP_SUMMARY,
    SweepSummary,
    steps=(same_shape, sweep_v1_to_v2, same_shape, sweep_v3_to_v4, sweep_v4_to_v5, same_shape),
)


def load_sweep_summary(
    data: dict[str, Any] | SweepSummary, where: str | None = None
) -> SweepSummary:
    """A :class:`SweepSummary` from ``sweep_summary.json``'s content, of any version.

    Raises OutputError naming the file for a newer version or content that does not fit."""
    return SWEEP_SUMMARY_FILE.load(data, where)


def read_sweep_summary(path: Path) -> SweepSummary:
    """:func:`load_sweep_summary` of the file at ``path`` (OutputError naming it)."""
    return SWEEP_SUMMARY_FILE.read(path)
