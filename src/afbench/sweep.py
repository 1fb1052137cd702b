"""Sweeps (``python -m afbench -m key=a,b ...``): progress across jobs, and one sweep report
ranking every combination against a baseline combination when the sweep ends.

Each Hydra job is an ordinary afbench experiment in ``<sweep dir>/<job num>/``. A
*combination* is one (job, variant) pair: with the default experiment (one variant) that is one
job; with a recipe of several variants every variant of every job counts. Works with any Hydra
launcher: the report reads only files.
"""

from __future__ import annotations

import itertools
import logging
import time
from pathlib import Path
from typing import Any

import yaml
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from afbench.analysis.verdict import RUN_FAILED
from afbench.io import write_json_atomic, write_text_atomic
from afbench.results import SCHEMA_VERSION

log = logging.getLogger(__name__)
# Set by jobs that failed (same process with the basic launcher); read by afbench.cli.main.
FAILED_JOBS: list[str] = []


def job_overrides(job_dir: Path) -> list[str]:
    """The job's command-line overrides, from Hydra's ``.hydra/overrides.yaml``."""
    path = job_dir / ".hydra" / "overrides.yaml"
    return list(yaml.safe_load(path.read_text()) or []) if path.is_file() else []


def split_override(override: str) -> tuple[str, str]:
    """``"+a.b=c"`` -> ``("a.b", "c")``: the key without Hydra's ``+``/``++`` add prefix, so
    ``report.sweep_baseline`` names a key the same way whether it was added or overridden."""
    key, _, value = override.partition("=")
    return key.lstrip("+"), value


def same_value(a: str, b: str) -> bool:
    """Equal as override values. Hydra writes a swept ``false`` back as ``False`` (and
    ``0.10`` as ``0.1``), so compare the YAML values, of the same type (``1`` is not ``true``),
    falling back to the text."""
    def load(text: str) -> Any:
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError:
            return text

    x, y = load(a), load(b)
    return a == b or (type(x) is type(y) and x == y)


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


def _is_off(value: str) -> bool:
    return value.strip().lower() in ("false", "0", "off", "no", "null", "none")


def _job_dirs(sweep_dir: Path) -> list[Path]:
    """Hydra job folders of a sweep, in job order: every folder with a plan.json, and every
    folder with Hydra's record but no plan.json (a job stopped before it planned: config or
    preflight error), which the report must still show."""
    found = {p.parent for p in sweep_dir.glob("*/plan.json")}
    found |= {p.parent.parent for p in sweep_dir.glob("*/.hydra/overrides.yaml")}
    return sorted(found, key=lambda p: (len(p.name), p.name))


def _report_settings(jobs: list[Path]) -> dict[str, Any]:
    """The ``report`` section the jobs ran with (from their experiment.json), so that an
    offline re-render keeps the sweep's own baseline and confidence level."""
    from afbench.io import read_json

    for job in jobs:
        path = job / "experiment.json"
        if path.is_file():
            try:
                return dict(read_json(path).get("config", {}).get("report", {}) or {})
            except (OSError, ValueError):
                continue
    return {}


def _combinations(job: Path, setting: dict[str, str], keys: list[str]) -> list[dict[str, Any]]:
    """One entry per variant of one job (one entry, failed, for a job that never planned),
    from the variant's :class:`afbench.results.Side` on the verdict phase."""
    from afbench.analysis.stats import finite_mean
    from afbench.collect import collect
    from afbench.compare import side, workload_of

    name = ",".join(f"{k}={setting.get(k, '')}" for k in keys) or job.name
    if not (job / "plan.json").is_file():
        return [{"name": name, "job": job.name, "variant": "", "setting": setting, "ok": False,
                 "statuses": [], "per_repeat_s": [], "mean_step_s": None, "tokens_per_s": None,
                 "reasons": ["job stopped before its first run (no plan.json): a config or "
                             "preflight error, printed on the sweep's console"],
                 "is_plan_baseline": True}]
    col = collect(job)
    runs = col.runs
    out = []
    workload = workload_of(col)
    for variant in col.plan.variants:
        sel = runs[(runs.variant == variant) & (runs.phase == col.plan.verdict_phase)]
        v = side(col, variant, col.plan.verdict_phase, workload)
        out.append({"name": name + (f" [{variant}]" if len(col.plan.variants) > 1 else ""),
                    "job": job.name, "variant": variant, "setting": setting,
                    "ok": v.ok, "statuses": v.statuses, "per_repeat_s": v.repeats_s,
                    # unlike a comparison's side, a sweep ranks by the repeats that did finish
                    "mean_step_s": finite_mean(v.repeats_s),
                    "tokens_per_s": v.tokens_per_s if v.ok else None,
                    # every run's note, resumed ones included, without the run id
                    "reasons": [r for r in sel.reason.tolist() + sel.log_error.tolist() if r],
                    "is_plan_baseline": variant == col.plan.baseline})
    return out


