"""Sweeps (``python -m afbench -m key=a,b ...``): one sweep report ranking every combination
against a baseline combination, built when the sweep ends (by Hydra's callback,
:mod:`afbench.cli.sweep_callback`) or offline (``python -m afbench.report <sweep dir>``).

Each Hydra job is an ordinary afbench experiment in ``<sweep dir>/<job num>/``. A
*combination* is one (job, variant) pair: with the default experiment (one variant) that is one
job; with a recipe of several variants every variant of every job counts. Works with any Hydra
launcher: the report reads only files.
"""

from __future__ import annotations

import logging
import math
import re
import statistics
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any


from afbench.errors import OutputError
from afbench.io import inside
from afbench.messages import Message, say
from afbench.pairing import SWEEP_BASELINE, baseline_setting, same_value, split_override
from afbench.store import (SWEEP_SUMMARY, SWEEP_SUMMARY_FILE, MainEffect, Speed, SweepRow,
                           SweepSummary)
from afbench.store import OutDir, SweepDir
from afbench.verdict.words import RUN_FAILED, SKIPPED

log = logging.getLogger(__name__)


def job_overrides(job_dir: Path) -> list[str]:
    """The job's command-line overrides, from Hydra's ``.hydra/overrides.yaml``."""
    return OutDir(job_dir).job_overrides()


def swept_keys(overrides: list[list[str]]) -> list[str]:
    """Keys whose value differs between jobs (the swept ones), in first-seen order."""
    values: dict[str, set[str]] = {}
    order: list[str] = []
    for ovs in overrides:
        for ov in ovs:
            key, val = split_override(ov)
            if key not in values:
                values[key] = set()
                order.append(key)
            values[key].add(val)
    return [k for k in order if len(values[k]) > 1]


def _job_dirs(sweep_dir: Path) -> list[Path]:
    """Hydra job folders of a sweep, in job order: every folder with a plan.json, and every
    folder with Hydra's record but no plan.json (a job stopped before it planned: config or
    preflight error), which the report must still show."""
    found = {p.parent for p in sweep_dir.glob("*/plan.json")}
    found |= {p.parent.parent for p in sweep_dir.glob("*/.hydra/overrides.yaml")}
    return sorted(found, key=lambda p: (len(p.name), p.name))


def _report_settings(jobs: list[Path]) -> dict[str, Any]:
    """The ``report`` section the jobs ran with (from their experiment.json), so that an
    offline re-render keeps the sweep's own baseline, confidence level and language; never
    its ``template_dir`` (templates come from the installed package or from the caller:
    :func:`afbench.report.render.stored_report`)."""
    for job in jobs:
        try:
            exp = OutDir(job).experiment()
        except OutputError:
            continue
        if exp.config is not None:
            return exp.config.report.model_dump(mode="json", exclude={"template_dir"})
    return {}


_LOG_PREFIX = re.compile(r"^\[[^\]]*\]\[[A-Z]+\] ")  # "[time][LEVEL] " of the job log


def job_failure_reason(job: Path) -> Message:
    """Why a job that never planned stopped, as a catalog message (``job_stopped``, or
    ``job_stopped_detail`` with its ``detail``): the job's ``afbench: error`` message and the
    ``[FAIL]`` lines of preflight, from its own log (Hydra job logging writes
    ``<job>/<job name>.log``), as written there."""
    lines: list[str] = []
    for log_file in sorted(job.glob("*.log")):
        try:
            text = log_file.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        for line in text:
            body = _LOG_PREFIX.sub("", line).strip()
            if body.startswith("afbench: error in job"):
                lines.append(body.partition("): ")[2] or body)
            elif body.startswith("afbench: error: "):
                lines.append(body.removeprefix("afbench: error: "))
            elif body.startswith("[FAIL]"):
                lines.append(body)
    detail = "; ".join(dict.fromkeys(lines))
    return say("job_stopped_detail", detail=detail) if detail else say("job_stopped")


@dataclass
class _Combination:
    """A sweep row while it is built, with what the statistics and the plots need but the
    summary does not keep: each OK run's measured step times and the per-step table."""

    row: SweepRow
    run_steps: list[list[float]] = field(default_factory=list)
    run_contended: list[bool] = field(default_factory=list)  # measured, per OK run
    run_detail: list[dict | None] = field(default_factory=list)  # run_reason messages (JSON)
    steps: Any = None  # pandas DataFrame of the verdict-phase steps, or None
    calibration: dict[str, Any] | None = None  # the job's experiment.json calibration
    # experiment.sweep_pairing=beside: the baseline combination's runs in this job
    # (variant sweep_baseline; not a row of its own) and, on the job's own row, those runs
    paired_base: bool = False
    beside: _Combination | None = None
    launched: int = 0  # runs of this variant the job launched, reruns included

    @property
    def has_result(self) -> bool:
        return self.row.ok and bool(self.run_steps)


