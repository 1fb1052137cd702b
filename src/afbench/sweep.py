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
from afbench.messages import Message, as_written, say
from afbench.pairing import SWEEP_BASELINE, baseline_setting, same_value, split_override
from afbench.store import (
    SWEEP_SUMMARY,
    SWEEP_SUMMARY_FILE,
    Comparison,
    EffectPair,
    MainEffect,
    OutDir,
    Speed,
    SweepDir,
    SweepRow,
    SweepSummary,
)
from afbench.store.sweep import BASELINE
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


def _report_settings(jobs: list[Path], section: str = "report") -> dict[str, Any]:
    """The ``report`` (or ``verdict``) section the jobs ran with (from their experiment.json),
    so that an offline re-render keeps the sweep's own baseline, language, confidence level and
    contention policy; never its ``template_dir`` (templates come from the installed package
    or from the caller: :func:`afbench.report.render.stored_report`)."""
    for job in jobs:
        try:
            exp = OutDir(job).experiment()
        except OutputError:
            continue
        if exp.config is not None:
            return getattr(exp.config, section).model_dump(mode="json", exclude={"template_dir"})
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
    """A sweep row while it is built, with what the summary does not keep: its OK runs by
    round (repeat: step times, contention, its reasons), the per-step table, and its job's
    own comparison of it (summary.json's)."""

    row: SweepRow
    rounds: dict[int, tuple[list[float], bool, dict | None]] = field(default_factory=dict)
    steps: Any = None  # pandas DataFrame of the verdict-phase steps, or None
    calibration: dict[str, Any] | None = None  # the job's experiment.json calibration
    min_gain_pct: float | None = None  # the job's verdict.min_gain_pct
    own: Comparison | None = None  # the job's comparison of this variant with its baseline
    plan_baseline: str = ""  # the job's plan baseline variant
    # experiment.sweep_pairing=beside: the baseline combination's runs in this job
    # (variant sweep_baseline; not a row of its own) and, on the job's own row, those runs
    paired_base: bool = False
    beside: _Combination | None = None
    launched: int = 0  # runs of this variant the job launched, reruns included

    @property
    def has_result(self) -> bool:
        return self.row.ok and bool(self.rounds)


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
            build_report(
                job,
                ReportConfig.model_validate(
                    {**settings, "lang": lang, "template_dir": template_dir}
                ),
            )
        except Exception as exc:  # the sweep page still links the job's own report
            log.warning("afbench: job %s: report in %s failed: %s", job.name, lang, exc)
            name = "report.html"
    return f"{job.name}/{name}" if (job / name).is_file() else None


def _own_comparisons(job: Path, col: Any) -> list[Comparison]:
    """The job's comparisons as its report made them: its summary.json's (read through the
    store, any version); where the job has none (stopped before its report), the same
    :func:`afbench.compare.comparisons` of its runs with its own report settings."""
    from afbench.compare import comparisons

    out = OutDir(job)
    if out.summary_path.is_file():
        try:
            return out.summary().comparisons
        except OutputError as exc:
            log.warning("afbench: job %s: %s; its runs are compared again", job.name, exc)
    return comparisons(col, col.experiment.report)  # decided by col.experiment.verdict


