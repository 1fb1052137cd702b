"""Run an experiment: preflight, plan, launch every run serially, collect, compare, render."""

from __future__ import annotations

import hashlib
import logging
import time
from datetime import datetime, timezone
from pathlib import Path

from afbench.analysis.reading import reads_resumed_after, stop_reading
from afbench.assets.manifest import sha256_file
from afbench.config.models import AfbenchConfig
from afbench.errors import ConfigError, DiskFull, OutputError, PreflightError
from afbench.history import record_experiment
from afbench.history.provenance import provenance
from afbench.io import disk_full_line, is_no_space, release_reserve, reserve_space, reserve_used
from afbench.launch.eta import RunTimes
from afbench.launch.local import hold_interrupts, launch_run, skip_unrun, write_skipped
from afbench.logs import console
from afbench.messages import Message, as_written, say
from afbench.plan import add_round, make_plan, skip_reason
from afbench.preflight import run_preflight
from afbench.runspec import INTERRUPTED_REASON, AutoStop, Plan, Rerun, RunSpec, RunStatus
from afbench.store import (
    EXPERIMENT,
    EXPERIMENT_FILE,
    PLAN,
    PLAN_FILE,
    REPORT_MD,
    STATUS,
    STATUS_FILE,
    ExperimentRecord,
    RunDir,
    window_step_times,
)
from afbench.store.owner import claim
from afbench.store.resume import resume_index, resume_root, reuse_run

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


def preflight(
    conf: AfbenchConfig, out_dir: Path, show_all: bool = False, plan: Plan | None = None
) -> list:
    """Run the preflight checks (afbench.preflight) for ``conf`` and its planned runs
    (``plan``; made here, nothing written, when an engine's check needs the runs: torchtitan);
    log FAIL lines (all lines with ``show_all``) and raise PreflightError if any failed.

    Raises:
        ConfigError: planning fails (see :func:`afbench.plan.make_plan`).
    """
    if plan is None and conf.engine.name == "torchtitan":
        plan = make_plan(conf, out_dir)
    checks = run_preflight(
        conf,
        out_dir,
        min_free_gib=conf.preflight.min_free_gib,
        min_cann_date=conf.preflight.min_cann_date,
        runs=plan.runs if plan is not None else (),
    )
    for check in checks:
        if show_all or not check.ok:
            log.log(logging.INFO if check.ok else logging.ERROR, "%s", check.line())
    failed = [c for c in checks if not c.ok]
    if failed:  # the FAIL lines are printed above; the error names the count and the fix
        raise PreflightError(
            f"preflight: {len(failed)} check(s) failed (the [FAIL] lines above "
            "say what to do); nothing was run"
        )
    if not show_all:
        log.info("afbench: preflight: %d checks passed", len(checks))
    return checks


def input_hashes(conf: AfbenchConfig) -> dict[str, dict[str, str]]:
    """Content SHA-256 of the model folder and the data file, for the report."""
    model, data = Path(conf.model.path), Path(conf.data.path)
    return {
        "model": {"path": str(model), "sha256": content_sha256(model)},
        "data": {"path": str(data), "sha256": content_sha256(data)},
    }


def _count(plan: Plan, i: int) -> tuple[int, int]:
    """The progress count ``[k/N]`` of ``plan.runs[i - 1]`` (1-based ``i``): runs launched,
    so every rerun of a contended run (``plan.reruns``, all at or before ``i``) counts as one
    more run, in ``k`` and in ``N``."""
    return i + len(plan.reruns), len(plan.runs) + len(plan.reruns)


def _progress(i: int, n: int, run_id: str, status: RunStatus) -> None:
    reason = f"  ({status.reason.text})" if status.reason else ""
    log.info("[%d/%d] %-28s %-7s %7.1fs%s", i, n, run_id, status.status, status.wall_s, reason)


