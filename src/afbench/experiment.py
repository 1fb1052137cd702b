"""Run an experiment: preflight, plan, launch every run serially, collect, compare, render."""

from __future__ import annotations

import hashlib
import logging
import shutil
import time
from datetime import datetime, timezone
from pathlib import Path

from afbench.assets.manifest import sha256_file
from afbench.config.models import AfbenchConfig
from afbench.errors import ConfigError, PreflightError
from afbench.io import read_json, write_json_atomic, write_text_atomic
from afbench.launch.local import launch_run, write_skipped
from afbench.logs import console
from afbench.plan import add_round, make_plan, skip_reason
from afbench.preflight import run_preflight
from afbench.runspec import INTERRUPTED, AutoStop, Plan, RunSpec, RunStatus

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
    from afbench.collect import window_step_times  # pandas: not for task=check

    try:
        spec = RunSpec.model_validate_json((run_dir / "runspec.json").read_text(encoding="utf-8"))
        if spec.config_hash != config_hash:
            return False
        window_step_times(spec, run_dir)
    except (OSError, ValueError):  # InvalidLog and pydantic's ValidationError are ValueErrors
        return False
    return True


def check_log(run: RunSpec, st: RunStatus) -> RunStatus:
    """A run whose worker succeeded but whose step log breaks the strict rules (a measured
    step missing, twice, non-numeric: afbench.analysis.steplog) has no number for the verdict:
    it is FAILED with the parse error as its reason, in status.json too, so the progress line,
    the skip rules and the exit code say why."""
    from afbench.analysis.errors import InvalidLog
    from afbench.collect import window_step_times  # pandas: not for task=check

    if st.status != "OK":
        return st
    try:
        window_step_times(run, Path(run.run_dir))
    except InvalidLog as exc:
        st = st.model_copy(update={"status": "FAILED", "reason": f"invalid step log: {exc}"})
        write_json_atomic(Path(run.run_dir) / "status.json", st.model_dump())
    return st


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