def _combinations(
    job: Path,
    setting: dict[str, str],
    keys: list[str],
    lang: str = "en",
    template_dir: str | None = None,
) -> list[_Combination]:
    """One entry per variant of one job (one entry, failed, for a job that never planned):
    its side and its comparison with the job's baseline as the job's report has them
    (:func:`_own_comparisons`), and the runs that side counts (verdict.contention=set_aside
    leaves the contended ones out, as the report does), each reduced to its median and bursts
    (:func:`afbench.verdict.runs.run_statistic`); each links the job's report in ``lang``
    (:func:`_job_report`)."""
    # collect/compare pull in pandas and the config models: only the report needs them
    from afbench.analysis.factorial import UNTRUSTED_CV_PCT, outlier_runs
    from afbench.collect import collect
    from afbench.compare import contention_reason, run_ids, side, workload_of
    from afbench.verdict.runs import run_statistic

    name = ",".join(f"{k}={setting.get(k, '')}" for k in keys) or job.name
    if not (job / "plan.json").is_file():
        why = job_failure_reason(job)
        return [
            _Combination(
                SweepRow(
                    name=name,
                    job=job.name,
                    setting=setting,
                    reasons=[why.text],
                    reason_msgs=[why],
                    is_plan_baseline=True,
                    status=RUN_FAILED,
                )
            )
        ]
    col = collect(job)
    runs = col.runs.set_index("run_id")
    phase = col.plan.verdict_phase
    workload = workload_of(col)
    report = _job_report(job, lang, template_dir)
    paired = col.plan.baseline == SWEEP_BASELINE
    own = [v for v in col.plan.variants if not (paired and v == SWEEP_BASELINE)]
    set_aside = col.experiment.verdict.contention == "set_aside"
    comps = {c.variant.name: c for c in _own_comparisons(job, col)}
    out = []
    for variant in col.plan.variants:
        ids = run_ids(col, variant, phase)
        comp = comps.get(variant)
        of_base = next(iter(comps.values())).baseline if comps else None
        v = (
            comp.variant
            if comp
            else of_base
            if variant == col.plan.baseline and of_base
            else side(col, variant, phase, workload, set_aside)
        )
        sel = runs.loc[ids]
        row = SweepRow(
            name=name + (f" [{variant}]" if len(own) > 1 else ""),
            job=job.name,
            # a paired job's own variant stands for the job's one combination
            variant="" if paired else variant,
            setting=setting,
            side=v,
            # every run's note, resumed ones included, without the run id
            reasons=[r for r in sel.reason.tolist() + sel.log_error.tolist() if r],
            reason_msgs=[col.reasons[i] for i in ids if i in col.reasons]
            + [as_written(e) for e in sel.log_error.tolist() if e],
            is_plan_baseline=variant == col.plan.baseline,
            report=report,
        )
        combo = _Combination(
            row,
            calibration=col.experiment.calibration_dict(),
            min_gain_pct=col.experiment.verdict.min_gain_pct,
            own=comp,
            plan_baseline=col.plan.baseline,
            paired_base=paired and variant == SWEEP_BASELINE,
            launched=sum(r.variant == variant for r in col.plan.runs)
            + sum(r.replaced.variant == variant for r in col.plan.reruns),
        )
        medians = []
        for rid in ids:
            window = col.spec(rid).config.scheduler.measure
            row.window = [window.first_step, window.last_step]
            # collect's strict parse of the window; an invalid log is in log_error already
            steps = col.window_steps.get(rid)
            if sel.at[rid, "status"] != "OK" or sel.at[rid, "log_error"] or not steps:
                continue
            contended, detail = contention_reason(col.results.get(rid), rid)
            if contended:
                row.contended_runs.append(rid)
            combo.rounds[col.spec(rid).repeat] = (
                steps,
                contended,
                detail.model_dump() if detail else None,
            )
            if contended and set_aside:
                continue  # the side and the verdict leave it out: so do the row's medians
            stat = run_statistic(steps, rid)
            medians.append((rid, stat.location_s))
            row.n_bursts += stat.n_bursts
            row.n_steps += stat.n_steps
        row.run_medians_s = [m for _, m in medians]
        if row.run_medians_s:
            row.median_step_s = float(statistics.median(row.run_medians_s))
        row.outlier_runs = [medians[i][0] for i in outlier_runs(row.run_medians_s)]
        # contended runs make a combination untrusted unless the jobs keep them
        # (verdict.contention=keep): then they are shown, not held against it
        row.untrusted = (
            bool(row.outlier_runs)
            or (set_aside and bool(row.contended_runs))
            or (v.step_cv_pct is not None and v.step_cv_pct > UNTRUSTED_CV_PCT)
        )
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


def _verdict(
    combo: _Combination, base: _Combination | None, level: float, contention: bool = True
) -> None:
    """Fill ``combo.row``'s verdict against the baseline combination: the job's own comparison
    as it is (``from_job``) where the job compared it with the baseline combination's runs (a
    job paired beside the baseline, a variant of the baseline job); else
    :func:`afbench.verdict.compare_runs` of the baseline job's runs and this job's, paired by
    round (a round missing on either side is left out), with each run's contention, the job's
    ``verdict.min_gain_pct``, and both jobs' host calibrations combined (none if either lacks)."""
    row = combo.row
    own = combo.own
    in_job = combo.beside is not None or (
        base is not None and base.row.job == row.job and base.row.variant == combo.plan_baseline
    )
    if own is not None and in_job:
        row.speed, row.from_job = own.speed, True
        if own.verdict in (RUN_FAILED, SKIPPED):
            row.status = own.verdict
        return
    if row.side is not None and row.side.skipped:
        row.status = SKIPPED
        return
    if base is None or not base.has_result or not combo.has_result:
        row.status = RUN_FAILED
        if combo.has_result and base is not None:
            why = say("sweep_no_baseline_result", name=base.row.name)
            row.reasons = [*row.reasons, why.text]
            row.reason_msgs = [*row.reason_msgs, why]
        return
    # numpy here, scipy inside (0.8 s): a sweep's jobs never pay for them
    from afbench.verdict import DEFAULT_MIN_GAIN_PCT, compare_runs
    from afbench.verdict.calibration import RunSpread, combined_record

    rounds = sorted(set(base.rounds) & set(combo.rounds))
    b, v = [base.rounds[r] for r in rounds], [combo.rounds[r] for r in rounds]
    cal = (
        combined_record(base.calibration, combo.calibration)
        if base.calibration and combo.calibration
        else None
    )
    speed = compare_runs(
        [x[0] for x in b],
        [x[0] for x in v],
        confidence=level,
        min_gain_pct=combo.min_gain_pct or DEFAULT_MIN_GAIN_PCT,
        contended=[(x[1], y[1]) for x, y in zip(b, v)],
        keep_contended=not contention,  # verdict.contention=keep: balanced contention only
        contention_detail=[[d for d in (x[2], y[2]) if d] for x, y in zip(b, v)],
        calibration=RunSpread.of(cal) if cal else None,
    )
    row.speed = Speed.of(
        speed,
        calibration=cal if speed.spread_source and "calibration" in speed.spread_source else None,
    )