def _ends_round(plan: Plan, i: int) -> bool:
    """Whether ``plan.runs[i - 1]`` (1-based ``i``) is the last run of a verdict-phase round."""
    run = plan.runs[i - 1]
    if run.phase != plan.verdict_phase:
        return False
    nxt = plan.runs[i] if i < len(plan.runs) else None
    return nxt is None or (nxt.phase, nxt.repeat) != (run.phase, run.repeat)


def adaptive_round(plan: Plan, statuses: dict[str, str], elapsed_s: float) -> Plan:
    """After a complete round of the verdict phase under ``rounds=auto``: per variant still
    undecided, parse the measured steps of its pairs so far (the strict parse collect
    applies), look with :class:`afbench.verdict.SequentialTest` (the plan's design, each run's
    measured contention, time budget counted from the first run: ``elapsed_s``) and log its
    progress line. When this was the last planned round, a variant that stops is recorded in
    ``auto_stops`` (a failed, skipped or unparsable run of its pairs stops it as
    ``run_failed``), and the undecided ones get one more round
    (:func:`afbench.plan.add_round`); a pair set aside (contended, or holding an outlier run)
    does not count, so it is replaced by another round. Returns the new plan.
    """
    # compare imports pandas: not for task=check
    from afbench.analysis.errors import InvalidLog
    from afbench.compare import sequential_design, verdict_pairs
    from afbench.verdict import SequentialTest
    from afbench.verdict.sequential import RUN_FAILED_STOP

    assert plan.auto is not None  # only auto plans reach here
    design = sequential_design(plan.auto)
    verdict_runs = [r for r in plan.runs if r.phase == plan.verdict_phase]
    last_planned = verdict_runs[-1].run_id in statuses
    steps: dict[str, list[float]] = {}
    results: dict[str, object] = {}
    for r in verdict_runs:
        if statuses.get(r.run_id) == "OK":
            try:
                times = window_step_times(r, Path(r.run_dir))
                results[r.run_id] = RunDir(Path(r.run_dir)).result()
            except (InvalidLog, OSError, OutputError):
                continue  # no number: the pair is missing below and the variant stops
            steps[r.run_id] = [times[k] for k in sorted(times)]
    stops, undecided = dict(plan.auto_stops), []
    for variant in plan.variants:
        if variant == plan.baseline or variant in stops:
            continue
        rounds = {r.repeat for r in verdict_runs if r.variant == variant and r.run_id in statuses}
        pairs = verdict_pairs(plan, variant, steps, results)
        if len(pairs.baseline) < len(rounds):
            log.info(
                "afbench: %s vs %s: a run of round %d did not succeed; no more rounds",
                variant,
                plan.baseline,
                len(rounds),
            )
            stops[variant] = AutoStop(reason=RUN_FAILED_STOP, n_pairs=len(pairs.baseline))
            continue
        test = SequentialTest(
            design,
            pairs.baseline,
            pairs.variant,
            pairs.contended,
            pairs.detail,
            keep_contended=not plan.auto.set_aside_contended,
        )
        look = test.look(elapsed_s)
        log.info("afbench: %s vs %s: %s", variant, plan.baseline, look.message)
        if look.stop and last_planned:
            stops[variant] = AutoStop(reason=look.reason, n_pairs=look.n_pairs_run)
        elif last_planned:
            undecided.append(variant)
    plan = plan.model_copy(update={"auto_stops": stops})
    return add_round(plan, undecided) if undecided else plan