MEMORY_FIELDS = ("peak_rss_gib", "peak_memory_allocated_gib", "peak_memory_reserved_gib",
                 "tflops_per_device", "mfu_pct")


def _job_report(job: Path, lang: str, template_dir: str | None = None) -> str | None:
    """The job's HTML report in ``lang``, relative to the sweep folder: ``<job>/report.html``
    in the job's own language, ``<job>/report.<lang>.html`` in another, re-rendered here from
    the job's runs (:func:`afbench.report.render.build_report`, with the job's own report
    settings) so that the sweep page links to a report in its own language; None when the
    job has none (a failed re-render is logged and the link falls back to the job's own)."""
    from afbench.config.models import ReportConfig
    from afbench.report.render import build_report, report_name, run_language

    own = run_language(job)
    name = report_name("report", "html", lang, own)
    if lang != own and (job / "plan.json").is_file():
        settings = _report_settings([job])
        try:
            build_report(job, ReportConfig.model_validate({**settings, "lang": lang,
                                                           "template_dir": template_dir}))
        except Exception as exc:  # the sweep page still links the job's own report
            log.warning("afbench: job %s: report in %s failed: %s", job.name, lang, exc)
            name = "report.html"
    return f"{job.name}/{name}" if (job / name).is_file() else None


def _combinations(job: Path, setting: dict[str, str], keys: list[str],
                  lang: str = "en", template_dir: str | None = None) -> list[_Combination]:
    """One entry per variant of one job (one entry, failed, for a job that never planned),
    from the variant's verdict-phase runs: each run's strict-parse window, its median and
    bursts (:func:`afbench.verdict.runs.run_statistic`), step CV, memory and efficiency;
    each links the job's report in ``lang`` (:func:`_job_report`)."""
    # collect/compare pull in pandas and the config models: only the report needs them
    from afbench.analysis.factorial import UNTRUSTED_CV_PCT, outlier_runs
    from afbench.analysis.stats import finite_mean
    from afbench.collect import collect
    from afbench.compare import run_contention, run_ids, side, workload_of
    from afbench.verdict.runs import run_statistic

    name = ",".join(f"{k}={setting.get(k, '')}" for k in keys) or job.name
    if not (job / "plan.json").is_file():
        why = job_failure_reason(job)
        return [_Combination(SweepRow(name=name, job=job.name, setting=setting,
                                      reasons=[why.text], reason_msgs=[why],
                                      is_plan_baseline=True))]
    col = collect(job)
    runs = col.runs.set_index("run_id")
    phase = col.plan.verdict_phase
    workload = workload_of(col)
    report = _job_report(job, lang, template_dir)
    paired = col.plan.baseline == SWEEP_BASELINE
    own = [v for v in col.plan.variants if not (paired and v == SWEEP_BASELINE)]
    out = []
    for variant in col.plan.variants:
        ids = run_ids(col, variant, phase)
        v = side(col, variant, phase, workload)
        sel = runs.loc[ids]
        row = SweepRow(
            name=name + (f" [{variant}]" if len(own) > 1 else ""), job=job.name,
            # a paired job's own variant stands for the job's one combination
            variant="" if paired else variant, setting=setting, ok=v.ok, statuses=v.statuses,
            per_repeat_s=v.repeats_s, mean_step_s=finite_mean(v.repeats_s),
            tokens_per_s=v.tokens_per_s if v.ok else None, step_cv_pct=v.step_cv_pct,
            # every run's note, resumed ones included, without the run id
            reasons=[r for r in sel.reason.tolist() + sel.log_error.tolist() if r],
            is_plan_baseline=variant == col.plan.baseline,
            report=report)
        combo = _Combination(row, calibration=col.experiment.calibration_dict(),
                             paired_base=paired and variant == SWEEP_BASELINE,
                             launched=sum(r.variant == variant for r in col.plan.runs)
                             + sum(r.replaced.variant == variant for r in col.plan.reruns))
        medians = []
        for rid in ids:
            window = col.spec(rid).config.scheduler.measure
            row.window = [window.first_step, window.last_step]
            # collect's strict parse of the window; an invalid log is in log_error already
            steps = col.window_steps.get(rid)
            if sel.at[rid, "status"] != "OK" or sel.at[rid, "log_error"] or not steps:
                continue
            stat = run_statistic(steps, rid)
            contended, detail = run_contention(col.results.get(rid), rid)
            combo.run_steps.append(steps)
            combo.run_contended.append(contended)
            combo.run_detail.append(detail.model_dump() if detail else None)
            if contended:
                row.contended_runs.append(rid)
            medians.append((rid, stat.location_s))
            row.n_bursts += stat.n_bursts
            row.n_steps += stat.n_steps
        row.run_medians_s = [m for _, m in medians]
        if row.run_medians_s:
            row.median_step_s = float(statistics.median(row.run_medians_s))
        row.outlier_runs = [medians[i][0] for i in outlier_runs(row.run_medians_s)]
        # contended runs make a combination untrusted unless the jobs keep them
        # (report.contention=keep): then they are shown, not held against it
        set_aside = col.experiment.report.contention == "set_aside"
        row.untrusted = bool(row.outlier_runs) or (set_aside and bool(row.contended_runs)) or (
            row.step_cv_pct is not None and row.step_cv_pct > UNTRUSTED_CV_PCT)
        for key in MEMORY_FIELDS:
            setattr(row, key, finite_mean(getattr(col.results.get(rid), key, None) for rid in ids))
        row.memory_source = next((getattr(col.results.get(rid), "memory_source", None)
                                  for rid in ids if getattr(col.results.get(rid), "memory_source",
                                                            None)), None)
        if not col.steps.empty and {"run_id", "step", "step_time_s"} <= set(col.steps):
            frame = col.steps[col.steps.run_id.isin(ids)]
            combo.steps = frame.assign(combination=row.name) if len(frame) else None
        out.append(combo)
    if paired:
        base = next(c for c in out if c.paired_base)
        for c in out:
            if not c.paired_base:
                c.beside, c.row.beside_baseline = base, True
    return out