def build_sweep_report(
    sweep_dir: Path,
    baseline: str | None = None,
    level: float | None = None,
    lang: str | None = None,
    template_dir: str | None = None,
) -> SweepSummary:
    """Collect every job below ``sweep_dir``, compare every combination with the baseline
    combination, rank them and write sweep_summary.json and sweep_report.md / .html (per
    ``report.formats``). Returns the :class:`afbench.store.SweepSummary`. In a language
    other than the jobs' own (``lang``), the page is ``sweep_report.<lang>.md`` / ``.html``
    and every job's report is re-rendered in it too (``<job>/report.<lang>.html``), linked
    from the page; the jobs' own reports stay.

    ``baseline`` (``"key=value,key=value"``), ``level`` (family-wise confidence) and ``lang``
    default to the settings the jobs ran with (``report.sweep_baseline``,
    ``verdict.confidence``, ``report.lang``); ``template_dir`` (a user's templates, rendered
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
    from afbench.config.models import ReportConfig
    from afbench.report.render import render_sweep
    from afbench.verdict import sweep_level

    sweep_dir = Path(sweep_dir).resolve()
    jobs = [inside(job, sweep_dir) for job in _job_dirs(sweep_dir)]  # no job -> /elsewhere
    SWEEP_SUMMARY_FILE.refuse_newer(sweep_dir / SWEEP_SUMMARY)
    settings = _report_settings(jobs)
    decide = _report_settings(jobs, "verdict")
    if baseline is None:
        baseline = settings.get("sweep_baseline")
    if level is None:  # the sweep's own: its jobs decide at the per-comparison level
        level = float(
            SweepDir(sweep_dir)
            .sweep_verdict_settings()
            .get("confidence", decide.get("confidence", 0.95))
        )
    report = ReportConfig.model_validate(
        {
            **{k: v for k, v in settings.items() if k in ("lang", "formats", "template_dir")},
            **({"lang": lang} if lang else {}),
            **({"template_dir": template_dir} if template_dir else {}),
        }
    )
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
            c.row.status = BASELINE if c.has_result else c.row.status or RUN_FAILED
            continue
        _verdict(
            c,
            c.beside or base,
            per_comparison,
            decide.get("contention", "set_aside") == "set_aside",
        )
    rows = [c.row for c in combos]
    # by the paired gain (each row's estimate against the baseline runs it was judged on: a
    # beside-paired job's own, which drift between jobs does not move), then step time
    ranked = sorted(
        rows,
        key=lambda r: (
            r.verdict in (RUN_FAILED, SKIPPED),
            r.gain_pct is None,
            -(r.gain_pct or 0.0),
            r.median_step_s is None,
            r.median_step_s or 0.0,
        ),
    )
    # what the command line asked for and no job folder holds (a sweep stopped early)
    ran = [dict(map(split_override, ovs)) for ovs in all_overrides]
    never_ran = [
        ",".join(f"{k}={v}" for k, v in want.items())
        for want in SweepDir(sweep_dir).asked()
        if not any(all(same_value(r.get(k, ""), v) for k, v in want.items()) for r in ran)
    ]
    summary = SweepSummary(
        sweep_dir=str(sweep_dir),
        jobs=len(jobs),
        swept_keys=keys,
        baseline=base.row.name if base else None,
        sweep_baseline=baseline,
        confidence=level,
        level=per_comparison,
        comparisons=len(combos) - 1 if combos else 0,
        combinations=ranked,
        beside=sum(r.beside_baseline for r in rows),
        runs=n_runs,
        beside_runs=n_beside,
        main_effects=main_effects(
            rows, keys, base.row if base else None, level, decide.get("min_gain_pct")
        ),
        failed=[r.name for r in rows if r.verdict == RUN_FAILED],
        never_ran=never_ran,
        untrusted=[r.name for r in rows if r.untrusted],
        cv_threshold_pct=UNTRUSTED_CV_PCT,
        generated_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    SWEEP_SUMMARY_FILE.write(sweep_dir / SWEEP_SUMMARY, summary)
    frames = [c.steps for c in combos if c.steps is not None]
    render_sweep(summary, sweep_dir, report, frames, run_lang=settings.get("lang") or "en")
    return summary


def _pick_baseline(
    combos: list[_Combination], keys: list[str], wanted: str | None
) -> _Combination | None:
    """The baseline combination: the plan baseline of the job whose swept values are
    :func:`afbench.pairing.baseline_setting`'s (the rule the paired jobs ran by), over the
    values the jobs ran with in job order; the first combination when none is (a sweep whose
    baseline job is missing).

    Raises ConfigError naming ``report.sweep_baseline`` when ``wanted`` matches no combination."""
    if not combos:
        return None
    values = {
        k: list(dict.fromkeys(c.row.setting[k] for c in combos if k in c.row.setting)) for k in keys
    }
    target = baseline_setting(values, wanted)
    want = {**dict(split_override(i) for i in (wanted or "").split(",") if "=" in i), **target}
    for c in combos:
        if c.row.is_plan_baseline and all(
            k in c.row.setting and same_value(c.row.setting[k], v) for k, v in want.items()
        ):
            return c
    if wanted:
        from afbench.errors import ConfigError  # only on this error path

        raise ConfigError(
            f"report.sweep_baseline: no combination matches {wanted!r}; "
            f"combinations: {[c.row.name for c in combos]}"
        )
    return combos[0]


def main_effects(
    rows: list[SweepRow],
    keys: list[str],
    base: SweepRow | None,
    level: float,
    min_gain_pct: float | None = None,
) -> list[MainEffect]:
    """Per swept key and each value other than the baseline combination's (the reference):
    the factorial contrast of the rows' paired gains against the baseline combination (each
    row's ``speed``: for a job paired beside the baseline, its own time-paired pairs), the
    family Holm-adjusted at ``level`` (:mod:`afbench.verdict.effects`), with the rows it rests
    on. A cell whose row has no interval (no result, one pair without a calibration) is
    dropped and counted; a value without a cell has no effect."""
    from afbench.verdict import DEFAULT_MIN_GAIN_PCT  # numpy, scipy on demand
    from afbench.verdict.effects import PairedGain, factorial_contrasts
    from afbench.verdict.effects import main_effects as holm_effects

    if base is None:
        return []

    def cell(r: SweepRow) -> dict[str, str]:  # a recipe's variants are cells of their own
        return {**r.setting, "\0variant": r.variant if r.name.endswith(f" [{r.variant}]") else ""}

    cells = [cell(r) for r in rows]
    gains = [PairedGain.of(r.name, r.speed) if r.status is None else None for r in rows]
    found = factorial_contrasts(cells, gains, keys, cell(base))
    done = holm_effects(
        [c for _, _, c, _ in found if c is not None], level, min_gain_pct or DEFAULT_MIN_GAIN_PCT
    )
    by_name = {r.name: r for r in rows}
    out = []
    for key, value, contrast, dropped in found:
        effect = MainEffect(
            key=key, value=value, reference=base.setting.get(key, ""), dropped=dropped, cells=0
        )
        if contrast is not None:
            e = done.pop(0)
            effect = effect.model_copy(
                update=dict(
                    effect_pct=e.gain_pct,
                    ci_low=e.ci_low_pct,
                    ci_high=e.ci_high_pct,
                    level=e.level,
                    decision=e.decision,
                    p_value=e.p_value,
                    p_holm=e.p_holm,
                    df=e.df if math.isfinite(e.df) else None,
                    family=e.family,
                    method=e.method,
                    cells=len({g.name for w, g in e.terms if w > 0}),
                    pairs=[
                        EffectPair(
                            combination=g.name,
                            job=by_name[g.name].job,
                            weight=w,
                            n_pairs=g.n_pairs,
                            beside=by_name[g.name].beside_baseline or by_name[g.name].from_job,
                        )
                        for w, g in e.terms
                    ],
                )
            )
        out.append(effect)
    return out


def verdict_lines(
    summary: SweepSummary, lang: str = "en", template_dir: str | None = None
) -> list[str]:
    """One line per combination, ranked, in the shape of an experiment's headline
    (templates/verdict_words.j2 ``sweep_headline``: ``name vs baseline  VERDICT  +x.x%
    [lo, hi]  N rounds``, the interval at the sweep's per-comparison level, ``untrusted ⚠``
    where its runs are), in ``lang``; then ``name: never ran`` per combination asked for that
    no job folder holds."""
    from afbench.report.render import labels, verdict_words  # jinja2: the report's own words

    words = verdict_words(lang, template_dir)
    never = labels(lang)["h_never_ran"]
    return [str(words.sweep_headline(c, summary.baseline)) for c in summary.combinations] + [
        never.format(name=name) for name in summary.never_ran
    ]