def execute_plan(
    plan: Plan,
    resume: dict[str, Path] | None = None,
    plan_path: Path | None = None,
    reserve: Path | None = None,
) -> dict[str, str]:
    """Run (or skip, or reuse from ``resume``) every RunSpec in order; returns run_id -> status.

    A write that finds the disk full (or freed the ``reserve``, :func:`afbench.io.reserve_space`)
    raises :class:`afbench.errors.DiskFull` before the next run starts.

    With ``verdict.rounds=auto`` the plan grows as it runs: after each round of the verdict phase
    :func:`adaptive_round` decides, logs the interval and appends the next round; the plan is
    rewritten atomically to ``plan_path`` (plan.json) after every change.

    On KeyboardInterrupt the current worker's process group is stopped (by the launcher), it
    and the remaining runs are recorded as SKIPPED :data:`afbench.runspec.INTERRUPTED_REASON`, and
    the interrupt is re-raised.
    """
    statuses: dict[str, str] = {}
    times = RunTimes()
    rerun_said = False  # the rerun note: on the first ETA line only
    started = time.monotonic()  # the time budget counts from the first run
    i = 0
    while i < len(plan.runs):
        run = plan.runs[i]
        i += 1
        full = reserve_used(reserve)
        if full:  # a write found the disk full (and freed the reserve): no run starts
            raise DiskFull(full)
        reason = skip_reason(plan, run, statuses)
        try:
            if reason:
                st = write_skipped(run, reason)
            elif resume and run.config_hash in resume:
                st = reuse_run(run, resume[run.config_hash])
            else:
                # the live spinner shares the log handler's console, so lines print above it
                k, n = _count(plan, i)
                with console.status(f"[{k}/{n}] {run.run_id} running"):
                    st = launch_run(run, quiet_s=plan.quiet_s(run))
                plan, st = rerun_contended(plan, i, st, plan_path)
        except KeyboardInterrupt:  # the launcher recorded this run SKIPPED, interrupted
            statuses[run.run_id] = "SKIPPED"
            with hold_interrupts():
                skip_unrun(plan.runs[i:], say(INTERRUPTED_REASON))
            raise
        except OSError as exc:
            if not is_no_space(exc):
                raise
            raise DiskFull(
                str(exc) if isinstance(exc, DiskFull) else disk_full_line(Path(run.run_dir))
            ) from None
        # a rerun stands in for the run it replaced: the skip rules look runs up by run_id
        statuses[run.run_id] = statuses[plan.runs[i - 1].run_id] = st.status
        _progress(*_count(plan, i), plan.runs[i - 1].run_id, st)
        if plan.rounds == "auto" and _ends_round(plan, i):
            grown = adaptive_round(plan, statuses, time.monotonic() - started)
            if grown != plan and plan_path is not None:
                PLAN_FILE.write(plan_path, grown)
            plan = grown
        n = len(plan.runs)
        if not reason:
            times.add(plan.runs[i - 1], st)  # the rerun, where the run was rerun
        line = times.eta_line(plan.runs[i:]) if i < n else None
        if i < n:
            line = line or (
                f"ETA not known yet for {n - i} more run(s): no run has finished "
                f"here yet (failed and resumed runs teach nothing)"
            )
            more = [
                " (verdict.rounds=auto: more rounds may follow)"
                if plan.rounds == "auto" and not _auto_done(plan)
                else "",
                " (plus a rerun for each contended run: experiment.rerun_contended)"
                if plan.rerun_contended
                and not rerun_said
                and any(r.phase == plan.verdict_phase for r in plan.runs[i:])
                else "",
            ]
            rerun_said |= bool(more[1])
            log.info("      %s%s", line, "".join(more))
    return statuses


def judge_run(run: RunSpec) -> tuple[bool | None, list[Message]]:
    """:func:`afbench.analysis.contention.judge` of the contention record in ``run``'s
    result.json, its reasons as ``cont_reason_*`` messages; ``(None, [])`` when it has none
    (not measured, or no result)."""
    from afbench.analysis.contention import judge

    try:
        result = RunDir(Path(run.run_dir)).result()
    except OutputError:
        return None, []
    contended, reasons = judge(result.contention if result is not None else None)
    return contended, [say(code, **values) for code, values in reasons]


