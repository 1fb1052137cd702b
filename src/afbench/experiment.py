"""Run an experiment: preflight, plan, launch every run serially, collect, compare, render."""

from __future__ import annotations

import hashlib
import logging
import shutil
from datetime import datetime, timezone
from pathlib import Path

from afbench.analysis.steplog import DEFAULT_STEP_PATTERN, read_step_times
from afbench.assets.manifest import sha256_file
from afbench.config.models import AfbenchConfig
from afbench.errors import ConfigError, PreflightError
from afbench.io import read_json, write_json_atomic, write_text_atomic
from afbench.launch.local import launch_run, write_skipped
from afbench.logs import console
from afbench.plan import make_plan, skip_reason
from afbench.preflight import run_preflight
from afbench.runspec import Plan, RunSpec, RunStatus

log = logging.getLogger(__name__)


def content_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes, or of a folder's files (sorted relative paths, each file's
    sha256 and path hashed together); independent of where the folder lies."""
    path = Path(path)
    if path.is_file():
        return sha256_file(path)
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        h.update(f"{sha256_file(f)}  {f.relative_to(path).as_posix()}\n".encode())
    return h.hexdigest()


def preflight(conf: AfbenchConfig, out_dir: Path, show_all: bool = False) -> list:
    """Run the preflight checks (afbench.preflight); log FAIL lines (all lines with
    ``show_all``) and raise PreflightError if any failed."""

    checks = run_preflight(conf, out_dir, min_free_gib=conf.preflight.min_free_gib,
                           min_cann_date=conf.preflight.min_cann_date)
    for check in checks:
        if show_all or not check.ok:
            log.log(logging.INFO if check.ok else logging.ERROR, "%s", check.line())
    failed = [c for c in checks if not c.ok]
    if failed:  # the FAIL lines are printed above; the error names the count and the fix
        raise PreflightError(f"preflight: {len(failed)} check(s) failed (the [FAIL] lines above "
                             "say what to do); nothing was run")
    if not show_all:
        log.info("afbench: preflight: %d checks passed", len(checks))
    return checks


def input_hashes(conf: AfbenchConfig) -> dict[str, dict[str, str]]:
    """Content SHA-256 of the model folder and the data file, for the report."""
    model, data = Path(conf.model.path), Path(conf.data.path)
    return {"model": {"path": str(model), "sha256": content_sha256(model)},
            "data": {"path": str(data), "sha256": content_sha256(data)}}


def _progress(i: int, n: int, run_id: str, status: RunStatus) -> None:
    reason = f"  ({status.reason})" if status.reason else ""
    log.info("[%d/%d] %-28s %-7s %7.1fs%s", i, n, run_id, status.status, status.wall_s, reason)


def _window_parses(run_dir: Path, config_hash: str) -> bool:
    """Whether ``run_dir``'s runspec.json has ``config_hash`` and its log's measured window
    passes the strict parse that collect applies. A run that fails it is reported RUN_FAILED,
    so resume must run it again rather than copy it."""
    try:
        spec = RunSpec.model_validate_json((run_dir / "runspec.json").read_text(encoding="utf-8"))
        if spec.config_hash != config_hash:
            return False
        window = spec.config.scheduler.measure
        # null (and engines without the key) mean the reference's step line
        pattern = getattr(spec.config.engine, "step_pattern", None) or DEFAULT_STEP_PATTERN
        read_step_times(run_dir / "stdout.log", window.first_step, window.last_step, pattern)
    except (OSError, ValueError):  # InvalidLog and pydantic's ValidationError are ValueErrors
        return False
    return True


def resume_index(root: Path) -> dict[str, Path]:
    """config_hash -> run directory of every finished run below ``root``: status OK, a
    result.json, and a measured window that parses strictly. Failed, skipped, interrupted or
    invalid-log runs are left out, so they run again.

    Raises ConfigError naming ``resume`` when ``root`` is not a directory."""
    root = Path(root)
    if not root.is_dir():
        raise ConfigError(f"resume: {root} is not a directory; give an earlier afbench output "
                          "or sweep directory")
    index: dict[str, Path] = {}
    for status_path in sorted(root.rglob("runs/*/status.json")):
        run_dir = status_path.parent
        try:
            status = read_json(status_path)
        except (OSError, ValueError):
            continue
        digest = status.get("config_hash", "")
        if (digest and digest not in index and status.get("status") == "OK"
                and (run_dir / "result.json").is_file() and _window_parses(run_dir, digest)):
            index[digest] = run_dir
    return index


def reuse_run(spec: RunSpec, source: Path) -> RunStatus:
    """Copy a finished run (same config hash) into this experiment instead of running it."""
    run_dir = Path(spec.run_dir)
    shutil.copytree(source, run_dir, ignore=shutil.ignore_patterns("cache", "tmp"))
    write_text_atomic(run_dir / "runspec.json", spec.model_dump_json(indent=2))
    old = read_json(run_dir / "status.json")
    status = RunStatus.model_validate({**old, "run_id": spec.run_id,
                                       "reason": f"resumed from {source}"})
    write_json_atomic(run_dir / "status.json", status.model_dump())
    return status


def execute_plan(plan: Plan, resume: dict[str, Path] | None = None) -> dict[str, str]:
    """Run (or skip, or reuse from ``resume``) every RunSpec in order; returns run_id -> status.

    On KeyboardInterrupt the current worker's process group is stopped (by the launcher), the
    remaining runs are recorded as SKIPPED "interrupted", and the interrupt is re-raised.
    """
    statuses: dict[str, str] = {}
    n = len(plan.runs)
    spent, launched = 0.0, 0
    for i, run in enumerate(plan.runs, 1):
        reason = skip_reason(plan, run, statuses)
        try:
            if reason:
                st = write_skipped(run, reason)
            elif resume and run.config_hash in resume:
                st = reuse_run(run, resume[run.config_hash])
            else:
                # the live spinner shares the log handler's console, so lines print above it
                with console.status(f"[{i}/{n}] {run.run_id} running"):
                    st = launch_run(run)
        except KeyboardInterrupt:
            statuses[run.run_id] = "FAILED"
            for rest in plan.runs[i:]:
                write_skipped(rest, "interrupted (SIGINT/SIGTERM to afbench)")
            raise
        statuses[run.run_id] = st.status
        _progress(i, n, run.run_id, st)
        if not reason:
            spent += st.wall_s if not st.reason.startswith("resumed") else 0.0
            launched += 0 if st.reason.startswith("resumed") else 1
            if launched and i < n:
                log.info("      ETA %.1f min for %d more run(s)", spent / launched * (n - i) / 60,
                         n - i)
    return statuses


def run_experiment(conf: AfbenchConfig, out_dir: Path, job_num: int | None = None) -> int:
    """Plan, launch, collect, compare and render into ``out_dir``; returns the exit code
    (0 all runs OK or SKIPPED by a backend, 1 if any run FAILED)."""
    from afbench.report import build_report  # pandas, jinja2, matplotlib: not for task=check

    out_dir = Path(out_dir)
    if (out_dir / "plan.json").exists():
        raise ConfigError(f"{out_dir} already holds an experiment; an output directory is never reused")
    plan = make_plan(conf, out_dir, job_num)
    resume = resume_index(Path(conf.resume)) if conf.resume else None
    if resume is not None:
        hits = sum(r.config_hash in resume for r in plan.runs)
        log.info("afbench: resume: %d of %d runs have an OK result in %s%s", hits,
                 len(plan.runs), conf.resume,
                 "" if hits else " (nothing to reuse: every run runs)")
    preflight(conf, out_dir)
    assets = input_hashes(conf)
    write_json_atomic(out_dir / "experiment.json", {
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "config": conf.model_dump(mode="json"),
        "assets": assets,
    })
    write_json_atomic(out_dir / "plan.json", plan.model_dump(mode="json"))
    log.info("afbench: experiment %s: %d runs -> %s", plan.experiment, len(plan.runs), out_dir)
    try:
        statuses = execute_plan(plan, resume)
    finally:
        summary = build_report(out_dir)
        log.info("afbench: report %s", out_dir / "report.md")
    for line in summary.headline:
        log.info("%s", line)
    invalid_logs = [r.run_id for r in summary.runs if r.log_error]
    return 1 if "FAILED" in statuses.values() or invalid_logs else 0