class RunTimes:
    """What runs have cost so far, to predict the rest (the progress line's ETA).

    A run's wall time is split into a fixed part (process start-up, model load and its first
    step, which carries torch.compile's compilation) and its steady steps: ``wall = fixed +
    (steps - 1) * step``, with ``step`` the median of its measured window and ``fixed`` what
    remains. Both are learnt per kind of run, ``(compiled, profiled)``: a compiled run's first
    step can be minutes where an eager one's is a second. A kind not seen yet borrows the
    nearest kind's numbers, and a compiled kind that has not run yet makes the estimate a
    lower bound, which :meth:`eta_line` says.
    """

    def __init__(self) -> None:
        self.seen: dict[tuple[bool, bool], list[tuple[float, float]]] = {}

    @staticmethod
    def kind(run: RunSpec) -> tuple[bool, bool]:
        o = run.config.optimization
        return bool(o.autofuse or o.npugraph_ex), bool(o.profiler)

    def add(self, run: RunSpec, st: RunStatus) -> None:
        """Learn from a run that really ran (OK, its measured window parsed); else nothing."""
        from afbench.collect import window_step_times  # pandas: not for task=check

        if st.status != "OK" or st.reason.startswith("resumed"):
            return
        try:
            times = sorted(window_step_times(run, Path(run.run_dir)).values())
        except (OSError, ValueError):
            return
        step = times[len(times) // 2]
        fixed = max(0.0, st.wall_s - (run.config.scheduler.steps - 1) * step)
        self.seen.setdefault(self.kind(run), []).append((fixed, step))

    def _model(self, kind: tuple[bool, bool]) -> tuple[float, float, bool] | None:
        """(fixed s, step s, known) for ``kind``: its own mean, else the same compile kind's,
        else any kind's (known False when the compile kind has not run)."""
        for cand in (kind, (kind[0], not kind[1]), (not kind[0], kind[1]),
                     (not kind[0], not kind[1])):
            if self.seen.get(cand):
                fixed, step = (sum(x) / len(self.seen[cand]) for x in zip(*self.seen[cand]))
                return fixed, step, cand[0] == kind[0]
        return None

    def eta_line(self, runs: list[RunSpec]) -> str | None:
        """``ETA 3.9 min for 3 more run(s)``, ``ETA >= 0.6 min ... (compile time not known
        yet: no compiled run has finished)``, or None when no run has taught anything."""
        total, unknown = 0.0, False
        for run in runs:
            model = self._model(self.kind(run))
            if model is None:
                return None
            fixed, step, known = model
            total += fixed + (run.config.scheduler.steps - 1) * step
            unknown |= not known
        bound = ">= " if unknown else ""
        note = " (compile time not known yet: no compiled run has finished)" if unknown else ""
        return f"ETA {bound}{total / 60:.1f} min for {len(runs)} more run(s){note}"


def _ends_round(plan: Plan, i: int) -> bool:
    """Whether ``plan.runs[i - 1]`` (1-based ``i``) is the last run of a verdict-phase round."""
    run = plan.runs[i - 1]
    if run.phase != plan.verdict_phase:
        return False
    nxt = plan.runs[i] if i < len(plan.runs) else None
    return nxt is None or (nxt.phase, nxt.repeat) != (run.phase, run.repeat)


def adaptive_round(plan: Plan, statuses: dict[str, str], elapsed_s: float) -> Plan:
    """After a complete round of the verdict phase under ``repeats=auto``: per variant still
    undecided, parse the measured steps of its pairs so far (the strict parse collect
    applies), ask :func:`afbench.analysis.sequential.sequential_decision` (the plan's design,
    time budget counted from the first run: ``elapsed_s``) and log its progress line. When
    this was the last planned round, a variant that stops is recorded in ``auto_stops`` (a
    failed, skipped or unparsable run of its pairs stops it as ``run_failed``), and the
    undecided ones get one more round (:func:`afbench.plan.add_round`). Returns the new plan.
    """
    # compare and collect import pandas: not for task=check
    from afbench.analysis.errors import InvalidLog
    from afbench.analysis.sequential import sequential_decision
    from afbench.collect import window_step_times
    from afbench.compare import RUN_FAILED_STOP, sequential_design, verdict_pairs

    assert plan.auto is not None  # only auto plans reach here
    design = sequential_design(plan.auto)
    verdict_runs = [r for r in plan.runs if r.phase == plan.verdict_phase]
    last_planned = verdict_runs[-1].run_id in statuses
    steps: dict[str, list[float]] = {}
    for r in verdict_runs:
        if statuses.get(r.run_id) == "OK":
            try:
                times = window_step_times(r, Path(r.run_dir))
            except (InvalidLog, OSError):
                continue  # no number: the pair is missing below and the variant stops
            steps[r.run_id] = [times[k] for k in sorted(times)]
    stops, undecided = dict(plan.auto_stops), []
    for variant in plan.variants:
        if variant == plan.baseline or variant in stops:
            continue
        rounds = {r.repeat for r in verdict_runs if r.variant == variant
                  and r.run_id in statuses}
        base, var = verdict_pairs(plan, variant, steps)
        if len(base) < len(rounds):
            log.info("afbench: %s vs %s: a run of pair %d did not succeed; no more pairs",
                     variant, plan.baseline, len(rounds))
            stops[variant] = AutoStop(reason=RUN_FAILED_STOP, n_pairs=len(base))
            continue
        decision = sequential_decision(base, var, design, elapsed_s=elapsed_s)
        log.info("afbench: %s vs %s: %s", variant, plan.baseline, decision.message)
        if decision.stop and last_planned:
            stops[variant] = AutoStop(reason=decision.reason, n_pairs=decision.n_pairs)
        elif last_planned:
            undecided.append(variant)
    plan = plan.model_copy(update={"auto_stops": stops})
    return add_round(plan, undecided) if undecided else plan


def execute_plan(plan: Plan, resume: dict[str, Path] | None = None,
                 plan_path: Path | None = None) -> dict[str, str]:
    """Run (or skip, or reuse from ``resume``) every RunSpec in order; returns run_id -> status.

    With ``repeats="auto"`` the plan grows as it runs: after each round of the verdict phase
    :func:`adaptive_round` decides, logs the interval and appends the next round; the plan is
    rewritten atomically to ``plan_path`` (plan.json) after every change.

    On KeyboardInterrupt the current worker's process group is stopped (by the launcher), it
    and the remaining runs are recorded as SKIPPED :data:`afbench.runspec.INTERRUPTED`, and
    the interrupt is re-raised.
    """
    statuses: dict[str, str] = {}
    times = RunTimes()
    started = time.monotonic()  # the time budget counts from the first run
    i = 0
    while i < len(plan.runs):
        run = plan.runs[i]
        i += 1
        reason = skip_reason(plan, run, statuses)
        try:
            if reason:
                st = write_skipped(run, reason)
            elif resume and run.config_hash in resume:
                st = reuse_run(run, resume[run.config_hash])
            else:
                # the live spinner shares the log handler's console, so lines print above it
                with console.status(f"[{i}/{len(plan.runs)}] {run.run_id} running"):
                    st = check_log(run, launch_run(run))
        except KeyboardInterrupt:  # the launcher recorded this run SKIPPED, INTERRUPTED
            statuses[run.run_id] = "SKIPPED"
            for rest in plan.runs[i:]:
                write_skipped(rest, INTERRUPTED)
            raise
        statuses[run.run_id] = st.status
        _progress(i, len(plan.runs), run.run_id, st)
        if plan.repeats == "auto" and _ends_round(plan, i):
            grown = adaptive_round(plan, statuses, time.monotonic() - started)
            if grown != plan and plan_path is not None:
                write_json_atomic(plan_path, grown.model_dump(mode="json"))
            plan = grown
        n = len(plan.runs)
        if not reason:
            times.add(run, st)
        line = times.eta_line(plan.runs[i:]) if i < n else None
        if i < n:
            line = line or f"ETA not known yet for {n - i} more run(s): no run has succeeded yet"
            log.info("      %s%s", line, " (repeats=auto: more rounds may follow)"
                     if plan.repeats == "auto" and not _auto_done(plan) else "")
    return statuses


def _auto_done(plan: Plan) -> bool:
    return all(v in plan.auto_stops for v in plan.variants if v != plan.baseline)


def run_experiment(conf: AfbenchConfig, out_dir: Path, job_num: int | None = None,
                   checks: list | None = None) -> int:
    """Plan, launch, collect, compare and render into ``out_dir``; returns the exit code
    (0 all runs OK or SKIPPED by a backend, 1 if any run FAILED). ``checks``: the preflight
    the caller already ran for this config (before ``out_dir`` existed); None runs it here."""
    from afbench.report import build_report  # pandas, jinja2, matplotlib: not for task=check

    out_dir = Path(out_dir)
    if (out_dir / "plan.json").exists():
        raise ConfigError(f"{out_dir} already holds an experiment; an output directory is never reused")
    plan = make_plan(conf, out_dir, job_num)
    if conf.experiment.repeats != "auto" and conf.experiment.time_budget_s is not None:
        log.warning("afbench: experiment.time_budget_s=%g is ignored: it applies only with "
                    "experiment.repeats=auto (this run has repeats=%s)",
                    conf.experiment.time_budget_s, conf.experiment.repeats)
    resume = resume_index(Path(conf.resume)) if conf.resume else None
    if resume is not None:
        hits = sum(r.config_hash in resume for r in plan.runs)
        log.info("afbench: resume: %d of %d runs have an OK result in %s%s", hits,
                 len(plan.runs), conf.resume,
                 "" if hits else " (nothing to reuse: every run runs)")
    if checks is None:
        preflight(conf, out_dir)
    else:
        log.info("afbench: preflight: %d checks passed", len(checks))
    assets = input_hashes(conf)
    write_json_atomic(out_dir / "experiment.json", {
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "config": conf.model_dump(mode="json"),
        "assets": assets,
    })
    write_json_atomic(out_dir / "plan.json", plan.model_dump(mode="json"))
    log.info("afbench: experiment %s: %d runs -> %s", plan.experiment, len(plan.runs), out_dir)
    try:
        statuses = execute_plan(plan, resume, out_dir / "plan.json")
    finally:
        summary = build_report(out_dir)
        log.info("afbench: report %s", out_dir / "report.md")
    for line in summary.headline:
        log.info("%s", line)
    invalid_logs = [r.run_id for r in summary.runs if r.log_error]
    return 1 if "FAILED" in statuses.values() or invalid_logs else 0