def build_sweep_report(sweep_dir: Path, baseline: str | None = None,
                       level: float | None = None) -> dict[str, Any]:
    """Collect every job below ``sweep_dir``, rank the combinations and write
    sweep_summary.json, sweep_report.md and sweep_report.html. Returns the summary.

    ``baseline`` (``"key=value,key=value"``) and ``level`` default to the ``report`` settings
    the jobs ran with (``report.sweep_baseline``, ``report.confidence``). Combinations are
    ranked by mean step time, fastest first; those without a valid result come last.

    Raises ConfigError naming ``report.sweep_baseline`` when no combination matches it.
    """
    from afbench.compare import decide
    from afbench.report.render import environment, labels

    sweep_dir = Path(sweep_dir).resolve()
    jobs = _job_dirs(sweep_dir)
    settings = _report_settings(jobs)
    if baseline is None:
        baseline = settings.get("sweep_baseline")
    if level is None:
        level = float(settings.get("confidence", 0.95))
    all_overrides = [job_overrides(j) for j in jobs]
    keys = swept_keys(all_overrides)
    combos = []
    for job, ovs in zip(jobs, all_overrides):
        setting = {k: v for k, v in map(split_override, ovs) if k in keys}
        combos += _combinations(job, setting, keys)
    base = _pick_baseline(combos, keys, baseline)
    for c in combos:
        if c is base:
            c.update(verdict="BASELINE", gain_pct=0.0, ci_low=None, ci_high=None, note="")
            continue
        verdict, speed = decide("variant", base["per_repeat_s"] if base else [],
                                c["per_repeat_s"], failed=not (c["ok"] and base and base["ok"]),
                                skipped=False, level=level)
        c.update(verdict=verdict.replace("VARIANT_FASTER", "FASTER"), gain_pct=speed.gain_pct,
                 ci_low=speed.ci_low, ci_high=speed.ci_high, note=speed.note)
    ranked = sorted(combos, key=lambda c: (c["verdict"] == RUN_FAILED, c["mean_step_s"] is None,
                                           c["mean_step_s"] or 0.0))
    effects = main_effects(combos, keys)
    summary = {"schema_version": SCHEMA_VERSION,
               "sweep_dir": str(sweep_dir), "jobs": len(jobs), "swept_keys": keys,
               "baseline": base["name"] if base else None, "sweep_baseline": baseline,
               "confidence": level, "combinations": ranked, "main_effects": effects,
               "failed": [c["name"] for c in combos if c["verdict"] == RUN_FAILED]}
    write_json_atomic(sweep_dir / "sweep_summary.json", summary)
    env = environment(None)
    for fmt in ("md", "html"):
        text = env.get_template(f"sweep.{fmt}.j2").render(s=summary, L=labels("en"))
        write_text_atomic(sweep_dir / f"sweep_report.{fmt}", text)
    return summary