def _compare_to_baseline(combo: _Combination, base: _Combination | None, level: float,
                         contention: bool = True) -> None:
    """Fill ``combo.row``'s verdict against the baseline combination with
    :func:`afbench.verdict.compare_runs`: runs paired by repeat index, each run's measured
    contention, and a host calibration for one round: a job paired beside the baseline decides
    with its own experiment's (both kinds of run); a separate job, with the baseline job's and
    its own combined (:func:`afbench.verdict.combine`), none when either job had none."""
    # numpy here, scipy inside (0.8 s): a sweep's jobs never pay for them
    from afbench.verdict import compare_runs
    from afbench.verdict.calibration import RunSpread, combined_record

    row = combo.row
    row.level = level
    if row.statuses and all(s == "SKIPPED" for s in row.statuses):
        row.verdict = SKIPPED
        return
    if base is None or not base.has_result or not combo.has_result:
        row.verdict = RUN_FAILED
        if combo.has_result and base is not None:
            row.reasons = [*row.reasons, f"no baseline result: {base.row.name} has none"]
        return
    n = min(len(base.run_steps), len(combo.run_steps))
    cal = (combined_record(base.calibration, combo.calibration)  # one job's: its own
           if base.calibration and combo.calibration else None)
    speed = compare_runs(
        base.run_steps[:n], combo.run_steps[:n], confidence=level,
        contended=list(zip(base.run_contended[:n], combo.run_contended[:n])),
        keep_contended=not contention,  # report.contention=keep: balanced contention only
        contention_detail=[[d for d in pair if d]
                           for pair in zip(base.run_detail[:n], combo.run_detail[:n])],
        calibration=RunSpread.of(cal) if cal else None)
    row.speed = Speed.of(speed, calibration=cal if speed.spread_source and
                         "calibration" in speed.spread_source else None)
    row.verdict, row.gain_pct, row.method = speed.decision, speed.gain_pct, speed.method
    row.ci_low, row.ci_high = speed.ci_low_pct, speed.ci_high_pct
    row.n_pairs, row.mde_pct = speed.n_pairs, speed.mde_pct


