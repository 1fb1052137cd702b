"""Hydra's side of a sweep (``python -m afbench -m ...``): the callback that shows progress
with an ETA per job, builds the sweep report (:func:`afbench.sweep.build_sweep_report`) when
the sweep ends, and gives the sweep its exit status. conf/config.yaml registers it
(``hydra.callbacks.afbench_sweep``); it works with any launcher, since it reads only files."""

from __future__ import annotations

import logging
import math
import sys
import time
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from afbench.store import SWEEP_SUMMARY, SWEEP_SUMMARY_FILE, basic_sweep
from afbench.sweep import build_sweep_report, verdict_lines

log = logging.getLogger("afbench.sweep")


def _count_jobs(hydra: Any) -> int | None:
    """Number of jobs the sweep makes: the product of the swept value lists Hydra's basic
    sweeper expands (:func:`afbench.store.basic_sweep`: a recipe's ``hydra.sweeper.params``
    too); None for another sweeper (no ETA then, nothing else changes)."""
    swept = basic_sweep(hydra)
    return None if swept is None else math.prod(len(v) for v in swept.values())


class SweepCallback(Callback):
    """Hydra callback: progress with ETA per job, the sweep report at the end, and the sweep's
    exit status: 1 (SystemExit, which Hydra's callback runner lets through) when a job failed
    by :func:`failed_jobs` or the sweep report could not be written."""

    def __init__(self) -> None:
        self.t0 = 0.0
        self.done = 0
        self.total: int | None = None
        self.multirun = False  # Hydra calls on_job_end for single runs too

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.t0 = time.perf_counter()
        self.multirun = True
        self.total = _count_jobs(config.hydra)
        log.info("afbench: sweep of %s jobs -> %s", self.total or "?", config.hydra.sweep.dir)

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        if not self.multirun:
            return
        self.done += 1
        elapsed = time.perf_counter() - self.t0
        eta = ""
        if self.total and self.done > self.total:  # the count was wrong: no count, no ETA
            self.total = None
        if self.total:
            left = (elapsed / self.done) * (self.total - self.done)
            eta = f", ETA {left / 60:.1f} min"
        log.info(
            "afbench: sweep job %d/%s done (%.1f min elapsed%s)",
            self.done,
            self.total or "?",
            elapsed / 60,
            eta,
        )

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        report = config.get("report", {})
        try:
            confidence = report.get("confidence")
            summary = build_sweep_report(
                sweep_dir,
                report.get("sweep_baseline"),
                float(confidence) if confidence is not None else None,
                report.get("lang"),
                report.get("template_dir"),
            )
        except Exception as exc:  # the jobs' own reports stay; say why the sweep one is missing
            log.error("afbench: sweep report failed: %s", exc)
            raise SystemExit(1) from None
        log.info("afbench: sweep report %s", sweep_dir / "sweep_report.md")
        for line in verdict_lines(summary, report.get("lang") or "en", report.get("template_dir")):
            log.info("  %s", line)
        failed = failed_jobs(sweep_dir)
        if failed:  # the sweep's exit status, whatever launcher ran the jobs
            # stderr as the errors before it; Hydra's own logging of the sweep goes to stdout
            print(
                f"afbench: {len(failed)} sweep job(s) had failures: " + "; ".join(failed),
                file=sys.stderr,
            )
            raise SystemExit(1)


def failed_jobs(sweep_dir: Path) -> list[str]:
    """``job <n> (<combination>)`` of every combination in ``sweep_dir/sweep_summary.json``
    that did not succeed, by run_experiment's rule: a FAILED run, or a run never started or
    a job stopped before planning (its exit status was 2 or 3)."""
    summary = SWEEP_SUMMARY_FILE.read(Path(sweep_dir) / SWEEP_SUMMARY)
    return [
        f"job {c.job} ({c.name})"
        for c in summary.combinations
        if not c.statuses or {"FAILED", "NOT_RUN"} & set(c.statuses)
    ]