def rerun_contended(
    plan: Plan, i: int, st: RunStatus, plan_path: Path | None = None
) -> tuple[Plan, RunStatus]:
    """Run ``plan.runs[i - 1]`` (1-based ``i``, just launched with status ``st``) again while
    it is an OK verdict-phase or profile-phase run whose window was contended
    (:func:`judge_run`; a rerun contended again is logged as such), at
    most ``plan.rerun_contended`` times. Each rerun gets a new run directory
    ``<run_id>-rerun<k>`` and takes the run's place in ``plan.runs``; the contended run is
    kept, its status.json names the rerun (``replaced_by``) and ``plan.reruns`` records it
    with its reasons. plan.json is rewritten after each rerun. Returns the plan and the
    status of the run now at ``i``."""
    run = original = plan.runs[i - 1]
    measured = (plan.verdict_phase, plan.profile_phase)  # a profile's op times are measured too
    for k in range(1, plan.rerun_contended + 1):
        if run.phase not in measured or st.status != "OK":
            break
        contended, reasons = judge_run(run)
        if not contended:
            break
        new_id = f"{original.run_id}-rerun{k}"
        new = run.model_copy(
            update={"run_id": new_id, "run_dir": str(Path(run.run_dir).with_name(new_id))}
        )
        log.warning(
            "afbench: %s was contended (%s): running it again as %s (%d of at most %d; "
            "experiment.rerun_contended)",
            run.run_id,
            "; ".join(r.text for r in reasons),
            new_id,
            k,
            plan.rerun_contended,
        )
        mark = st.model_copy(
            update={
                "replaced_by": new_id,
                "reason": say("run_replaced_contended", reasons=reasons, run=new_id),
            }
        )
        STATUS_FILE.write(Path(run.run_dir) / STATUS, mark)
        runs = list(plan.runs)
        runs[i - 1] = new
        plan = plan.model_copy(
            update={
                "runs": runs,
                "reruns": [*plan.reruns, Rerun(replaced=run, by=new_id, reasons=reasons)],
            }
        )
        if plan_path is not None:
            PLAN_FILE.write(plan_path, plan)
        # the contended run keeps its own line; the rerun is one more run in the count
        k, n = _count(plan, i)
        _progress(k - 1, n, run.run_id, mark)
        with console.status(f"[{k}/{n}] {new_id} running (rerun of {run.run_id})"):
            st = launch_run(new, quiet_s=plan.quiet_s(new))
        run = new
    if run is not original and st.status == "OK":
        again, reasons = judge_run(run)
        if again:  # it never decides: the report's runs table names it "contended again"
            log.warning(
                "afbench: %s (rerun of %s) was contended again (%s): set aside, like "
                "the run it replaced",
                run.run_id,
                original.run_id,
                "; ".join(r.text for r in reasons),
            )
    return plan, st


def _auto_done(plan: Plan) -> bool:
    return all(v in plan.auto_stops for v in plan.variants if v != plan.baseline)


def run_experiment(
    conf: AfbenchConfig, out_dir: Path, job_num: int | None = None, checks: list | None = None
) -> int:
    """Plan, launch, collect, compare and render into ``out_dir``; returns the exit code
    (0 all runs OK or SKIPPED by a backend, 1 if any run FAILED). ``checks``: the preflight
    the caller already ran for this config (before ``out_dir`` existed); None runs it here."""
    out_dir = Path(out_dir)
    claim(out_dir)  # OutputBusy (exit 2) when another afbench owns it
    if (out_dir / PLAN).exists():
        raise ConfigError(
            f"{out_dir} already holds an experiment; an output directory is never reused"
        )
    plan = make_plan(conf, out_dir, job_num)
    if conf.verdict.rounds != "auto" and conf.verdict.time_budget_s is not None:
        log.warning(
            "afbench: verdict.time_budget_s=%g is ignored: it applies only with "
            "verdict.rounds=auto (this run has verdict.rounds=%s)",
            conf.verdict.time_budget_s,
            conf.verdict.rounds,
        )
    resume = None
    if conf.resume:
        root = resume_root(Path(conf.resume), job_num)
        resume = resume_index(root) if root is not None else {}
    if resume is not None:
        hits = sum(r.config_hash in resume for r in plan.runs)
        log.info(
            "afbench: resume: %d of %d runs have an OK result in %s%s",
            hits,
            len(plan.runs),
            conf.resume,
            "" if hits else " (nothing to reuse: every run runs)",
        )
    if checks is None:
        preflight(conf, out_dir, plan=plan)
    else:
        log.info("afbench: preflight: %d checks passed", len(checks))
    assets = input_hashes(conf)
    from afbench.history.calibration import for_plan  # numpy: not for task=check

    kinds, calibration = for_plan(plan, conf.history.url) if conf.history.record else (None, None)
    if not conf.history.record and plan.rounds == 1 and len(plan.variants) > 1:
        log.info(
            "afbench: history.record=false: no host calibration is read or learnt, so a "
            "one-round verdict will be INCONCLUSIVE (the history database holds the "
            "calibration)"
        )
    reserve = reserve_space(out_dir)  # DiskFull when there is not even that much
    try:
        return _run_planned(conf, out_dir, plan, resume, kinds, calibration, assets, reserve)
    finally:
        release_reserve(reserve)