def build_sweep_report(sweep_dir: Path, baseline: str | None = None,
                       level: float | None = None, lang: str | None = None,
                       template_dir: str | None = None) -> SweepSummary:
    """Collect every job below ``sweep_dir``, compare every combination with the baseline
    combination, rank them and write sweep_summary.json and sweep_report.md / .html (per
    ``report.formats``). Returns the :class:`afbench.store.SweepSummary`. In a language
    other than the jobs' own (``lang``), the page is ``sweep_report.<lang>.md`` / ``.html``
    and every job's report is re-rendered in it too (``<job>/report.<lang>.html``), linked
    from the page; the jobs' own reports stay.

    ``baseline`` (``"key=value,key=value"``), ``level`` (family-wise confidence) and ``lang``
    default to the ``report`` settings the jobs ran with (``report.sweep_baseline``,
    ``report.confidence``, ``report.lang``); ``template_dir`` (a user's templates, rendered
    in Jinja2's sandbox) is the caller's only, never one the jobs' files name. Each of the m
    comparisons gets the Bonferroni level ``1 - (1 - level) / m``
    (:func:`afbench.verdict.sweep_level`). Combinations are ranked by their gain over the
    baseline combination (the paired estimate the verdict gives: for a job paired beside the
    baseline, against its own baseline runs), largest first, then by the median of their
    runs' median step times; those without a valid result come last. Combinations the
    command line asked for that no job folder holds are ``never_ran``.

    Raises ConfigError naming ``report.sweep_baseline`` when no combination matches it, or
    ``report.template_dir`` when that is not a folder; OutputError, before writing anything,
    when a job folder is a symlink out of ``sweep_dir`` or sweep_summary.json is of a newer
    schema.
    """
    # pandas, scipy and Jinja2 load only once a report is written, not at Hydra start-up
    from afbench.analysis.factorial import UNTRUSTED_CV_PCT
    from afbench.verdict import sweep_level
    from afbench.config.models import ReportConfig
    from afbench.report.render import render_sweep

    sweep_dir = Path(sweep_dir).resolve()
    jobs = [inside(job, sweep_dir) for job in _job_dirs(sweep_dir)]  # no job -> /elsewhere
    SWEEP_SUMMARY_FILE.refuse_newer(sweep_dir / SWEEP_SUMMARY)
    settings = _report_settings(jobs)
    if baseline is None:
        baseline = settings.get("sweep_baseline")
    if level is None:
        level = float(settings.get("confidence", 0.95))
    report = ReportConfig.model_validate({
        **{k: v for k, v in settings.items() if k in ("lang", "formats", "template_dir")},
        **({"lang": lang} if lang else {}), **({"template_dir": template_dir} if template_dir else {})})
    all_overrides = [job_overrides(j) for j in jobs]
    keys = swept_keys(all_overrides)
    combos: list[_Combination] = []
    for job, ovs in zip(jobs, all_overrides):
        setting = {k: v for k, v in map(split_override, ovs) if k in keys}
        combos += _combinations(job, setting, keys, report.lang, report.template_dir)
    # every launch (reruns of contended runs included), and those of the baseline beside a job
    n_runs = sum(c.launched for c in combos)
    n_beside = sum(c.launched for c in combos if c.paired_base)
    # the baseline combination's runs beside each paired job's own are no row of their own
    combos = [c for c in combos if not c.paired_base]
    base = _pick_baseline(combos, keys, baseline)
    m = max(len(combos) - 1, 1)
    per_comparison = sweep_level(level, m)
    for c in combos:
        if c is base:
            c.row.level = per_comparison
            if c.has_result:
                c.row.verdict, c.row.gain_pct = "BASELINE", 0.0
            continue
        _compare_to_baseline(c, c.beside or base, per_comparison,
                             settings.get("contention", "set_aside") == "set_aside")
    rows = [c.row for c in combos]
    # by the paired gain (each row's estimate against the baseline runs it was judged on: a
    # beside-paired job's own, which drift between jobs does not move), then step time
    ranked = sorted(rows, key=lambda r: (r.verdict in (RUN_FAILED, SKIPPED), r.gain_pct is None,
                                         -(r.gain_pct or 0.0), r.median_step_s is None,
                                         r.median_step_s or 0.0))
    # what the command line asked for and no job folder holds (a sweep stopped early)
    ran = [dict(map(split_override, ovs)) for ovs in all_overrides]
    never_ran = [",".join(f"{k}={v}" for k, v in want.items())
                 for want in SweepDir(sweep_dir).asked()
                 if not any(all(same_value(r.get(k, ""), v) for k, v in want.items())
                            for r in ran)]
    summary = SweepSummary(
        sweep_dir=str(sweep_dir), jobs=len(jobs), swept_keys=keys,
        baseline=base.row.name if base else None, sweep_baseline=baseline, confidence=level,
        level=per_comparison, comparisons=len(combos) - 1 if combos else 0, combinations=ranked,
        beside=sum(r.beside_baseline for r in rows), runs=n_runs, beside_runs=n_beside,
        main_effects=main_effects(rows, keys, base.row if base else None, level),
        failed=[r.name for r in rows if r.verdict == RUN_FAILED],
        never_ran=never_ran,
        untrusted=[r.name for r in rows if r.untrusted], cv_threshold_pct=UNTRUSTED_CV_PCT,
        generated_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    SWEEP_SUMMARY_FILE.write(sweep_dir / SWEEP_SUMMARY, summary)
    frames = [c.steps for c in combos if c.steps is not None]
    render_sweep(summary, sweep_dir, report, frames, run_lang=settings.get("lang") or "en")
    return summary


def _pick_baseline(combos: list[_Combination], keys: list[str],
                   wanted: str | None) -> _Combination | None:
    """The baseline combination: the plan baseline of the job whose swept values are
    :func:`afbench.pairing.baseline_setting`'s (the rule the paired jobs ran by), over the
    values the jobs ran with in job order; the first combination when none is (a sweep whose
    baseline job is missing).

    Raises ConfigError naming ``report.sweep_baseline`` when ``wanted`` matches no combination."""
    if not combos:
        return None
    values = {k: list(dict.fromkeys(c.row.setting[k] for c in combos if k in c.row.setting))
              for k in keys}
    target = baseline_setting(values, wanted)
    want = {**dict(split_override(i) for i in (wanted or "").split(",") if "=" in i), **target}
    for c in combos:
        if c.row.is_plan_baseline and all(
                k in c.row.setting and same_value(c.row.setting[k], v) for k, v in want.items()):
            return c
    if wanted:
        from afbench.errors import ConfigError  # only on this error path

        raise ConfigError(f"report.sweep_baseline: no combination matches {wanted!r}; "
                          f"combinations: {[c.row.name for c in combos]}")
    return combos[0]


def main_effects(rows: list[SweepRow], keys: list[str], base: SweepRow | None,
                 level: float) -> list[MainEffect]:
    """Per swept key and each value other than the baseline combination's (the reference):
    the median, over the cells of the other keys (and variants), of
    ``ln(median step with the value / median step with the reference)``, as a gain in
    percent, with a sign-test interval (:func:`afbench.analysis.factorial.main_effect`).
    Each side is a median of run medians and the effect a median over cells, so one loaded
    run cannot carry a whole switch's effect; a cell with a side without a result is
    dropped and counted."""
    from afbench.analysis.factorial import MAIN_EFFECT_METHOD, main_effect  # numpy, on demand

    if base is None:
        return []
    out = []
    for key in keys:
        reference = base.setting.get(key, "")
        others = [k for k in keys if k != key]

        def others_of(r: SweepRow) -> tuple:
            return tuple(r.setting.get(k, "") for k in others)

        def same_cell(r: SweepRow, ref: SweepRow) -> bool:
            # a job that never planned has no variant name: it stands for any of its job's
            return others_of(r) == others_of(ref) and (
                r.variant == ref.variant or not r.variant or not ref.variant)

        refs = [r for r in rows if same_value(r.setting.get(key, ""), reference)]
        values = dict.fromkeys(r.setting.get(key, "") for r in rows)
        for value in values:
            if same_value(value, reference):
                continue
            ratios, dropped = [], 0
            for r in rows:
                ref = next((x for x in refs if same_cell(r, x)), None)
                if r.setting.get(key, "") != value or ref is None:
                    continue
                if r.median_step_s and ref.median_step_s:
                    ratios.append(math.log(r.median_step_s / ref.median_step_s))
                else:
                    dropped += 1
            effect = MainEffect(key=key, value=value, reference=reference, cells=len(ratios),
                                dropped=dropped, method=MAIN_EFFECT_METHOD)
            if ratios:
                e = main_effect(ratios, level)
                effect.effect_pct, effect.ci_low, effect.ci_high = (e.effect_pct, e.ci_low_pct,
                                                                    e.ci_high_pct)
                effect.coverage = e.coverage
            out.append(effect)
    return out


def verdict_lines(summary: SweepSummary) -> list[str]:
    """One line per combination, ranked: ``name: VERDICT<note>, gain +x.xx%`` (``n/a``
    without a gain), ``[untrusted]`` where its runs are; then ``name: never ran`` per
    combination asked for that no job folder holds."""
    out = []
    for c in summary.combinations:
        gain = f"{c.gain_pct:+.2f}%" if c.gain_pct is not None else "n/a"
        out.append(f"{c.name}: {c.verdict}{c.note}, gain {gain}"
                   + (" [untrusted]" if c.untrusted else ""))
    return out + [f"{name}: never ran" for name in summary.never_ran]