def _pick_baseline(combos: list[dict], keys: list[str], wanted: str | None) -> dict | None:
    if not combos:
        return None
    if wanted:
        want = dict(split_override(item) for item in wanted.split(",") if "=" in item)
        for c in combos:
            if c["is_plan_baseline"] and all(k in c["setting"] and same_value(c["setting"][k], v)
                                             for k, v in want.items()):
                return c
        from afbench.errors import ConfigError

        raise ConfigError(f"report.sweep_baseline: no combination matches {wanted!r}; "
                          f"combinations: {[c['name'] for c in combos]}")
    for c in combos:
        if c["is_plan_baseline"] and all(_is_off(c["setting"].get(k, "false")) for k in keys):
            return c
    return combos[0]


def main_effects(combos: list[dict], keys: list[str]) -> list[dict[str, Any]]:
    """Per swept key and value: mean gain (%) of the combinations with that value minus the
    mean gain of all combinations (a two-level factorial's main effect, halved)."""
    valid = [c for c in combos if c.get("gain_pct") is not None]
    if not valid:
        return []
    from afbench.analysis.stats import finite_mean

    overall = finite_mean(c["gain_pct"] for c in valid)
    out = []
    for key in keys:
        for value in sorted({c["setting"].get(key, "") for c in valid}):
            group = [c["gain_pct"] for c in valid if c["setting"].get(key, "") == value]
            mean = finite_mean(group)
            out.append({"key": key, "value": value, "combinations": len(group),
                        "mean_gain_pct": mean, "effect_pct": mean - overall})
    return out


def _count_jobs(task_overrides: list[str]) -> int | None:
    """Number of jobs a basic sweep of these overrides makes (None if not computable)."""
    try:
        from hydra.core.override_parser.overrides_parser import OverridesParser

        parsed = OverridesParser.create().parse_overrides(task_overrides)
        sizes = [len(list(o.sweep_iterator())) if o.is_sweep_override() else 1 for o in parsed]
        return int(list(itertools.accumulate(sizes, lambda a, b: a * b))[-1]) if sizes else 1
    except Exception:  # a sweeper with its own syntax: no ETA, nothing else changes
        return None


class SweepCallback(Callback):
    """Hydra callback: progress with ETA per job, the sweep report at the end."""

    def __init__(self) -> None:
        self.t0 = 0.0
        self.done = 0
        self.total: int | None = None
        self.multirun = False  # Hydra calls on_job_end for single runs too

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.t0 = time.perf_counter()
        self.multirun = True
        self.total = _count_jobs(list(config.hydra.overrides.task))
        log.info("afbench: sweep of %s jobs -> %s", self.total or "?", config.hydra.sweep.dir)

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        if not self.multirun:
            return
        self.done += 1
        elapsed = time.perf_counter() - self.t0
        eta = ""
        if self.total:
            left = (elapsed / self.done) * (self.total - self.done)
            eta = f", ETA {left / 60:.1f} min"
        log.info("afbench: sweep job %d/%s done (%.1f min elapsed%s)", self.done,
                 self.total or "?", elapsed / 60, eta)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        report = config.get("report", {})
        try:
            confidence = report.get("confidence")
            summary = build_sweep_report(sweep_dir, report.get("sweep_baseline"),
                                         float(confidence) if confidence is not None else None)
        except Exception as exc:  # the jobs' own reports stay; say why the sweep one is missing
            log.error("afbench: sweep report failed: %s", exc)
            FAILED_JOBS.append("sweep report")
            return
        if not FAILED_JOBS:
            # A launcher that runs jobs in their own processes (submitit) leaves FAILED_JOBS of
            # this process empty: take the failures from the files, by run_experiment's rule
            # (a FAILED run; a run never started or a job stopped before planning: exit 2/3).
            FAILED_JOBS.extend(f"job {c['job']} ({c['name']})" for c in summary["combinations"]
                               if not c["statuses"]
                               or {"FAILED", "NOT_RUN"} & set(c["statuses"]))
        log.info("afbench: sweep report %s", sweep_dir / "sweep_report.md")
        for c in summary["combinations"]:
            gain = f"{c['gain_pct']:+.2f}%" if c.get("gain_pct") is not None else "n/a"
            log.info("  %s: %s%s, gain %s", c["name"], c["verdict"], c.get("note", ""), gain)