def _run_planned(
    conf: AfbenchConfig,
    out_dir: Path,
    plan: Plan,
    resume: dict[str, Path] | None,
    kinds: object,
    calibration: object,
    assets: dict,
    reserve: Path,
) -> int:
    """What :func:`run_experiment` writes: records, runs, report, history. A full disk ends
    it with one error line, the runs not run SKIPPED, the report written if it fits; 1."""
    from afbench.history.calibration import learn
    from afbench.report import (
        build_report,
        console_lines,
    )  # pandas, jinja2, matplotlib: not for task=check

    EXPERIMENT_FILE.write(
        out_dir / EXPERIMENT,
        ExperimentRecord.model_validate(
            {
                "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "config": conf,
                "assets": assets,
                "calibration": calibration,
                # host fingerprint, afbench version, git commit, CANN dates: for the history
                "provenance": provenance(
                    plan.runs[0].backend if plan.runs else None, conf.backend.cann_root
                ),
            }
        ),
    )
    PLAN_FILE.write(out_dir / PLAN, plan)
    log.info("afbench: experiment %s: %d runs -> %s", plan.experiment, len(plan.runs), out_dir)
    try:
        statuses = execute_plan(plan, resume, out_dir / PLAN, reserve)
        full = reserve_used(reserve)  # the last run's own files filled it
    except DiskFull as exc:
        full, statuses = str(exc), {}
    except BaseException:
        # a second Ctrl-C: the report is still written, from the logs read until then
        with hold_interrupts(), reads_resumed_after():
            build_report(out_dir, conf.report)
            log.info("afbench: report %s", out_dir / REPORT_MD)
        raise
    if full:
        skipped = skip_unrun(plan.runs, as_written(full))  # the disk-full line, with its paths
        log.error(
            "afbench: error: %s; the experiment stopped (%d later run(s) recorded SKIPPED)",
            full,
            skipped,
        )
    try:
        try:
            summary = build_report(out_dir, conf.report)
        except KeyboardInterrupt:  # while reading logs: the report, without the logs not read
            stop_reading("Ctrl-C while afbench wrote the report")
            with hold_interrupts(), reads_resumed_after():
                build_report(out_dir, conf.report)
                log.info("afbench: report %s", out_dir / REPORT_MD)
            raise
    except OSError as exc:
        if not is_no_space(exc):
            raise
        log.error(
            "afbench: error: no report (%s); re-render it once there is space: "
            "python -m afbench.report %s",
            exc,
            out_dir,
        )
        return 1
    log.info("afbench: report %s", out_dir / REPORT_MD)
    for line in console_lines(summary, conf.report.lang, conf.verbose, conf.report.template_dir):
        log.info("%s", line)
    if kinds is not None and full is None:
        learn(summary, kinds, out_dir, conf.history.url)
    record_experiment(out_dir, conf.history.url, conf.history.record)  # a warning at worst
    invalid_logs = [r.run_id for r in summary.runs if r.log_error]
    return 1 if full or "FAILED" in statuses.values() or invalid_logs else 0
